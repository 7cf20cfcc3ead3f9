"""A lower-class job's sockets paced between the workload's updates (agent.qos_pace's `join`), on
a real kernel: a process of job `bulk` that the monitor's last update did not see connects over
loopback; the monitor's `opened` lists its sockets, the pacer reads each one's peer (its
listener and its Unix socket are never flows), and the next period holds the TCP socket to the
link's limit before any update lists it."""

from __future__ import annotations

import os
import socket
import subprocess
import sys

import pytest

from clockfabric.agent.qos_pace import HostPacer
from clockfabric.qos import sockpace
from clockfabric.qos.pacing import Gains, LinkPacer
from clockfabric.qos.policy import make
from clockfabric.qos.shared import Shared
from clockfabric.workload.jobs import JOB_ENV
from clockfabric.workload.monitor import WorkloadMonitor
from clockfabric.workload.procfs import ProcFs

pytestmark = pytest.mark.skipif(os.geteuid() != 0, reason="needs root: pidfd_getfd on another process")
C = 100e6  # bits/s
BULK = """
import socket, sys, time
s = socket.create_connection(("127.0.0.1", int(sys.argv[1])))
listener = socket.create_server(("127.0.0.1", 0))
a, b = socket.socketpair()
print(s.fileno(), flush=True)
time.sleep(60)
"""


@pytest.fixture
def bulk():
    """A process of job `bulk` holding a connected TCP socket, a listener and a Unix pair: its pid,
    and its TCP socket's inode."""
    server = socket.create_server(("127.0.0.1", 0))
    proc = subprocess.Popen([sys.executable, "-c", BULK, str(server.getsockname()[1])],
                            env={**os.environ, JOB_ENV: "bulk"}, stdout=subprocess.PIPE, text=True)
    try:
        server.settimeout(10)
        conn, peer = server.accept()
        fd = int(proc.stdout.readline())
        yield proc.pid, int(os.readlink(f"/proc/{proc.pid}/fd/{fd}")[len("socket:["):-1])
        conn.close()
    finally:
        proc.kill()
        proc.wait()
        server.close()


def test_a_new_lower_class_socket_is_paced_before_an_update_lists_it(bulk, tmp_path):
    pid, inode = bulk
    monitor = WorkloadMonitor(ProcFs(), None)
    opened = monitor.opened({"bulk"})
    assert {(j, p) for j, p, _, _ in opened} == {("bulk", pid)}
    assert len(opened) == 4  # the TCP socket, the listener, the Unix pair
    assert monitor.opened({"ddp"}) == []  # only the jobs asked for
    pacer = HostPacer({"lo": int(C)}, tmp_path / "h0.paced", window_s=2.0)
    try:
        pacer.join(opened)
        assert pacer.joined == {(pid, inode): ("bulk", "127.0.0.1")}
        assert len(pacer.not_flows) == 3  # never looked at again
        policies = [make("ddp", "critical"), make("bulk", "scavenger")]
        queue = {">127.0.0.1": Shared(rank=0, queue_s=0.2, high_bps=30e6, low_weight=0)}  # another host's
        paced = pacer.step([], {}, policies, queue)
        law = LinkPacer(C, Gains(period_s=2.0)).step(30e6, 0.2)  # a last hop: read once a window
        assert law is not None and paced == {(pid, inode): round(law / 8)}
        assert sockpace.max_rate(pid, inode) == paced[(pid, inode)]
        pacer.join([o for o in opened if o[2] != inode])  # the update lists it now: it leaves the join
        assert pacer.joined == {} and pacer.joined_ever == 1
    finally:
        pacer.release()
    assert sockpace.max_rate(pid, inode) == sockpace.UNLIMITED
