"""Whether a member's process still lives, where a launcher (torchrun, srun) started it.

Each member keeps one TCP connection open to the coordinator and says its name on it; when
its process ends, however it ends (SIGKILL included), its kernel closes the connection, and
the coordinator knows within a tick, as it knows a child's exit. A frozen process keeps its
connection: its silent heartbeats tell that (train.detect). The board says where to connect.

What arrives is bounded: one line of at most NAME_MAX bytes within HELLO_S, a name of the
board's grammar, at most MAX_CONNECTIONS at once; anything else is closed and forgotten.
"""

from __future__ import annotations

import re
import selectors
import socket
import threading
import time

NAME_MAX = 128
HELLO_S = 5.0
MAX_CONNECTIONS = 4096
NAME = re.compile(r"[A-Za-z0-9_.:/@-]{1,128}")
KEY = "presence"  # on the job's board: the address members announce themselves to


class Presence(threading.Thread):
    """The coordinator's side: a listener on (address, any port), published on the board."""

    def __init__(self, address: str):
        super().__init__(name="train presence", daemon=True)
        self.listener = socket.create_server((address, 0), reuse_port=False)
        self.listener.setblocking(False)
        self.address = "{}:{}".format(*self.listener.getsockname()[:2])
        self.selector = selectors.DefaultSelector()
        self.selector.register(self.listener, selectors.EVENT_READ)
        self.pending: dict[socket.socket, tuple[float, bytes]] = {}  # connected, name not said yet
        self.named: dict[socket.socket, str] = {}
        self.ended: set[str] = set()  # names whose connection closed
        self.lock = threading.Lock()
        self.stopping = threading.Event()

    def gone(self, name: str) -> bool:
        with self.lock:
            return name in self.ended and name not in self.named.values()

    def run(self) -> None:
        while not self.stopping.is_set():
            for key, _ in self.selector.select(0.05):
                if key.fileobj is self.listener:
                    self._accept()
                else:
                    self._read(key.fileobj)  # type: ignore[arg-type]
            now = time.monotonic()
            for conn in [c for c, (since, _) in self.pending.items() if now - since > HELLO_S]:
                self._close(conn)

    def _accept(self) -> None:
        try:
            conn, _ = self.listener.accept()
        except OSError:
            return
        if len(self.pending) + len(self.named) >= MAX_CONNECTIONS:
            conn.close()
            return
        conn.setblocking(False)
        self.pending[conn] = (time.monotonic(), b"")
        self.selector.register(conn, selectors.EVENT_READ)

    def _read(self, conn: socket.socket) -> None:
        try:
            data = conn.recv(NAME_MAX + 1)
        except OSError:
            data = b""
        if conn in self.named:
            if not data:  # the process ended
                with self.lock:
                    self.ended.add(self.named.pop(conn))
                self._close(conn)
            return  # a named member says nothing more; what it sends is ignored
        since, got = self.pending[conn]
        got += data
        if b"\n" not in got:
            if not data or len(got) > NAME_MAX:
                self._close(conn)
            else:
                self.pending[conn] = (since, got)
            return
        name = got.split(b"\n", 1)[0].decode("ascii", "replace")
        del self.pending[conn]
        if not NAME.fullmatch(name):
            self._close(conn)
            return
        with self.lock:
            self.named[conn] = name
            self.ended.discard(name)

    def _close(self, conn: socket.socket) -> None:
        self.pending.pop(conn, None)
        self.named.pop(conn, None)
        try:
            self.selector.unregister(conn)
        except (KeyError, ValueError):
            pass
        conn.close()

    def stop(self) -> None:
        self.stopping.set()
        if self.is_alive():
            self.join(2)
        for conn in [*self.pending, *self.named]:
            conn.close()
        self.listener.close()


def announce(address: str, name: str, timeout_s: float = 5.0) -> socket.socket:
    """The member's side: the connection to hold for as long as the process lives."""
    host, port = address.rsplit(":", 1)
    conn = socket.create_connection((host, int(port)), timeout=timeout_s)
    conn.sendall(name.encode() + b"\n")
    return conn
