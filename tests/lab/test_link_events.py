"""Link events on real links: a veth pair in a namespace of its own, set down and up while a
LinkWatcher listens to netlink. Every down and up must be seen, in order, within 50 ms."""

import itertools
import os
import statistics
import threading
import time
import uuid

import pytest

from clockfabric.lab import netns
from clockfabric.telemetry.link_watcher import LinkWatcher
from clockfabric.telemetry.links import LinkCollector
from tests.conftest import lab_capable

reason = lab_capable()
pytestmark = [pytest.mark.lab, pytest.mark.skipif(reason is not None, reason=reason or "")]

MS = 1_000_000
CYCLES = 5
DEVICES = ["veth0", "veth1"]


def _wait(pred, timeout_s=3.0):
    deadline = time.monotonic() + timeout_s
    while time.monotonic() < deadline:
        if pred():
            return True
        time.sleep(0.01)
    return pred()


@pytest.fixture
def vethns():
    """A fresh namespace holding a veth pair, both ends up; removed whatever happens."""
    name = f"cftest-links-{os.getpid()}-{uuid.uuid4().hex[:6]}"
    netns.create(name)
    try:
        with netns.ipr(name) as ipr:
            ipr.link("add", ifname="veth0", kind="veth", peer="veth1")
            for dev in DEVICES:
                ipr.link("set", index=ipr.link_lookup(ifname=dev)[0], state="up")
            assert _wait(lambda: all(ipr.get_links(ipr.link_lookup(ifname=d)[0])[0].get_attr("IFLA_OPERSTATE")
                                     == "UP" for d in DEVICES))
        yield name
    finally:
        netns.remove(name)
    assert not netns.exists(name)


def test_every_down_and_up_is_seen_in_order_with_its_time(vethns):
    w = LinkWatcher(DEVICES, netns=vethns, flap_window_s=60.0).start()
    try:
        assert w.state("veth0").up and w.state("veth1").up  # seeded by the dump, no transitions
        assert w.events() == []
        actions = []  # (kind, ns before the change, ns after the call returned)
        with netns.ipr(vethns) as ipr:
            idx = ipr.link_lookup(ifname="veth0")[0]
            for k in range(CYCLES):
                for kind in ("down", "up"):
                    before = time.time_ns()
                    ipr.link("set", index=idx, state=kind)
                    actions.append((kind, before, time.time_ns()))
                    time.sleep(0.1 + 0.05 * k if kind == "down" else 0.15)  # outages of 100..300 ms

            def flips(dev):
                return [t for t in w.events() if t.device == dev and t.kind != "change"]

            assert _wait(lambda: all(len(flips(d)) >= 2 * CYCLES for d in DEVICES))
            latencies = {}
            for dev in DEVICES:
                seen = flips(dev)
                # veth0 is set down itself; veth1 loses carrier as its peer goes: both are seen
                assert [t.kind for t in seen] == [a[0] for a in actions], (dev, [t.as_dict() for t in seen])
                lat = []
                for t, (kind, before, after) in zip(seen, actions):
                    assert before <= t.t_ns <= after + 50 * MS, (dev, kind, (t.t_ns - before) / MS)
                    lat.append((t.t_ns - before) / MS)
                latencies[dev] = lat
                f = w.flaps(dev)
                assert f["count"] == 2 * CYCLES and f["downs"] == CYCLES and f["ups"] == CYCLES
                expected = [(actions[2 * k + 1][1] - actions[2 * k][1]) / 1e9 for k in range(CYCLES)]
                assert len(f["down_durations_s"]) == CYCLES
                for got, want in zip(f["down_durations_s"], expected):
                    assert abs(got - want) < 0.05, (dev, f["down_durations_s"], expected)
                assert f["down_since_ns"] is None
            changes = [t.carrier_changes for t in flips("veth1")]
            assert all(c is not None for c in changes) and changes == sorted(changes)
            assert changes[-1] - changes[0] == 2 * CYCLES - 1  # the kernel's count agrees with ours
            for dev, lat in latencies.items():
                print(f"{dev}: detection latency ms: median {statistics.median(lat):.3f}, max {max(lat):.3f} "
                      f"over {len(lat)} transitions")

            # NEWLINK for MTU and queue length: messages arrive, state does not change
            messages, seq = w.messages, w.tracker.seq
            ipr.link("set", index=idx, mtu=1400)
            ipr.link("set", index=idx, txqlen=500)
            ipr.link("set", index=idx, mtu=1500)
            assert _wait(lambda: w.messages >= messages + 3), (messages, w.messages)
            time.sleep(0.1)
            assert w.tracker.seq == seq, [t.as_dict() for t in w.events(after_seq=seq)]

        metrics = {(m.name, m.labels.get("device")): m.value for m in LinkCollector(w).collect()}
        assert metrics[("clockfabric_link_up", "veth1")] == 1.0
        assert metrics[("clockfabric_link_flaps_in_window", "veth1")] == 2 * CYCLES
        assert metrics[("clockfabric_link_transitions_total", "veth1")] >= 2 * CYCLES
        assert metrics[("clockfabric_link_events_dropped_total", None)] == 0
    finally:
        start = time.monotonic()
        stopped = w.stop()
        took = time.monotonic() - start
    assert stopped and not w.running
    assert took < 1.0, took
    print(f"stop() took {took * 1000:.1f} ms")


def test_watches_the_namespace_its_thread_runs_in(vethns):
    """An agent runs inside its host's namespace: no netns argument, the thread's own namespace."""
    box = {}

    def inside():
        with netns.entered(vethns):
            box["w"] = LinkWatcher().start()  # its thread starts in this thread's namespace

    t = threading.Thread(target=inside)
    t.start()
    t.join()
    w = box["w"]
    try:
        assert w.state("veth0") is not None and w.state("veth1") is not None
        names = {n for n, _ in w.tracker.states.values()}
        assert names == set(DEVICES), names  # this namespace's links, none of the root's (lo left out)
        with netns.ipr(vethns) as ipr:
            ipr.link("set", index=ipr.link_lookup(ifname="veth1")[0], state="down")
        assert _wait(lambda: [t.kind for t in w.events() if t.kind != "change"] == ["down", "down"])
    finally:
        start = time.monotonic()
        assert w.stop()
        assert time.monotonic() - start < 1.0


def test_lost_messages_are_recovered_by_a_re_dump(vethns):
    """A tiny socket queue and a stalled watcher: the kernel drops messages (ENOBUFS); the
    watcher re-reads every link and ends with the true state, the changes marked resync."""
    w = LinkWatcher(DEVICES, netns=vethns, rcvbuf_bytes=1).start()  # the kernel's minimum queue
    try:
        with netns.ipr(vethns) as ipr:
            idx = ipr.link_lookup(ifname="veth0")[0]
            with w._lock:  # the watcher's thread stalls on its first message while the queue overflows
                for k in range(21):
                    ipr.link("set", index=idx, state="down" if k % 2 == 0 else "up")
        assert _wait(lambda: w.overruns >= 1 and w.state("veth1") is not None and not w.state("veth1").up)
        assert _wait(lambda: not w.state("veth0").up)
        for dev in DEVICES:
            seen = [t for t in w.events() if t.device == dev]
            # what was read before the overflow, then what the re-dump found: a consistent chain
            # (each transition starts where the one before ended), ending in the true state. Its
            # last flip is a down; a "change" (carrier or operstate moving among down states, as
            # the kernel's messages can show mid-flap) may follow it
            flips = [t for t in seen if t.kind != "change"]
            assert flips and flips[-1].kind == "down" and seen[-1].to_state == w.state(dev), seen
            assert all(x.to_state == y.from_state for x, y in itertools.pairwise(seen)), seen
    finally:
        assert w.stop()
