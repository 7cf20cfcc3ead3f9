"""A host's own egress queue read from the kernel, in a network namespace of the test's own: the
backlog's wait at the rate the queue drains at, a link slowed under its configured rate included."""

from __future__ import annotations

import os
import socket
import time

import pytest
from pyroute2 import IPRoute
from pyroute2 import netns as pyroute_netns

from clockfabric import netns
from clockfabric.lab import shaping
from clockfabric.qos.backlog import EgressBacklog

pytestmark = pytest.mark.skipif(os.geteuid() != 0, reason="needs root: network namespaces and tc")
CONFIGURED = 100_000_000
SLOWED = 1_000_000
FRAME = 1400


@pytest.fixture
def ns():
    """A veth out of the test's namespace into another, shaped as the lab shapes a link, then slowed
    to 1 Mbit/s (a degraded link: its configured rate is not what it drains at)."""
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
            shaping.shape(ipr, index, CONFIGURED, 1000)
            shaping.set_rate(ipr, index, SLOWED)
        with netns.entered(far), IPRoute() as ipr:  # its far end up: a carrier, so the qdisc sends
            ipr.link("set", index=ipr.link_lookup(ifname="bq0p")[0], state="up")
        yield name
    finally:
        pyroute_netns.remove(name)
        pyroute_netns.remove(far)


def test_a_standing_queue_is_read_at_the_rate_it_drains_at(ns):
    with netns.entered(ns):
        backlog = EgressBacklog({"bq0": CONFIGURED})
        s = socket.socket(socket.AF_INET, socket.SOCK_DGRAM)
        try:
            assert backlog.queues_s() == {"bq0": 0.0}  # idle
            readings = []
            for _ in range(4):
                for _ in range(40):  # 448 kbit a round of 0.2 s, at 1 Mbit/s: the queue stands and grows
                    s.sendto(b"x" * FRAME, ("10.250.0.2", 9))
                time.sleep(0.2)
                readings.append(backlog.queues_s()["bq0"])
        finally:
            s.close()
            backlog.close()
    # the first busy reading knows no drain rate yet: the configured one, 100x too fast
    assert 0 < readings[0] < 0.01, readings
    # then the rate it drained at: a backlog of hundreds of kbit at 1 Mbit/s waits a tenth of a second or more
    assert all(r > 0.1 for r in readings[1:]), readings
    assert readings[-1] < 5.0, readings  # not a stopped link's: what it sent counts
