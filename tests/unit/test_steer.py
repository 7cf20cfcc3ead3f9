"""Transparent mode without a lab: queue estimates from one-way delays, the heartbeat fields
that carry them, the steering decisions on event sequences (hysteresis, hold-down, back
home, damping, failed planes), and the rule bookkeeping against fakes of the kernel."""

import socket

import pytest

from clockfabric.auth import seal
from clockfabric.auth.seal import HEARTBEAT, Sealer
from clockfabric.traffic.heartbeat import FORMAT, Heartbeat, Liveness
from clockfabric.traffic.steer import Steering
from clockfabric.traffic.steer_decide import (
    UNKNOWN,
    DelayBook,
    Flow,
    FlowKey,
    FlowRates,
    FlowSample,
    PathDelay,
    Steerer,
    SteerPolicy,
    decode_queue,
    encode_queue,
)

POLICY = SteerPolicy(high_s=0.005, low_s=0.0015, sustain_s=1.0, hold_s=10.0, settle_s=2.0, min_rate_bps=1e6,
                     damp_moves=4, damp_window_s=120.0)
BUSY = FlowKey("10.0.0.1", 40000, "10.0.0.2", 29500)
SMALL = FlowKey("10.0.0.1", 40001, "10.0.0.2", 29501)
OTHER = FlowKey("10.0.0.1", 40002, "10.0.0.2", 29502)
CONGESTED0 = {"h1": {0: 0.020, 1: 0.0005}}
QUIET = {"h1": {0: 0.0005, 1: 0.0005}}
BOTH = {"h1": (0, 1)}


def flows(*keys, plane=0, rate=20e6):
    return [Flow(k, "h1", rate, 0, plane) for k in keys]


def run(st, timeline, fl, usable=BOTH, plane_of=None):
    """timeline: (t, queues); the same flows every round; every move made, with its time."""
    out = []
    for t, queues in timeline:
        out += st.observe(t, queues, fl, usable, plane_of)
    return out


def ticks(t0, t1, queues, step=0.5):
    n = round((t1 - t0) / step)
    return [(t0 + i * step, queues) for i in range(n + 1)]


# ---- queue estimates ------------------------------------------------------------------------------
def test_standing_queue_is_the_window_minimum_above_the_floor():
    pd = PathDelay(window_s=1.0, floor_s=60.0, bucket_s=5.0)
    for i in range(10):
        pd.add(i * 0.1, 0.0002)
    assert pd.standing(0.9) == 0.0002 and pd.floor(0.9) == 0.0002
    for i in range(10, 30):  # a standing queue of 10-30 ms: its minimum is what stands
        pd.add(i * 0.1, 0.010 + 0.020 * (i % 2))
    assert pd.standing(2.9) == pytest.approx(0.010) and pd.floor(2.9) == 0.0002
    assert pd.standing(10.0) is None  # nothing heard within the window: unknown, not zero


def test_old_floors_age_out():
    pd = PathDelay(window_s=1.0, floor_s=20.0, bucket_s=5.0)
    pd.add(0.0, 0.001)
    pd.add(30.0, 0.005)  # e.g. the clocks' offset moved: the old floor no longer applies
    assert pd.floor(30.0) == 0.005


def test_a_path_loaded_from_the_start_is_judged_against_its_siblings():
    book = DelayBook(window_s=1.0, spread_s=0.001)
    offset = 3.0  # the two clocks disagree by 3 s: the same on every path, so it cancels
    for i in range(20):
        t = i * 0.1
        book.add("h1", (0, 0), t, offset + 0.030)  # never below 30 ms: its own floor is 30 ms
        book.add("h1", (1, 0), t, offset + 0.0002)
    q = book.queues("h1", 2.0)
    assert q[(0, 0)] == pytest.approx(0.030 - 0.0012) and q[(1, 0)] == 0.0
    book.forget("h1")
    assert book.queues("h1", 2.0) == {}


def test_queue_reports_round_trip_in_100us_units():
    assert decode_queue(encode_queue(0.0123)) == pytest.approx(0.0123)
    assert encode_queue(None) == UNKNOWN and decode_queue(UNKNOWN) is None
    assert encode_queue(100.0) == UNKNOWN - 1  # saturates, never reads as unknown


# ---- the heartbeat fields ---------------------------------------------------------------------------
def test_heartbeat_v2_carries_send_time_and_queues_and_v1_is_still_understood():
    hb = Heartbeat(1, 0, 7, 9, 0, 0, sent_ns=123456789, queues=(0, 150, UNKNOWN, 3))
    assert Heartbeat.unpack(hb.pack()) == hb
    v1 = Heartbeat(1, 0, 7, 9, 0b10, 0, version=1)
    assert len(v1.pack()) == FORMAT.size  # what a version-1 agent reads
    assert Heartbeat.unpack(v1.pack()) == v1
    assert Heartbeat.unpack(hb.pack()[:-1]) is None  # a truncated trailer


@pytest.fixture
def pair():
    try:
        a = Liveness("127.0.0.1", {"b": "127.0.0.2"}, {0: "lo"}, ports=2, base_port=47390, session=1)
    except PermissionError:
        pytest.skip("SO_BINDTODEVICE needs CAP_NET_RAW on this kernel")
    b = Liveness("127.0.0.2", {"a": "127.0.0.1"}, {0: "lo"}, ports=2, base_port=47390, session=2)
    yield a, b
    a.close()
    b.close()


def test_the_receiver_measures_each_path_and_tells_the_sender(pair):
    a, b = pair
    for i in range(5):
        a.send(i * 0.1, 0, {0})
        b.tick(i * 0.1)
    q = b.delays.queues("a", 0.4)
    assert set(q) == {(0, 0), (0, 1)} and all(v is not None and v < 0.05 for v in q.values())
    b.send(0.5, 0, {0})
    a.tick(0.5)
    out = a.out_queues("b")  # a's paths to b, as b sees them
    assert set(out) == {0} and out[0] is not None and out[0] < 0.05


def test_a_version_1_peer_is_answered_in_version_1(pair):
    _, b = pair
    with socket.socket(socket.AF_INET, socket.SOCK_DGRAM) as s:
        s.bind(("127.0.0.1", 0))
        s.sendto(Sealer(HEARTBEAT, "127.0.0.1", None).seal(Heartbeat(0, 0, 5, 1, 0, 0, version=1).pack(),
                                                           "127.0.0.2")[0], ("127.0.0.2", 47390))
    b.tick(0.0)
    assert b.reports["a"].version == 1 and b.out_queues("a") == {0: None}
    with socket.socket(socket.AF_INET, socket.SOCK_DGRAM) as r:
        r.bind(("127.0.0.1", 47390 + 7))
        b.base_port, b.ports = 47390 + 7, 1  # listen where b sends its port-0 heartbeat
        b.send(0.1, 0, {0})
        r.settimeout(1.0)
        data = r.recv(512)
    data = data[:-seal.OVERHEAD]
    assert len(data) == FORMAT.size and Heartbeat.unpack(data).version == 1


# ---- decisions ----------------------------------------------------------------------------------------
def test_moves_the_busiest_flow_off_a_congested_plane_only_after_it_lasted():
    st = Steerer((0, 1), POLICY)
    fl = flows(BUSY) + [Flow(SMALL, "h1", 30e6, 0, 0)]
    assert run(st, ticks(0.0, 0.5, CONGESTED0), fl) == []  # 0.5 s: not yet sustained
    moves = run(st, ticks(1.0, 1.0, CONGESTED0), fl)
    assert [(m.kind, m.flow, m.plane, m.origin) for m in moves] == [("steered", SMALL, 1, 0)]
    assert "queue 20.0 ms" in moves[0].reason
    # one flow per settle: the next one two seconds later, if plane 0 is still congested
    assert run(st, ticks(1.5, 2.5, CONGESTED0), fl) == []
    assert [m.flow for m in run(st, ticks(3.0, 3.0, CONGESTED0), fl)] == [BUSY]


def test_no_move_when_every_plane_is_congested_or_none_is():
    st = Steerer((0, 1), POLICY)
    assert run(st, ticks(0.0, 5.0, {"h1": {0: 0.02, 1: 0.02}}), flows(BUSY)) == []
    assert st.counters["no_quiet_plane"] > 0
    st = Steerer((0, 1), POLICY)
    assert run(st, ticks(0.0, 5.0, QUIET), flows(BUSY)) == []
    st = Steerer((0, 1), POLICY)  # between the thresholds: neither congested nor quiet
    assert run(st, ticks(0.0, 5.0, {"h1": {0: 0.004, 1: 0.004}}), flows(BUSY)) == []
    st = Steerer((0, 1), POLICY)  # plane 1 unknown (no heartbeats measured): not quiet
    assert run(st, ticks(0.0, 5.0, {"h1": {0: 0.02, 1: None}}), flows(BUSY)) == []


def test_hysteresis_a_queue_that_keeps_dipping_is_never_sustained():
    st = Steerer((0, 1), POLICY)
    timeline = [(i * 0.5, {"h1": {0: 0.02 if i % 2 else 0.001, 1: 0.0005}}) for i in range(20)]
    assert run(st, timeline, flows(BUSY)) == []
    # and once congested, a dip under high (but above low) does not end it
    st = Steerer((0, 1), POLICY)
    run(st, ticks(0.0, 1.0, CONGESTED0), [])
    run(st, ticks(1.5, 4.0, {"h1": {0: 0.003, 1: 0.0005}}), [])
    assert st.load("h1", 0).congested


def test_small_flows_and_flows_already_on_the_quiet_plane_stay():
    st = Steerer((0, 1), POLICY)
    slow = [Flow(BUSY, "h1", 0.2e6, 0, 0)]
    assert run(st, ticks(0.0, 3.0, CONGESTED0), slow) == []
    assert run(st, ticks(3.5, 5.0, CONGESTED0), [Flow(BUSY, "h1", 0.2e6, 1 << 20, 0)])  # a backlog counts
    st = Steerer((0, 1), POLICY)
    asked = []

    def plane_of(f):
        asked.append(f.key)
        return 1

    assert run(st, ticks(0.0, 3.0, CONGESTED0), flows(BUSY, plane=None), plane_of=plane_of) == []
    assert asked and set(asked) == {BUSY}


def test_hold_down_then_back_home_after_the_origin_is_quiet_for_the_hold():
    st = Steerer((0, 1), POLICY)
    fl = flows(BUSY)
    assert len(run(st, ticks(0.0, 1.0, CONGESTED0), fl)) == 1
    fl = flows(BUSY, plane=1)
    # plane 0 quiet at once: the flow still stays for the hold (10 s), and until plane 0 has
    # been quiet for 10 s
    assert run(st, ticks(1.5, 5.0, CONGESTED0), fl) == []
    assert run(st, ticks(5.5, 15.0, QUIET), fl) == []
    back = run(st, ticks(15.5, 16.0, QUIET), fl)
    assert [(m.kind, m.plane, m.origin) for m in back] == [("unsteered", None, 0)]
    assert "quiet for 10 s" in back[0].reason and not st.steered


def test_a_flow_that_finds_its_origin_congested_again_stays_away_twice_as_long():
    st = Steerer((0, 1), POLICY)
    assert len(run(st, ticks(0.0, 1.0, CONGESTED0), flows(BUSY))) == 1
    assert len(run(st, ticks(1.5, 12.0, QUIET), flows(BUSY, plane=1))) == 1  # back at 11.5 s
    moves = run(st, ticks(12.5, 14.0, CONGESTED0), flows(BUSY))  # its origin is congested again
    assert [m.kind for m in moves] == ["steered"]
    assert st.hold(14.0, BUSY) == 20.0
    assert run(st, ticks(14.5, 34.0, QUIET), flows(BUSY, plane=1)) == []  # not back after 10 s...
    assert [m.kind for m in run(st, ticks(34.5, 35.0, QUIET), flows(BUSY, plane=1))] == ["unsteered"]


def test_damped_after_too_many_moves():
    st = Steerer((0, 1), SteerPolicy(hold_s=1.0, sustain_s=0.5, settle_s=0.0, damp_moves=3))
    t, moves = 0.0, []
    for _ in range(6):  # plane 0 and plane 1 take turns being congested
        for q in (CONGESTED0, {"h1": {0: 0.0005, 1: 0.02}}):
            for _ in range(6):
                moves += st.observe(t, q, flows(BUSY, plane=None), BOTH,
                                    lambda f: st.steered[f.key].plane if f.key in st.steered else 0)
                t += 0.5
    assert len(moves) == 3  # steered, back, steered: then it stays
    assert st.counters["moves"] == 3


def test_a_flow_on_a_failed_plane_goes_back_at_once_and_gone_flows_are_released():
    st = Steerer((0, 1), POLICY)
    run(st, ticks(0.0, 1.0, CONGESTED0), flows(BUSY, OTHER))
    run(st, ticks(3.0, 3.0, CONGESTED0), flows(BUSY, OTHER))
    assert set(st.steered) == {BUSY, OTHER}
    moves = st.observe(3.5, CONGESTED0, flows(BUSY, OTHER, plane=1), {"h1": (0,)})  # failover: plane 1 unused
    assert sorted((m.kind, m.flow) for m in moves) == [("unsteered", BUSY), ("unsteered", OTHER)]
    assert all("not in use" in m.reason for m in moves)
    st = Steerer((0, 1), POLICY)
    run(st, ticks(0.0, 1.0, CONGESTED0), flows(BUSY))
    assert [(m.kind, m.flow) for m in st.observe(1.5, CONGESTED0, [], BOTH)] == [("released", BUSY)]
    st = Steerer((0, 1), POLICY)
    run(st, ticks(0.0, 1.0, CONGESTED0), flows(BUSY))
    assert st.observe(1.5, CONGESTED0, None, BOTH) == []  # flows unreadable: nothing is released


def test_a_congested_new_plane_sends_the_flow_on_to_a_quiet_third():
    st = Steerer((0, 1, 2), POLICY)
    q = {"h1": {0: 0.02, 1: 0.0005, 2: 0.001}}
    moves = run(st, ticks(0.0, 1.0, q), flows(BUSY), usable={"h1": (0, 1, 2)})
    assert [(m.plane, m.origin) for m in moves] == [(1, 0)]  # the quietest
    q = {"h1": {0: 0.02, 1: 0.02, 2: 0.001}}
    moves = run(st, ticks(1.5, 12.0, q), flows(BUSY, plane=1), usable={"h1": (0, 1, 2)})
    assert [(m.kind, m.plane, m.origin) for m in moves] == [("steered", 2, 0)]


def test_recorded_sequence_from_a_lab_run():
    """h0's readings toward h1 in a lab run (tests/lab/test_steer.py's setup, read every 2 s
    from the state file, in ms): elephants join plane 0 at 0 s and leave at 30 s; the test
    stream hashed onto plane 0. One move out, one move back, nothing else."""
    plane0 = [12.2, 4.3, 4.2, 4.3, 4.2, 1.9, 1.7, 1.6, 1.6, 1.5, 0.0, 0.0, 0.1, 0.0, 2.1, 1.1, 0.7, 0.0,
              0.0, 0.0, 0.0, 0.0, 0.0, 0.0, 0.0]
    plane1 = [0.0, 0.0, 0.9, 1.0, 1.1, 1.2, 0.0, 0.9, 0.9, 0.7, 1.2, 0.9, 1.0, 0.0, 0.0, 0.0, 0.0, 0.0, 0.0,
              0.0, 0.0, 0.0, 0.0, 0.0, 0.0]
    st = Steerer((0, 1), POLICY)
    st.observe(-2.0, {"h1": {0: 0.0, 1: 0.0}}, [], BOTH)
    moves = []
    for i, (a, b) in enumerate(zip(plane0, plane1)):
        for k in range(4):  # each reading held for its 2 s, rounds every 0.5 s
            t = 2.0 * i + 0.5 * k
            on = st.steered[BUSY].plane if BUSY in st.steered else 0
            moves += st.observe(t, {"h1": {0: a / 1e3, 1: b / 1e3}}, flows(BUSY, plane=on), BOTH)
    assert [m.kind for m in moves] == ["steered", "unsteered"]


def test_send_rates_from_bytes_acked():
    rates = FlowRates(window_s=2.0)
    assert rates.update(0.0, [FlowSample(BUSY, 1, 0, 0, 100)]) == {BUSY: 0.0}
    assert rates.update(1.0, [FlowSample(BUSY, 1, 1_250_000, 0, 100)])[BUSY] == pytest.approx(10e6)
    assert rates.update(2.0, [FlowSample(BUSY, 2, 5, 0, 100)])[BUSY] == 0.0  # a new connection, same ports
    # a flow that mostly receives counts at its receive rate: what it sends are the data's ACKs
    rates.update(3.0, [FlowSample(OTHER, 3, 0, 0, 100, bytes_received=0)])
    assert rates.update(4.0, [FlowSample(OTHER, 3, 100, 0, 100, bytes_received=2_500_000)])[OTHER] == \
        pytest.approx(20e6)


# ---- the glue, against fakes of the kernel ----------------------------------------------------------------
class FakeRules:
    def __init__(self, fail=False):
        self.index = {0: 2, 1: 3}
        self.rules: dict[FlowKey, tuple[int, int]] = {}
        self.fail = fail
        self.closed = False

    def add(self, key, plane, origin):
        if self.fail:
            raise OSError("rule did not take")
        self.rules[key] = (plane, origin)

    def remove(self, key):
        self.rules.pop(key, None)

    def installed(self):
        return [(k, p, o) for k, (p, o) in self.rules.items()]

    def close(self):
        self.closed = True


class FakeReader:
    def __init__(self):
        self.samples: list[FlowSample] = []

    def read(self):
        return list(self.samples)

    def close(self):
        pass


class FakeLookup:
    def __init__(self, oif=2):
        self.oif_value = oif

    def oif(self, key):
        return self.oif_value

    def close(self):
        pass


def steering(rules=None, policy=POLICY):
    reader = FakeReader()
    s = Steering("10.0.0.1", {"h1": "10.0.0.2", "h2": "10.0.0.3"}, {0: "eth0", 1: "eth1"}, lambda peer: {},
                 policy, rules=rules or FakeRules(), reader=reader, lookup=FakeLookup(oif=2))
    return s, reader


def test_steering_programs_a_rule_per_move_and_removes_it_when_the_connection_closes():
    s, reader = steering()
    acked = 0
    done = []
    for i in range(5):
        t = i * 0.5
        acked += 2_000_000
        reader.samples = [FlowSample(BUSY, 1, acked, 0, 100),
                          FlowSample(FlowKey("10.64.0.0", 5000, "10.64.0.2", 5201), 2, acked, 0, 100)]  # NIC-bound
        done += s.tick(t, CONGESTED0, BOTH)
    assert [(m.kind, m.flow) for m in done] == [("steered", BUSY)]
    assert s.rules.rules == {BUSY: (1, 0)}
    assert s.state()["steered"] == [{"flow": str(BUSY), "peer": "h1", "plane": 1, "origin": 0}]
    reader.samples = []
    assert [m.kind for m in s.tick(3.0, CONGESTED0, BOTH)] == ["released"]
    assert s.rules.rules == {}


def test_a_rule_that_does_not_take_leaves_the_flow_unsteered():
    s, reader = steering(FakeRules(fail=True))
    for i in range(5):
        reader.samples = [FlowSample(BUSY, 1, i * 2_000_000, 0, 100)]
        assert s.tick(i * 0.5, CONGESTED0, BOTH) == []
    assert s.counters["rule_errors"] == 1 and not s.steerer.steered


def test_reconcile_adopts_rules_of_live_connections_and_removes_stale_ones():
    rules = FakeRules()
    stale = FlowKey("10.0.0.1", 40005, "10.0.0.3", 29500)
    stranger = FlowKey("10.0.0.1", 40006, "10.0.0.9", 29500)  # not a peer any more
    rules.rules = {BUSY: (1, 0), stale: (1, 0), stranger: (0, 1)}
    s, reader = steering(rules)
    reader.samples = [FlowSample(BUSY, 1, 0, 0, 100), FlowSample(stranger, 3, 0, 0, 100)]
    moves = s.reconcile(100.0)
    assert [(m.kind, m.flow, m.plane, m.origin) for m in moves] == [("adopted", BUSY, 1, 0)]
    assert set(rules.rules) == {BUSY}
    # adopted flows keep their hold: back home only after plane 0 has been quiet for it
    reader.samples = [FlowSample(BUSY, 1, 0, 0, 100)]
    assert s.tick(100.5, QUIET, BOTH) == []
    moves = [m for i in range(1, 23) for m in s.tick(100.5 + 0.5 * i, QUIET, BOTH)]
    assert [m.kind for m in moves] == ["unsteered"]


def test_the_agent_option_needs_failover(tmp_path):
    from clockfabric.agent.config import AgentConfig
    from clockfabric.errors import ClockfabricError
    from clockfabric.topology import multirail

    topo = multirail(2, 2, 1, 0)
    assert AgentConfig("h0", topo, tmp_path, steer=True).failover  # on by default with 2 NICs
    with pytest.raises(ClockfabricError, match="--steer needs failover"):
        AgentConfig("h0", topo, tmp_path, steer=True, failover=False)
    with pytest.raises(ClockfabricError, match="--steer needs failover"):
        AgentConfig("h0", multirail(2, 1, 1, 0), tmp_path, steer=True)  # one NIC: no failover, no steering
