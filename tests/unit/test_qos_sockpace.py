"""Pacing another process's socket on a real kernel (qos.sockpace), in a network namespace of the
test's own: a sender process that knows nothing of it is held to the rate set through
pidfd_getfd on its socket, and runs free again once the rate is set back to no limit, as a
restarted agent sets back what the state file says a killed one had paced."""

from __future__ import annotations

import os
import socket
import subprocess
import sys
import threading
import time

import pytest
from pyroute2 import IPRoute
from pyroute2 import netns as pyroute_netns

from clockfabric import netns
from clockfabric.agent.qos_pace import release_left
from clockfabric.qos import sockpace

pytestmark = pytest.mark.skipif(os.geteuid() != 0, reason="needs root: a network namespace and pidfd_getfd")
PORT = 5611
LIMIT = 2_000_000  # bytes per second
SENDER = f"""
import socket
s = socket.create_connection(("127.0.0.1", {PORT}))
chunk = bytes(65536)
while True:
    s.sendall(chunk)
"""


class Counter:
    def __init__(self, conn: socket.socket):
        self.conn, self.bytes = conn, 0
        threading.Thread(target=self._read, daemon=True).start()

    def _read(self) -> None:
        while data := self.conn.recv(1 << 20):
            self.bytes += len(data)

    def rate(self, seconds: float) -> float:
        start = self.bytes
        time.sleep(seconds)
        return (self.bytes - start) / seconds


@pytest.fixture
def ns():
    name = f"cf-pace-test-{os.getpid()}"
    pyroute_netns.create(name)
    try:
        with netns.entered(name), IPRoute() as ipr:
            ipr.link("set", index=ipr.link_lookup(ifname="lo")[0], state="up")
        yield name
    finally:
        pyroute_netns.remove(name)


def test_a_rate_set_through_pidfd_getfd_holds_another_process_to_it(ns, tmp_path):
    with netns.entered(ns):
        server = socket.create_server(("127.0.0.1", PORT))
    sender = subprocess.Popen(["ip", "netns", "exec", ns, sys.executable, "-c", SENDER])
    try:
        server.settimeout(10)
        conn, _ = server.accept()
        counter = Counter(conn)
        fds = f"/proc/{sender.pid}/fd/"
        inode = next(int(link[len("socket:["):-1]) for n in os.listdir(fds)
                     if (link := os.readlink(fds + n)).startswith("socket:["))
        free = counter.rate(0.5)
        assert free > 10 * LIMIT, free
        fd = sockpace.set_max_rate(sender.pid, inode, LIMIT)
        assert sockpace.set_max_rate(sender.pid, inode, LIMIT, fd=0) == fd  # a stale number: looked up again
        assert sockpace.max_rate(sender.pid, inode) == LIMIT
        time.sleep(0.3)  # what was already queued drains
        paced = counter.rate(1.0)
        assert 0.6 * LIMIT < paced < 1.3 * LIMIT, paced
        state = tmp_path / "h0.paced"  # what a killed agent left: its restart sets it back
        state.write_text(f"[[{sender.pid}, {inode}], [{sender.pid}, {inode + 1_000_000}]]")
        assert release_left(state) == 1 and not state.exists()
        assert sockpace.max_rate(sender.pid, inode) == sockpace.UNLIMITED
        assert counter.rate(0.5) > 10 * LIMIT
        with pytest.raises(sockpace.Gone):  # a socket the process does not hold
            sockpace.set_max_rate(sender.pid, inode + 1_000_000, LIMIT)
    finally:
        sender.kill()
        sender.wait()
        server.close()
    with pytest.raises(sockpace.Gone):
        sockpace.set_max_rate(sender.pid, inode, LIMIT)
