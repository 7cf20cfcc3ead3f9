"""Pacing another process's TCP sockets without a qdisc and without touching the program.

The agent takes a duplicate of the socket from its process (pidfd_open + pidfd_getfd: Linux 5.6,
CAP_SYS_PTRACE over the process, i.e. root) and sets SO_MAX_PACING_RATE on it. The option lives
on the socket, not on the descriptor, so the process's own descriptor is paced too; TCP paces
itself to it without the fq qdisc (Linux 4.13). ~0 is the kernel's "no limit". The duplicate is
closed at once: the process's socket lives on as before.
"""

from __future__ import annotations

import ctypes
import errno
import os
import socket
import stat
import struct

SO_MAX_PACING_RATE = 47  # asm-generic/socket.h
UNLIMITED = (1 << 64) - 1  # ~0: no limit
_SYS_PIDFD_GETFD = 438  # x86_64 and arm64 share it (the generic table since 5.6)
_libc = ctypes.CDLL(None, use_errno=True)
SOCKET_LINK = "socket:["


class Gone(LookupError):
    """The process or its socket is no longer there."""


class NeverAFlow(ValueError):
    """A socket that will not carry a TCP flow: not TCP, or a listener."""


def _pidfd_getfd(pidfd: int, fd: int) -> int:
    got = _libc.syscall(_SYS_PIDFD_GETFD, pidfd, fd, 0)
    if got < 0:
        err = ctypes.get_errno()
        if err in (errno.EBADF, errno.ESRCH):
            raise Gone(f"fd {fd} is gone")
        raise OSError(err, f"pidfd_getfd: {os.strerror(err)}")
    return int(got)


def fd_of(pid: int, inode: int, proc: str = "/proc") -> int | None:
    """The process's descriptor number for the socket with this inode (None: it has none)."""
    want, fds = f"{SOCKET_LINK}{inode}]", f"{proc}/{pid}/fd/"
    try:
        names = os.listdir(fds)
    except (FileNotFoundError, ProcessLookupError):
        raise Gone(f"process {pid} is gone") from None
    for name in names:
        try:
            if os.readlink(fds + name) == want:
                return int(name)
        except OSError:
            continue
    return None


def _dup(pid: int, inode: int, fd: int | None = None) -> tuple[socket.socket, int]:
    """A duplicate of process pid's socket with this inode, and its descriptor number there; `fd`:
    where it was last time (checked, else looked up again). Gone if the process or socket went."""
    for guess in ([fd] if fd is not None else []) + [None]:
        at = guess if guess is not None else fd_of(pid, inode)
        if at is None:
            break
        try:
            pidfd = os.pidfd_open(pid)
        except ProcessLookupError:
            raise Gone(f"process {pid} is gone") from None
        try:
            dup = _pidfd_getfd(pidfd, at)
        except Gone:
            continue
        finally:
            os.close(pidfd)
        st = os.fstat(dup)
        if not stat.S_ISSOCK(st.st_mode) or st.st_ino != inode:  # the number now holds another file
            os.close(dup)
            continue
        return socket.socket(fileno=dup), at
    raise Gone(f"socket {inode} is no longer open in process {pid}")


def set_max_rate(pid: int, inode: int, bytes_per_s: int, fd: int | None = None) -> int:
    """Set SO_MAX_PACING_RATE (bytes per second; UNLIMITED: none) on a socket of process pid,
    named by its inode; `fd`: where it was last time (checked, else looked up again). Returns the
    process's descriptor number for it. Gone if the process or socket went; OSError if the
    kernel refuses."""
    s, at = _dup(pid, inode, fd)
    with s:
        s.setsockopt(socket.SOL_SOCKET, SO_MAX_PACING_RATE, struct.pack("Q", min(bytes_per_s, UNLIMITED)))
    return at


def tcp_peer(pid: int, inode: int, fd: int | None = None) -> str | None:
    """The address a TCP socket of process pid is connected to (None: not yet). NeverAFlow for a
    socket that will not be (a Unix or UDP socket, a listener); Gone if the process or socket went."""
    s, _ = _dup(pid, inode, fd)
    with s:
        if (s.family not in (socket.AF_INET, socket.AF_INET6) or s.type != socket.SOCK_STREAM
                or s.getsockopt(socket.SOL_SOCKET, socket.SO_ACCEPTCONN)):
            raise NeverAFlow(f"socket {inode} of process {pid} carries no TCP flow")
        try:
            return str(s.getpeername()[0])
        except OSError:  # connecting, or never connected
            return None


def max_rate(pid: int, inode: int) -> int:
    """The socket's SO_MAX_PACING_RATE now, bytes per second (UNLIMITED: none)."""
    s, _ = _dup(pid, inode)
    with s:
        return int(struct.unpack("Q", s.getsockopt(socket.SOL_SOCKET, SO_MAX_PACING_RATE, 8))[0])
