"""A rank's heartbeats: UDP datagrams to every peer over the lab network, and a report file.

Every `interval_s` the thread sends its name to each peer's heartbeat address, drains what it
received, and writes its report (the time, and how long since each peer was heard). So the
coordinator sees a frozen process (its report stops, and the process is stopped: `stopped`),
and an isolated host (its peers stop hearing it) within its detection time. The thread needs
Python's lock: on a loaded machine a running process's report can lag by seconds. When a generation names lost hosts, the thread shuts
this process's TCP sockets to them: a collective blocked on a host that will never answer
fails at once, instead of after the collective timeout.
"""

from __future__ import annotations

import os
import socket
import stat
import threading
import time
from pathlib import Path

from clockfabric.train import control


def split(beat: str) -> tuple[str, int]:
    address, port = beat.rsplit(":", 1)
    return address, int(port)


def shut_sockets_to(addresses: set[str]) -> int:
    """Shut down every connected TCP socket of this process whose peer is one of addresses."""
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
                    and sock.getpeername()[0].removeprefix("::ffff:") in addresses:
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
    def __init__(self, folder: Path, name: str, beat: str, interval_s: float = 0.1):
        super().__init__(name=f"heartbeat {name}", daemon=True)
        self.folder, self.name, self.beat, self.interval_s = folder, name, beat, interval_s
        self.rank: int | None = None  # set once this process holds a rank
        self.heard: dict[str, float] = {}
        self.fenced: set[str] = set()
        self.error: str | None = None  # the last beat that failed, in the report
        self.sock = socket.socket(socket.AF_INET, socket.SOCK_DGRAM)
        self.sock.bind(split(beat))
        self.sock.setblocking(False)
        self.stopping = threading.Event()

    def run(self) -> None:
        while not self.stopping.wait(self.interval_s):
            try:
                self.beat_once()
            except Exception as e:  # noqa: BLE001  # a thread that ended would read as a frozen process
                self.error = f"{type(e).__name__}: {e}"[:200]

    def beat_once(self) -> None:
        gen = control.read_generation(self.folder)
        peers = [b for b in gen.beats if b != self.beat] if gen else []
        self.drain()
        # the report before the fence and the sends: whatever they do, the process is seen alive
        self.report(gen, peers)
        if gen is not None and self.beat not in gen.lost:
            self.fence({split(b)[0] for b in gen.lost} - self.fenced)
        for peer in peers:
            try:
                self.sock.sendto(self.beat.encode(), split(peer))
            except OSError:  # no route while a link is down: the peer will miss us
                pass

    def report(self, gen: control.Generation | None, peers: list[str], done: bool = False) -> None:
        now = time.time()
        control.write_json(control.beat_path(self.folder, self.name), {
            "name": self.name, "pid": os.getpid(), "time": now, "rank": self.rank, "done": done,
            "generation": gen.number if gen else None, "error": self.error,
            "heard": {p: now - self.heard[p] for p in peers if p in self.heard}})

    def fence(self, addresses: set[str]) -> None:
        if addresses:
            shut_sockets_to(addresses)
            self.fenced |= addresses

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
        self.report(control.read_generation(self.folder), [], done=True)
