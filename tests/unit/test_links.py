"""Link transitions and flaps from hand-made netlink messages: parsing and the state machine,
no sockets but one read-only subscription (tests/lab/test_link_events.py drives real links)."""

import time

from pyroute2.netlink.rtnl import RTM_NEWLINK
from pyroute2.netlink.rtnl.ifinfmsg import ifinfmsg
from pyroute2.netlink.rtnl.marshal import MarshalRtnl

from clockfabric.telemetry.link_state import IFF_LOWER_UP, IFF_UP, LinkInfo, LinkState, LinkTracker, parse_link
from clockfabric.telemetry.link_watcher import LinkWatcher
from clockfabric.telemetry.links import LinkCollector

MS = 1_000_000
S = 1_000_000_000
T0 = 1_790_000_000 * S
RUNNING = 0x40


def newlink(index=3, name="eth0", *, up=True, carrier=True, oper="UP", changes=None, family=0, extra=()):
    flags = (IFF_UP if up else 0) | (IFF_LOWER_UP | RUNNING if carrier else 0)
    attrs = [("IFLA_IFNAME", name), ("IFLA_OPERSTATE", oper), ("IFLA_CARRIER", int(carrier)), *extra]
    if changes is not None:
        attrs.append(("IFLA_CARRIER_CHANGES", changes))
    return {"event": "RTM_NEWLINK", "family": family, "index": index, "flags": flags, "attrs": attrs}


def dellink(index=3, name="eth0"):
    return {"event": "RTM_DELLINK", "family": 0, "index": index, "flags": 0, "attrs": [("IFLA_IFNAME", name)]}


def feed(tracker, *pairs):
    """(ms after T0, message) pairs in; the transitions they made out."""
    out = []
    for ms, msg in pairs:
        if (tr := tracker.apply(parse_link(msg), T0 + ms * MS)) is not None:
            out.append(tr)
    return out


def test_parse_reads_operstate_carrier_admin_and_carrier_changes():
    info = parse_link(newlink(changes=7))
    assert info == LinkInfo(3, "eth0", LinkState(True, True, "UP"), 7)
    assert info.state.up
    assert not parse_link(newlink(carrier=False, oper="LOWERLAYERDOWN")).state.up
    assert not parse_link(newlink(up=False, carrier=False, oper="DOWN")).state.up
    # loopback, dummy, tun: operstate UNKNOWN, up if admin up with carrier
    assert parse_link(newlink(name="lo", oper="UNKNOWN")).state.up
    assert not parse_link(newlink(name="d0", oper="UNKNOWN", carrier=False)).state.up
    # no IFLA_CARRIER: IFF_LOWER_UP says it
    msg = newlink()
    msg["attrs"] = [a for a in msg["attrs"] if a[0] != "IFLA_CARRIER"]
    assert parse_link(msg).state.carrier is True
    assert parse_link(dellink()) == LinkInfo(3, "eth0", None)


def test_parse_ignores_what_is_not_link_state():
    assert parse_link({"event": "RTM_NEWADDR", "index": 3, "attrs": []}) is None
    assert parse_link(newlink(family=7)) is None  # AF_BRIDGE: bridge-port news, not the link
    assert parse_link({**newlink(), "header": {"error": OSError(1, "x")}}) is None


def test_parse_takes_real_pyroute2_messages():
    m = ifinfmsg()
    m["header"]["type"] = RTM_NEWLINK
    m["index"], m["flags"] = 5, IFF_UP | IFF_LOWER_UP
    m["attrs"] = [("IFLA_IFNAME", "veth0"), ("IFLA_OPERSTATE", "UP"), ("IFLA_CARRIER", 1),
                  ("IFLA_CARRIER_CHANGES", 4)]
    m.encode()
    (msg,) = MarshalRtnl().parse(m.data)
    assert parse_link(msg) == LinkInfo(5, "veth0", LinkState(True, True, "UP"), 4)


def test_down_up_in_order_and_repeats_make_no_transitions():
    t = LinkTracker()
    t.seed([parse_link(newlink(changes=2))])
    trs = feed(t,
               (1, newlink(changes=2, extra=[("IFLA_MTU", 9000)])),  # MTU change: not state
               (2, newlink(changes=2)),  # a duplicate
               (10, newlink(carrier=False, oper="LOWERLAYERDOWN", changes=3)),
               (11, newlink(carrier=False, oper="LOWERLAYERDOWN", changes=3)),  # stats while down
               (250, newlink(changes=4)),
               (251, newlink(changes=4)))
    assert [(tr.kind, tr.t_ns - T0) for tr in trs] == [("down", 10 * MS), ("up", 250 * MS)]
    assert [tr.seq for tr in trs] == [1, 2]
    assert trs[0].from_state == LinkState(True, True, "UP")
    assert trs[0].to_state == LinkState(True, False, "LOWERLAYERDOWN")
    assert trs[1].carrier_changes == 4


def test_state_change_without_up_flip_is_a_change_not_a_flap():
    t = LinkTracker()
    t.seed([parse_link(newlink(up=False, carrier=False, oper="DOWN"))])
    (tr,) = feed(t, (5, newlink(up=True, carrier=False, oper="LOWERLAYERDOWN")))
    assert tr.kind == "change"
    f = t.flaps("eth0", T0 + 6 * MS)
    assert f["count"] == 0 and f["transitions"] == 1


def test_flap_window_counts_and_down_durations():
    t = LinkTracker(flap_window_s=10.0)
    t.seed([parse_link(newlink())])
    pairs = []
    for k in range(3):  # three outages of 100, 200, 300 ms, one a second
        start = k * 1000
        pairs += [(start, newlink(carrier=False, oper="LOWERLAYERDOWN")), (start + 100 * (k + 1), newlink())]
    feed(t, *pairs)
    f = t.flaps("eth0", T0 + 3 * S)
    assert f["count"] == 6 and f["downs"] == 3 and f["ups"] == 3
    assert f["down_durations_s"] == [0.1, 0.2, 0.3]
    assert f["down_since_ns"] is None
    # the window slides: 11.5 s after T0 only the third outage (at 2.0-2.3 s) is inside the last 10 s
    later = t.flaps("eth0", T0 + 11_500 * MS)
    assert later["count"] == 2 and later["down_durations_s"] == [0.3]
    assert later["transitions"] == 6  # the lifetime counter does not slide
    # down now: counted, its start kept, no duration yet
    feed(t, (12_000, newlink(carrier=False, oper="LOWERLAYERDOWN")))
    now = t.flaps("eth0", T0 + 12_500 * MS)
    assert now["downs"] == 1 and now["down_since_ns"] == T0 + 12_000 * MS and now["down_durations_s"] == []


def test_devices_filter_removal_and_reappearance():
    t = LinkTracker(["eth0"])
    t.seed([parse_link(newlink()), parse_link(newlink(4, "eth1"))])
    assert feed(t, (1, newlink(4, "eth1", carrier=False, oper="DOWN"))) == []  # not watched
    (gone,) = feed(t, (2, dellink()))
    assert gone.kind == "down" and gone.to_state is None
    assert t.state("eth0") is None
    (back,) = feed(t, (3, newlink(9, "eth0", up=False, carrier=False, oper="DOWN")))
    assert back.kind == "change" and back.from_state is None and back.index == 9
    (up,) = feed(t, (400, newlink(9, "eth0")))
    assert up.kind == "up"
    assert t.flaps("eth0", T0 + S)["down_durations_s"] == [0.398]  # gone at 2 ms, up again at 400 ms


def test_loopback_is_left_out_unless_asked_for():
    t = LinkTracker()
    t.seed([parse_link(newlink(1, "lo", oper="UNKNOWN"))])
    assert feed(t, (1, newlink(1, "lo", up=False, carrier=False, oper="DOWN"))) == []
    t = LinkTracker(["lo"])
    t.seed([parse_link(newlink(1, "lo", oper="UNKNOWN"))])
    assert [tr.kind for tr in feed(t, (1, newlink(1, "lo", up=False, carrier=False, oper="DOWN")))] == ["down"]


def test_bounded_history_counts_what_it_drops_and_reads_by_time_or_seq():
    t = LinkTracker(max_events=4)
    t.seed([parse_link(newlink())])
    feed(t, *[(k, newlink(carrier=k % 2 == 1, oper="UP" if k % 2 else "LOWERLAYERDOWN")) for k in range(10)])
    assert len(t.events) == 4 and t.dropped == 6
    assert [tr.seq for tr in t.since()] == [7, 8, 9, 10]
    assert [tr.seq for tr in t.since(T0 + 8 * MS)] == [9, 10]
    assert [tr.seq for tr in t.since(after_seq=9)] == [10]


def test_resync_turns_differences_into_marked_transitions():
    t = LinkTracker()
    t.seed([parse_link(newlink()), parse_link(newlink(4, "eth1"))])
    trs = t.resync([parse_link(newlink(carrier=False, oper="LOWERLAYERDOWN"))], T0)
    assert sorted((tr.device, tr.kind, tr.resync) for tr in trs) == [("eth0", "down", True), ("eth1", "down", True)]


def test_collector_metrics_from_a_watcher():
    clock = iter(range(T0, T0 + 10**12, MS)).__next__
    w = LinkWatcher(flap_window_s=60.0, clock=clock)
    w.tracker.seed([parse_link(newlink(changes=1))])
    w._thread = type("Alive", (), {"is_alive": lambda self: True})()  # stands in for the thread
    w.tracker.apply(parse_link(newlink(carrier=False, oper="LOWERLAYERDOWN", changes=2)), T0 + 10 * MS)
    w.tracker.apply(parse_link(newlink(changes=3)), T0 + 60 * MS)
    c = LinkCollector(w)
    assert c.absent() is None
    got = {(m.name, tuple(sorted(m.labels.items()))): m for m in c.collect()}
    dev = (("device", "eth0"),)
    assert got[("clockfabric_link_up", dev)].value == 1.0
    assert got[("clockfabric_link_transitions_total", dev)].value == 2
    assert got[("clockfabric_link_transitions_total", dev)].kind == "counter"
    assert got[("clockfabric_link_last_change_timestamp_seconds", dev)].value == (T0 + 60 * MS) / 1e9
    assert got[("clockfabric_link_flaps_in_window", dev)].value == 2
    assert abs(got[("clockfabric_link_last_down_duration_seconds", dev)].value - 0.05) < 1e-9
    assert got[("clockfabric_link_events_dropped_total", ())].value == 0
    for m in got.values():
        assert m.name.startswith("clockfabric_link_")
        assert (m.kind == "counter") == m.name.endswith("_total")


def test_watcher_starts_on_this_namespace_and_stops_promptly():
    """Read-only: subscribes to this namespace's link events and dumps its links (no root needed)."""
    w = LinkWatcher().start()
    try:
        assert w.running
        time.sleep(0.05)  # let it block in poll
    finally:
        start = time.monotonic()
        assert w.stop()
        took = time.monotonic() - start
    assert not w.running and took < 1.0, took
    assert w.stop()  # twice is fine
    assert w.start().running  # and it starts again
    assert w.stop()
