"""QoS on a real kernel, in a network namespace of the test's own: a policed job's packets leave
with its class's DSCP (read off the wire by a packet socket), others' do not, a job's own DSCP
stays, egress is shaped where the root qdisc is the kernel's and left alone where it is not,
a refused policy changes nothing, and what a killed agent left is removed by tag alone."""

from __future__ import annotations

import os
import socket
import struct
import threading
import time

import pytest
from pyroute2 import IPRoute
from pyroute2 import netns as pyroute_netns

from clockfabric import netns
from clockfabric.qos import tc
from clockfabric.qos.enforce import Enforcer, remove_all
from clockfabric.qos.policy import make

pytestmark = pytest.mark.skipif(os.geteuid() != 0, reason="needs root: a network namespace, tc and bpf()")
SO_COOKIE, SO_RCVBUFFORCE, ETH_P_ALL = 57, 33, 0x0003
PORT = 5601


@pytest.fixture
def ns():
    name = f"cf-qos-test-{os.getpid()}"
    pyroute_netns.create(name)
    try:
        with netns.entered(name), IPRoute() as ipr:
            ipr.link("set", index=ipr.link_lookup(ifname="lo")[0], state="up")
            for nic in ("qd0", "qd1"):  # veth pairs: their root qdisc is the kernel's default
                ipr.link("add", ifname=nic, kind="veth", peer=f"{nic}p")
                ipr.link("set", index=ipr.link_lookup(ifname=nic)[0], state="up")
            # someone else's root qdisc on qd1: QoS must leave it as it is
            ipr.tc("add", "htb", ipr.link_lookup(ifname="qd1")[0], 0x10000, default=1)
        yield name
    finally:
        pyroute_netns.remove(name)


def _connect(tos: int = 0) -> tuple[socket.socket, int]:
    c = socket.socket()
    if tos:
        c.setsockopt(socket.IPPROTO_IP, socket.IP_TOS, tos)
    c.connect(("127.0.0.1", PORT))
    return c, int.from_bytes(c.getsockopt(socket.SOL_SOCKET, SO_COOKIE, 8), "little")


def _dscp_by_port(raw: socket.socket, ports: set[int]) -> dict[int, set[int]]:
    """The DSCP values seen on outgoing TCP packets, by their source port."""
    seen: dict[int, set[int]] = {}
    raw.settimeout(0.2)
    while True:
        try:
            frame, addr = raw.recvfrom(256)
        except TimeoutError:
            return seen
        if addr[2] != socket.PACKET_OUTGOING or frame[12:14] != b"\x08\x00" or frame[23] != socket.IPPROTO_TCP:
            continue
        ihl = (frame[14] & 0x0F) * 4
        sport = struct.unpack("!H", frame[14 + ihl:16 + ihl])[0]
        if sport in ports:
            seen.setdefault(sport, set()).add(frame[15] >> 2)


def _assert_nothing_of_ours() -> None:
    with IPRoute() as ipr:
        for dev in ("lo", "qd0", "qd1"):
            index = ipr.link_lookup(ifname=dev)[0]
            assert not tc.has_marks(ipr, index) and not tc.shaped(ipr, index), dev
            assert not any(q.get_attr("TCA_KIND") == "clsact" for q in ipr.get_qdiscs(index)), dev
        root = tc.root_qdisc(ipr, ipr.link_lookup(ifname="qd1")[0])
        assert root is not None and root["handle"] == 0x10000  # someone else's: still there


def test_marks_shaping_refusal_and_cleanup_on_a_real_kernel(ns):
    with netns.entered(ns):
        server = socket.socket()
        server.bind(("127.0.0.1", PORT))
        server.listen()
        received = []

        def serve():
            for _ in range(3):
                conn, _ = server.accept()
                threading.Thread(target=lambda c=conn: received.append(sum(iter(lambda: len(c.recv(65536)), 0))),
                                 daemon=True).start()
        threading.Thread(target=serve, daemon=True).start()
        raw = socket.socket(socket.AF_PACKET, socket.SOCK_RAW, socket.htons(ETH_P_ALL))
        raw.setsockopt(socket.SOL_SOCKET, SO_RCVBUFFORCE, 64 * 2**20)  # loopback frames are 64 kB
        raw.bind(("lo", 0))
        bulk, bulk_cookie = _connect()
        other, other_cookie = _connect()
        own, own_cookie = _connect(tos=8 << 2)  # the job marks DSCP 8 itself
        policies = [make("bulk", "scavenger", 5), make("own", "critical")]
        sockets = [("bulk", bulk_cookie), ("free", other_cookie), ("own", own_cookie)]

        # a refused step (a NIC that is not there) leaves nothing of ours anywhere
        broken = Enforcer({"lo": 0, "no-such-nic": 0})
        broken.update(policies, sockets)
        assert broken.refused and broken.refusals[0]["kind"] == "qos_refused", broken.refused
        with IPRoute() as ipr:
            assert not tc.has_marks(ipr, ipr.link_lookup(ifname="lo")[0])

        enforcer = Enforcer({"lo": 0, "qd0": 100_000_000, "qd1": 100_000_000})
        enforcer.update(policies, sockets)
        assert enforcer.refused == ""
        _dscp_by_port(raw, set())  # the handshakes, sent before the policy: not counted
        for s in (bulk, other, own):
            s.sendall(b"x" * 200_000)
        ports = {s.getsockname()[1] for s in (bulk, other, own)}
        seen = _dscp_by_port(raw, ports)
        assert seen[bulk.getsockname()[1]] == {1}, seen  # scavenger: LE
        assert seen[other.getsockname()[1]] == {0}, seen  # no policy: untouched
        assert seen[own.getsockname()[1]] == {8}, seen  # its own DSCP is kept without override
        marked = enforcer.marked()
        assert marked[bulk_cookie] > 0 and marked.get(own_cookie, 0) == 0, marked
        assert enforcer.shaping == {"lo": "not shaped: the link's rate is unknown", "qd0": "shaped",
                                    "qd1": "not shaped: a root qdisc htb 1: that clockfabric did not make"}

        # the agent is killed: what it left is found by its tags alone and removed
        assert sorted(remove_all(["lo", "qd0", "qd1"])) == ["lo", "qd0", "qd1"]
        _assert_nothing_of_ours()
        # a NIC that came back as a new device has nothing of ours: a stale enforcer puts it all on again
        enforcer.stale = True
        enforcer.update(policies, sockets)
        with IPRoute() as ipr:
            assert all(tc.has_marks(ipr, ipr.link_lookup(ifname=dev)[0]) for dev in ("lo", "qd0", "qd1"))
        enforcer.remove()  # the agent stops
        _assert_nothing_of_ours()
        bulk.sendall(b"y" * 100_000)
        assert _dscp_by_port(raw, {bulk.getsockname()[1]}) == {bulk.getsockname()[1]: {0}}
        for s in (bulk, other, own, raw, server):
            s.close()
        deadline = time.monotonic() + 2
        while len(received) < 3 and time.monotonic() < deadline:
            time.sleep(0.05)
        assert sorted(received) == [200_000, 200_000, 300_000]  # marked packets arrive intact
