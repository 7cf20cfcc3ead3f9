"""/proc, read for the workload monitor: which processes there are, the job variables and
start time of each, its namespaces, and the sockets it holds. Every reading of a process that
has just exited (or that we may not read) is None or empty, never an error: processes come
and go between a listing and a read. `root` is /proc, or a test's recorded copy of one.
"""

from __future__ import annotations

import os
import time
from dataclasses import dataclass
from pathlib import Path

from clockfabric.workload.jobs import parse_environ

GONE = (FileNotFoundError, ProcessLookupError, PermissionError, NotADirectoryError)
# more pids than this handed out since the last look: /proc is listed instead of each pid read
MAX_MADE = 32
SOCKET_LINK = "socket:["


@dataclass(frozen=True)
class ProcessFacts:
    pid: int
    environ: dict[str, str]  # only the variables jobs.py reads
    cgroup: str
    start_s: float  # seconds since the epoch
    netns: int  # network namespace inode
    pidns: int  # PID namespace inode


class ProcFs:
    def __init__(self, root: str | Path = "/proc"):
        self.root = Path(root)
        self.boot_s = self._boot_time()
        self.ticks = os.sysconf("SC_CLK_TCK")

    def _boot_time(self) -> float:
        """When the machine booted, seconds since the epoch: for the live /proc from the clocks, to
        the microsecond (/proc/stat's btime is whole seconds: every process would look up to a
        second older than it is); for a recorded copy, its btime."""
        if self.root == Path("/proc"):
            return time.time() - time.clock_gettime(time.CLOCK_BOOTTIME)
        for line in (self.root / "stat").read_text().splitlines():
            if line.startswith("btime "):
                return float(line.split()[1])
        raise OSError(f"no btime in {self.root / 'stat'}")

    def pids(self) -> list[int]:
        return [int(name) for name in os.listdir(self.root) if name.isdigit()]

    def alive(self, pid: int) -> bool:
        """Whether the process is still there (a zombie is, until reaped, as a listing shows it)."""
        return os.path.exists(f"{self.root}/{pid}")

    def last_pid(self) -> int | None:
        """The last process id the kernel handed out (/proc/loadavg's last field; a thread's counts
        too): unchanged, no process was made since. None where it cannot be read."""
        try:
            with open(f"{self.root}/loadavg", "rb") as f:
                return int(f.read().split()[-1])
        except (OSError, ValueError, IndexError):
            return None

    def made(self, since: int, last: int) -> list[int] | None:
        """The processes whose pids lie from `since` to `last`, two readings of `last_pid`: those
        made between them, and `since` again (the kernel hands out a pid before its /proc entry
        appears). Threads take pids too and are not processes. None where the pids wrapped
        around or more than MAX_MADE were handed out: list /proc instead."""
        if not 0 <= last - since <= MAX_MADE:
            return None
        return [pid for pid in range(since, last + 1) if self._leads(pid)]

    def _leads(self, pid: int) -> bool:
        """A live process of that id, not a thread of another (a thread's /proc entry is there
        too, though no listing shows it)."""
        try:
            with open(f"{self.root}/{pid}/status", "rb") as f:
                for line in f:
                    if line.startswith(b"Tgid:"):
                        return int(line.split()[1]) == pid
        except (*GONE, ValueError, IndexError):
            return False
        return False

    def own_namespaces(self) -> tuple[int, int]:
        """(network, PID) namespace inodes of this process: what "ours" is."""
        return self._ns(self.root / "self", "net"), self._ns(self.root / "self", "pid")

    @staticmethod
    def _ns(proc: Path, kind: str) -> int:
        link = os.readlink(proc / "ns" / kind)  # "net:[4026531840]"
        return int(link[link.index("[") + 1:-1])

    def job_marks(self, pid: int) -> tuple[dict[str, str], str] | None:
        """What says a process is a job's: its job variables and its cgroup (None if gone)."""
        proc = f"{self.root}/{pid}/"
        try:
            with open(proc + "environ", "rb") as environ, open(proc + "cgroup") as cgroup:
                return parse_environ(environ.read()), cgroup.read()
        except GONE:
            return None

    def process(self, pid: int) -> ProcessFacts | None:
        proc = self.root / str(pid)
        if (marks := self.job_marks(pid)) is None:
            return None
        environ, cgroup = marks
        try:
            stat = (proc / "stat").read_text()
            netns, pidns = self._ns(proc, "net"), self._ns(proc, "pid")
        except GONE:
            return None
        # the command name (field 2) may hold spaces and parentheses: count fields after its last ')'
        start_ticks = int(stat[stat.rindex(")") + 2:].split()[19])
        return ProcessFacts(pid, environ, cgroup, self.boot_s + start_ticks / self.ticks, netns, pidns)

    def netns(self, pid: int) -> int | None:
        try:
            return self._ns(self.root / str(pid), "net")
        except GONE:
            return None

    def socket_inodes(self, pid: int) -> set[int]:
        """The inodes of the sockets among the process's open files."""
        return set(self.socket_fds(pid))

    def fds_stamp(self, pid: int) -> tuple[int, int] | None:
        """What changes when the process opens or closes a file: its fd folder's size (procfs
        gives the number of open files there, Linux 6.2) and change time (a recorded copy's
        folder). None if the process is gone."""
        try:
            st = os.stat(f"{self.root}/{pid}/fd")
        except GONE:
            return None
        return st.st_size, st.st_mtime_ns

    def socket_fds(self, pid: int) -> dict[int, int]:
        """The process's sockets: inode -> a descriptor number it has for it."""
        fds = f"{self.root}/{pid}/fd/"  # strings, not Paths: a job process may hold hundreds of fds
        try:
            names = os.listdir(fds)
        except GONE:
            return {}
        out: dict[int, int] = {}
        for name in names:
            try:
                link = os.readlink(fds + name)
            except GONE:
                continue
            if link.startswith(SOCKET_LINK):
                out[int(link[len(SOCKET_LINK):-1])] = int(name)
        return out
