"""A host's own egress queue read from the kernel, in a network namespace of the test's own: the
backlog's wait at the rate the queue drains at, a link slowed under its configured rate included;
and, where the link sorts packets into classes by DSCP, each class's own."""

from __future__ import annotations

import os
import socket
import struct
import time

import pytest
from pyroute2 import IPRoute
from pyroute2 import netns as pyroute_netns

from clockfabric import netns
from clockfabric.lab import shaping
from clockfabric.qos import qdisc_stats
from clockfabric.qos.backlog import EgressBacklog, u32_dscp
from clockfabric.topology import TrafficClasses

pytestmark = pytest.mark.skipif(os.geteuid() != 0, reason="needs root: network namespaces and tc")
CONFIGURED = 100_000_000
SLOWED = 1_000_000
FRAME = 1400


def veth(classes: TrafficClasses | None = None):
    """A veth out of the test's namespace into another, shaped as the lab shapes a link (with
    `classes`: its traffic classes), then slowed to 1 Mbit/s (a degraded link: its configured rate
    is not what it drains at)."""
    name, far = f"cf-backlog-{os.getpid()}", f"cf-backlog-far-{os.getpid()}"
    pyroute_netns.create(name)
    pyroute_netns.create(far)
    try:
        with netns.entered(name), IPRoute() as ipr:
            ipr.link("add", ifname="bq0", kind="veth", peer={"ifname": "bq0p", "net_ns_fd": far})
            index = ipr.link_lookup(ifname="bq0")[0]
            ipr.addr("add", index=index, address="10.250.0.1", prefixlen=24)
            ipr.link("set", index=index, state="up")
            # a neighbour entry of our own: packets go straight to the qdisc, with no ARP to wait on
            ipr.neigh("add", dst="10.250.0.2", lladdr="02:00:00:00:00:02", ifindex=index, state="permanent")
            shaping.shape(ipr, index, CONFIGURED, 1000, classes)
            shaping.set_rate(ipr, index, SLOWED, classes)
        with netns.entered(far), IPRoute() as ipr:  # its far end up: a carrier, so the qdisc sends
            ipr.link("set", index=ipr.link_lookup(ifname="bq0p")[0], state="up")
        yield name
    finally:
        pyroute_netns.remove(name)
        pyroute_netns.remove(far)


@pytest.fixture
def ns():
    yield from veth()


@pytest.fixture
def classes_ns():
    yield from veth(TrafficClasses())


def test_a_standing_queue_is_read_at_the_rate_it_drains_at(ns):
    with netns.entered(ns):
        backlog = EgressBacklog({"bq0": CONFIGURED})
        s = socket.socket(socket.AF_INET, socket.SOCK_DGRAM)
        try:
            assert backlog.read()[0] == {"bq0": 0.0}  # idle
            readings = []
            for _ in range(4):
                # 0.9 s of queue at 1 Mbit/s a round of 0.2 s: it stands and grows, and a reading
                # the machine's load holds back half a second still finds it
                for _ in range(80):
                    s.sendto(b"x" * FRAME, ("10.250.0.2", 9))
                time.sleep(0.2)
                readings.append(backlog.read()[0]["bq0"])
        finally:
            s.close()
            backlog.close()
    # the first busy reading knows no drain rate yet: the configured one, 100x too fast
    assert 0 < readings[0] < 0.01, readings
    # then the rate it drained at: a backlog of hundreds of kbit at 1 Mbit/s waits a tenth of a second or more
    assert all(r > 0.1 for r in readings[1:]), readings
    assert readings[-1] < 5.0, readings  # not a stopped link's: what it sent counts


def test_each_class_queue_is_read_apart_where_the_link_sorts_by_dscp(classes_ns):
    """Best-effort packets stand in their class's queue; the collective class's stays empty, the
    whole queue is theirs; a packet of the collective class would not wait behind them."""
    classes = TrafficClasses()
    with netns.entered(classes_ns):
        backlog = EgressBacklog({"bq0": CONFIGURED})
        s = socket.socket(socket.AF_INET, socket.SOCK_DGRAM)
        try:
            idle = backlog.read()[1]
            for _ in range(3):
                for _ in range(40):
                    s.sendto(b"x" * FRAME, ("10.250.0.2", 9))  # unmarked: best-effort, the default class
                time.sleep(0.2)
                both = backlog.read()
                whole, by_dscp = both[0]["bq0"], both[1]["bq0"]
            # a socket of its own: the first one's buffer is held by its packets still in the queue
            marked = socket.socket(socket.AF_INET, socket.SOCK_DGRAM)
            marked.setsockopt(socket.IPPROTO_IP, socket.IP_TOS, classes.collective_dscp[0] << 2)
            for _ in range(40):
                marked.sendto(b"x" * FRAME, ("10.250.0.2", 9))
            marked.close()
            collective = backlog.read()[1]["bq0"][classes.collective_dscp[0]]
        finally:
            s.close()
            backlog.close()
    named = {*classes.priority_dscp, *classes.collective_dscp}  # the DSCPs the lab's filters match
    assert set(idle["bq0"]) == named and not any(idle["bq0"].values()), idle
    assert set(by_dscp) == named and not any(by_dscp.values()), by_dscp  # best-effort has no filter
    assert whole > 0.1, whole
    # its own 40 packets, now queued in its class: read at the configured rate, the class's first busy reading
    assert 0.003 < collective < 0.01, collective


BURST = 6


def test_a_class_that_a_burst_fills_at_each_reading_drains_at_its_guaranteed_rate(classes_ns):
    """A probe round leaves in one burst, then nothing for seconds: two readings that each catch a
    burst in the priority class say nothing of the idle time between them. The class drains at
    the rate htb guarantees it (5% of a link at 20 Mbit/s), not at the few kbit/s it averaged."""
    classes, link = TrafficClasses(), 20_000_000
    with netns.entered(classes_ns):
        with IPRoute() as ipr:
            shaping.set_rate(ipr, ipr.link_lookup(ifname="bq0")[0], link, classes)
        backlog = EgressBacklog({"bq0": CONFIGURED})
        s = socket.socket(socket.AF_INET, socket.SOCK_DGRAM)
        s.setsockopt(socket.IPPROTO_IP, socket.IP_TOS, classes.priority_dscp[0] << 2)
        try:
            readings = []
            for _ in range(3):
                for _ in range(BURST):  # 8.4 kB: past the class's 3 kB bucket, so most of it stands
                    s.sendto(b"x" * FRAME, ("10.250.0.2", 9))
                readings.append(backlog.read()[1]["bq0"][classes.priority_dscp[0]])
                time.sleep(2.5)  # about 27 kbit/s on average, a fortieth of what the class is guaranteed
        finally:
            s.close()
            backlog.close()
    guaranteed = link * classes.priority_cap / 100
    # the first reading knows no drain rate yet; then what stands past the bucket at the guaranteed
    # rate, at most the burst less two frames: 45 ms, where the average rate would say a second
    assert all(0 < r <= (BURST - 2) * FRAME * 8 / guaranteed for r in readings[1:]), readings


def test_a_u32_selector_names_the_dscp_it_alone_matches():
    def sel(*keys: tuple[int, int, int], offmask: int = 0) -> bytes:
        head = struct.pack("=BBBxHhhhI", 1, 0, len(keys), offmask, 0, 0, 0, 0)
        return head + b"".join(struct.pack(">II", mask, val) + struct.pack("=ii", off, 0) for mask, val, off in keys)

    assert u32_dscp(sel((0xFC000000, 26 << 26, 1))) == 26  # as the kernel stores a DSCP match: the TOS byte first
    assert u32_dscp(sel((0x00FC0000, 46 << 18, 0))) == 46  # the same byte, read from the header's start
    assert u32_dscp(sel((0xFF000000, 26 << 26, 1))) is None  # ECN bits too: not the DSCP alone
    assert u32_dscp(sel((0xFC000000, 26 << 26, 1), (0xFFFFFFFF, 1, 12))) is None  # and an address
    assert u32_dscp(sel((0xFFFF0000, 0x0800 << 16, 8))) is None  # another field
    assert u32_dscp(sel((0xFC000000, 26 << 26, 1), offmask=0xFF)) is None
    assert u32_dscp(b"\x01\x02") is None  # cut short


def _nlmsg(kind: int, body: bytes) -> bytes:
    data = struct.pack("=IHHII", 16 + len(body), kind, 2, 1, 0) + body
    return data + b"\0" * (-len(data) % 4)


def _nla(kind: int, payload: bytes) -> bytes:
    data = struct.pack("=HH", 4 + len(payload), kind) + payload
    return data + b"\0" * (-len(data) % 4)


def test_a_qdisc_dump_is_read_for_its_counters_alone_and_a_refusal_is_an_error():
    stats2 = _nla(qdisc_stats.TCA_STATS2 | 0x8000,  # nested, as the kernel flags it
                  _nla(qdisc_stats.TCA_STATS_BASIC, struct.pack("=QI", 2**40 + 5, 7))
                  + _nla(qdisc_stats.TCA_STATS_QUEUE, struct.pack("=5I", 3, 4542, 0, 0, 0)))
    tcmsg = struct.pack("=BxxxiIII", 0, 4, 0x10000, 0xFFFFFFFF, 1)
    kind = _nla(1, b"htb\0")
    data = _nlmsg(qdisc_stats.RTM_NEWQDISC, tcmsg + kind + stats2) + _nlmsg(qdisc_stats.RTM_NEWQDISC, tcmsg + kind)
    assert qdisc_stats.parse(data) == ([qdisc_stats.QdiscStat(4, 0x10000, 0xFFFFFFFF, 2**40 + 5, 4542)], False)
    assert qdisc_stats.parse(_nlmsg(qdisc_stats.NLMSG_DONE, b"\0" * 4)) == ([], True)
    with pytest.raises(OSError, match="EPERM"):
        qdisc_stats.parse(_nlmsg(qdisc_stats.NLMSG_ERROR, struct.pack("=i", -1) + b"\0" * 16))
