"""QoS on a real kernel, in a network namespace of the test's own: a policed job's packets leave
with its class's DSCP (read off the wire by a packet socket), others' do not, a job's own DSCP
stays, egress is shaped where the root qdisc is the kernel's and left alone where it is not,
a refused policy changes nothing, and what a killed agent left is removed by tag alone; through
a shaped NIC between two namespaces, the spare goes to the higher class first."""

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
from clockfabric.qos.enforce import Enforcer, remove_all, shape_classes
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


def _connect(tos: int = 0, address: str = "127.0.0.1") -> tuple[socket.socket, int]:
    c = socket.socket()
    if tos:
        c.setsockopt(socket.IPPROTO_IP, socket.IP_TOS, tos)
    c.connect((address, PORT))
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


def _htb_classes(dev: str) -> dict[int, tuple[int, int]]:
    """Our htb's leaf classes on the NIC, as the kernel holds them: minor -> (rate in bytes/s, prio)."""
    with IPRoute() as ipr:
        out = {}
        for c in ipr.get_classes(ipr.link_lookup(ifname=dev)[0]):
            parms = c.get_attr("TCA_OPTIONS").get_attr("TCA_HTB_PARMS")
            if c["handle"] >> 16 == tc.SHAPE_HANDLE >> 16 and c["handle"] != tc.SHAPE_ROOT_CLASS:
                out[c["handle"] & 0xFFFF] = (parms["rate"], parms["prio"])
        return out


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
        # each class guaranteed its weight's share, and the spare lent to the higher class first
        assert _htb_classes("qd0") == {0x10: (70 * 1_000_000 // 8, 0), 0x11: (25 * 1_000_000 // 8, 1),
                                       0x12: (5 * 1_000_000 // 8, 2)}

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


@pytest.fixture
def wire():
    """Two namespaces joined by a veth pair, 10.99.0.1 (qa) - 10.99.0.2 (qb): the sender's NIC qa."""
    names = (f"cf-qos-a-{os.getpid()}", f"cf-qos-b-{os.getpid()}")
    for name in names:
        pyroute_netns.create(name)
    try:
        with netns.entered(names[0]), IPRoute() as ipr:
            ipr.link("add", ifname="qa", kind="veth", peer={"ifname": "qb", "net_ns_fd": names[1]})
            ipr.addr("add", index=ipr.link_lookup(ifname="qa")[0], address="10.99.0.1", prefixlen=30)
            ipr.link("set", index=ipr.link_lookup(ifname="qa")[0], state="up")
        with netns.entered(names[1]), IPRoute() as ipr:
            ipr.addr("add", index=ipr.link_lookup(ifname="qb")[0], address="10.99.0.2", prefixlen=30)
            ipr.link("set", index=ipr.link_lookup(ifname="qb")[0], state="up")
        yield names
    finally:
        for name in names:
            pyroute_netns.remove(name)


def test_a_busy_scavenger_keeps_its_share_and_the_spare_goes_to_the_critical_class(wire):
    """Both classes send all they can through a shaped 20 Mbit/s NIC, the normal class idle: the
    critical class takes its 70% and the normal class's idle 25%, the scavenger its 5% (with one
    htb prio the spare would be split evenly: 82.5% against 17.5%)."""
    sender, receiver = wire
    with netns.entered(receiver):
        server = socket.socket()
        server.bind(("10.99.0.2", PORT))
        server.listen()
    with netns.entered(sender):
        with IPRoute() as ipr:
            index = ipr.link_lookup(ifname="qa")[0]
            classes = shape_classes({"critical": 70, "normal": 25, "scavenger": 5})
            assert tc.shape(ipr, index, 20_000_000, classes, 0x11) == ""
        critical, _ = _connect(tos=26 << 2, address="10.99.0.2")
        scavenger, _ = _connect(tos=1 << 2, address="10.99.0.2")
    got: dict[int, int] = {}
    stop = threading.Event()

    def sink(conn: socket.socket, port: int) -> None:
        conn.settimeout(0.5)
        while not stop.is_set():
            try:
                got[port] = got.get(port, 0) + len(conn.recv(65536))
            except TimeoutError:
                pass

    def blast(s: socket.socket) -> None:
        s.settimeout(0.5)
        while not stop.is_set():
            try:
                s.send(b"z" * 65536)
            except TimeoutError:
                pass
    threads, conns = [], []
    for _ in range(2):
        conn, (_, port) = server.accept()
        conns.append(conn)
        threads.append(threading.Thread(target=sink, args=(conn, port), daemon=True))
    threads += [threading.Thread(target=blast, args=(s,), daemon=True) for s in (critical, scavenger)]
    for t in threads:
        t.start()
    time.sleep(1.0)  # both flows past slow start
    before = dict(got)
    time.sleep(3.0)
    sent = {s: got[s.getsockname()[1]] - before.get(s.getsockname()[1], 0) for s in (critical, scavenger)}
    stop.set()
    for t in threads:
        t.join(2)
    for s in (critical, scavenger, server, *conns):
        s.close()
    share = sent[critical] / (sent[critical] + sent[scavenger])
    rate = (sent[critical] + sent[scavenger]) * 8 / 3.0
    assert 0.9 < share < 0.99, (share, sent)
    assert 15e6 < rate < 21e6, rate  # the link is full, at its shaped rate
