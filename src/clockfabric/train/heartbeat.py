"""A member's heartbeats: UDP datagrams to every peer over the fabric, and a report on the board.

Every `interval_s` the thread sends its name to each peer's heartbeat address, drains what it
received, and writes its report (the time, and how long since each peer was heard). So the
coordinator sees a frozen process (its report stops, and the process is stopped: `stopped`),
and an isolated host (its peers stop hearing it) within its detection time. The thread needs
Python's lock: on a loaded machine a running process's report can lag by seconds. When a
generation names lost hosts, the thread shuts this process's TCP sockets to them, and to every
peer of its older group (`fence`): a collective blocked on a host that will never answer, or
on a survivor that waits for it, fails at once, instead of after the collective timeout.
"""

from __future__ import annotations

import os
import signal
import socket
import stat
import threading
import time
from pathlib import Path

from clockfabric.train import control


def split(beat: str) -> tuple[str, int]:
    address, port = beat.rsplit(":", 1)
    return address, int(port)


def shut_sockets_to(addresses: set[str], keep_ports: set[int] | None = None) -> int:
    """Shut down every connected TCP socket of this process whose peer is one of addresses,
    except those to keep_ports (the board's and the coordinator's, which may share a host with a peer)."""
    shut = 0
    for entry in os.scandir("/proc/self/fd"):
        try:
            fd = int(entry.name)
            if not stat.S_ISSOCK(os.fstat(fd).st_mode):
                continue
            sock = socket.socket(fileno=os.dup(fd))
        except (OSError, ValueError):
            continue
        try:
            # TCP only: a Unix socket's peer name is a path (an unnamed one's is '')
            if sock.family in (socket.AF_INET, socket.AF_INET6) and sock.type == socket.SOCK_STREAM \
                    and sock.getpeername()[0].removeprefix("::ffff:") in addresses \
                    and sock.getpeername()[1] not in (keep_ports or set()):
                sock.shutdown(socket.SHUT_RDWR)  # on the shared socket: the blocked reader wakes with an error
                shut += 1
        except OSError:
            pass
        finally:
            sock.close()  # the duplicate only
    return shut


def stopped(pid: int) -> bool:
    """Whether the process is stopped (SIGSTOP, or a tracer's stop): its heartbeats cannot come.
    A running process may miss beats too, while its heartbeat thread waits for Python's lock."""
    try:
        stat_line = Path(f"/proc/{pid}/stat").read_text()
    except OSError:
        return False
    return stat_line.rpartition(")")[2].split()[0] in ("T", "t")


class Heartbeat(threading.Thread):
    def __init__(self, board: control.Board, name: str, beat: str, interval_s: float = 0.1):
        super().__init__(name=f"heartbeat {name}", daemon=True)
        self.board = board.again()  # its own connection: the training thread uses the other
        self.name, self.interval_s = name, interval_s
        self.keep: set[int] = {board.port} if board.port else set()  # never shut: the board's, the coordinator's
        self.rank: int | None = None  # set once this process holds a rank
        self.heard: dict[str, float] = {}
        self.fenced: set[str] = set()
        self.error: str | None = None  # the last beat that failed, in the report
        # the group this process is in (its generation, its peers' addresses), set by the runtime
        # under the lock, so the fence never shuts a group formed after the loss it acts on
        self.lock = threading.Lock()
        self.group: tuple[int, set[str]] | None = None
        self.sock = socket.socket(socket.AF_INET, socket.SOCK_DGRAM)
        self.sock.bind(split(beat) if ":" in beat else (beat, 0))
        self.sock.setblocking(False)
        self.beat = "{}:{}".format(*self.sock.getsockname())  # the port bound, where none was given
        self.stopping = threading.Event()

    def run(self) -> None:
        while not self.stopping.wait(self.interval_s):
            try:
                self.beat_once()
            except Exception as e:  # noqa: BLE001  # a thread that ended would read as a frozen process
                self.error = f"{type(e).__name__}: {e}"[:200]

    def beat_once(self) -> None:
        gen = self.board.generation()
        peers = [b for b in gen.beats if b != self.beat] if gen else []
        if gen is not None and self.beat in gen.lost:
            os.kill(os.getpid(), signal.SIGKILL)  # fenced: lost once, this process never rejoins the job
        try:
            if gen is not None:
                self.fence(gen.number, {split(b)[0] for b in gen.lost} - self.fenced)
            for peer in peers:
                try:
                    self.sock.sendto(self.beat.encode(), split(peer))
                except OSError:  # no route while a link is down: the peer will miss us
                    pass
            self.drain()
        finally:
            # the report last, whatever failed: a process stopped after it is silent to its
            # peers no earlier than its report is stale, so it is judged frozen, not cut off
            self.report(gen, peers)

    def report(self, gen: control.Generation | None, peers: list[str], done: bool = False) -> None:
        now = time.time()
        self.board.write_report(self.name, {
            "name": self.name, "beat": self.beat, "pid": os.getpid(), "time": now, "rank": self.rank, "done": done,
            "generation": gen.number if gen else None, "error": self.error,
            "heard": {p: now - self.heard[p] for p in peers if p in self.heard}})

    def fence(self, number: int, addresses: set[str]) -> None:
        """Hosts lost, as generation `number` says: shut this process's sockets to them and, if
        the process is still in an older group, to every peer of that group. A survivor a step
        ahead of another waits on that survivor, not on the lost host: only the lost host's
        sockets shut, both waited out the collective timeout (30 s)."""
        if not addresses:
            return
        with self.lock:
            over = self.group[1] if self.group is not None and self.group[0] < number else set()
            shut_sockets_to(addresses | over, self.keep)
        self.fenced |= addresses

    def joined(self, number: int, peers: set[str]) -> None:
        """This process formed generation `number`'s group with peers (their addresses)."""
        with self.lock:
            self.group = (number, peers)

    def left(self) -> None:
        """No group: called before a new one is made, whose sockets the fence must not shut."""
        with self.lock:
            self.group = None

    def drain(self) -> None:
        while True:
            try:
                data, _ = self.sock.recvfrom(256)
            except (BlockingIOError, OSError):
                return
            self.heard[data.decode(errors="replace")] = time.time()

    def stop(self) -> None:
        """No more heartbeats: the last report says so, so the silence that follows is no loss."""
        self.stopping.set()
        if self.is_alive():
            self.join(1)
        self.report(self.board.generation(), [], done=True)
