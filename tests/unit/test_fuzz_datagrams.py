"""Property-based fuzzing of every datagram parser and control handler (hypothesis).

Random and mutated datagrams never raise out of a parser or handler, and no forged, mutated
or replayed datagram is accepted. Each property runs a few hundred examples (seconds in CI);
CLOCKFABRIC_FUZZ_EXAMPLES=1000000 runs that many by hand.
"""

from __future__ import annotations

import json
import os
import socket
import struct
import time
from collections import Counter, deque
from types import SimpleNamespace

import pytest
from hypothesis import HealthCheck, given, settings
from hypothesis import strategies as st

from clockfabric.agent.config import AgentConfig
from clockfabric.agent.service import Router
from clockfabric.agent.services.claims import Claims
from clockfabric.agent.services.clock import ClockSync
from clockfabric.auth.keys import Keyring
from clockfabric.auth.seal import CONTROL, PROBE, Rejected, Sealer
from clockfabric.probe import timestamping, wire
from clockfabric.probe.engine import ProbeEngine
from clockfabric.topology import leafspine
from clockfabric.traffic.heartbeat import Heartbeat

EXAMPLES = int(os.environ.get("CLOCKFABRIC_FUZZ_EXAMPLES", "300"))
fuzz = settings(max_examples=EXAMPLES, deadline=None, derandomize=EXAMPLES <= 1000,
                suppress_health_check=list(HealthCheck))
KEYS = Keyring({1: b"k" * 32})
ATTACKER = Keyring({1: b"x" * 32})  # a lab host that has no fleet key makes up its own
A, B = "127.0.0.1", "127.0.0.2"

json_values = st.recursive(
    st.none() | st.booleans() | st.integers(-2**70, 2**70) | st.floats(allow_nan=True) | st.text(max_size=8),
    lambda inner: st.lists(inner, max_size=4) | st.dictionaries(st.text(max_size=6), inner, max_size=4),
    max_leaves=12)
any_number = st.integers(-2**70, 2**70) | st.floats(allow_nan=True, allow_infinity=True) | st.booleans() | st.none()


def probe_datagrams():
    """Well-formed probe packets (to be mutated) and random bytes."""
    kinds = st.sampled_from([wire.PROBE0, wire.PROBE1, wire.REPLY0, wire.REPLY1, wire.WARMUP])
    i64 = st.integers(-2**63, 2**63 - 1)
    u32 = st.integers(0, 2**32 - 1)
    packets = st.builds(wire.Packet, kinds, u32, u32, st.tuples(i64, i64), u32, st.tuples(i64, i64))
    return st.one_of(packets.map(wire.encode), st.binary(max_size=120))


def mutate(data: bytes, at: int, byte: int, cut: int) -> bytes:
    """One byte changed (xor with a non-zero byte), or the datagram cut short."""
    if cut:
        return data[:max(0, len(data) - cut)]
    at %= len(data)
    return data[:at] + bytes([data[at] ^ byte]) + data[at + 1:]


@fuzz
@given(probe_datagrams())
def test_probe_decode_is_total(data):
    try:
        pkt = wire.decode(data)
    except wire.Malformed:
        return
    assert wire.encode(pkt) == data  # what it accepts, it reads exactly


@fuzz
@given(st.binary(max_size=200) | st.builds(lambda b: b"CFHB" + b, st.binary(max_size=200)))
def test_heartbeat_unpack_is_total(data):
    hb = Heartbeat.unpack(data)
    assert hb is None or hb.pack() == data


@fuzz
@given(st.binary(max_size=200))
def test_random_datagrams_never_open(data):
    with pytest.raises(Rejected):
        Sealer(PROBE, B, KEYS).open(data, A)


@fuzz
@given(probe_datagrams(), st.integers(0, 10_000), st.integers(1, 255), st.integers(0, 3))
def test_a_mutated_sealed_datagram_never_opens_and_a_good_one_opens_once(payload, at, byte, cut):
    receiver = Sealer(PROBE, B, KEYS)
    data, _ = Sealer(PROBE, A, KEYS).seal(payload, B)
    with pytest.raises(Rejected):
        receiver.open(mutate(data, at, byte, cut) if (cut or payload) else data[:-1], A)
    assert receiver.open(data, A).payload == payload
    with pytest.raises(Rejected, match="replay"):
        receiver.open(data, A)
    forged, _ = Sealer(PROBE, A, ATTACKER).seal(payload, B)
    with pytest.raises(Rejected, match="bad_mac"):
        receiver.open(forged, A)


@pytest.fixture(scope="module")
def engine():
    try:
        e = ProbeEngine(A, {"a": A, "b": B}, ["b"], rails=[None], ports=1, base_port=47610,
                        sealer=Sealer(PROBE, A, KEYS))
    except OSError as err:
        pytest.skip(f"no loopback sockets: {err}")
    yield e
    for p in e._paths + e._reflectors:
        p.sock.close()


def _rx_anc() -> list:
    """Ancillary data carrying a software receive timestamp, as the kernel hands it."""
    now = time.time_ns()
    stamp = struct.pack("=qq", now // 10**9, now % 10**9) + bytes(32)
    return [(socket.SOL_SOCKET, timestamping.SO_TIMESTAMPING, stamp)]


@fuzz
@given(probe_datagrams(), st.booleans(), st.integers(0, 10_000), st.integers(1, 255), st.integers(0, 3))
def test_the_engine_takes_no_forged_or_mutated_probe_and_never_raises(engine, payload, keyed, at, byte, cut):
    data = payload
    if keyed:  # the fleet's, but damaged on the way
        data = mutate(Sealer(PROBE, B, KEYS).seal(payload, A)[0], at, byte, cut or (not payload))
    else:  # sealed by a host without the key
        data = Sealer(PROBE, B, ATTACKER).seal(payload, A)[0]
    before = (dict(engine.counters), len(engine._reflected), len(engine.exchanges))
    engine._received(engine._reflectors[0], data, _rx_anc(), B, 47611)
    assert (dict(engine.counters), len(engine._reflected), len(engine.exchanges)) == before


def control_context(host: str):
    topo = leafspine(4, 2, 2)
    addresses = {h: f"10.0.0.{i + 1}" for i, h in enumerate(sorted(topo.hosts))}
    rejected: Counter[str] = Counter()
    ctx = SimpleNamespace(cfg=AgentConfig(host, topo, "/nonexistent", insecure=True), rails=["eth0"], links=None,
                          neighbours=None, address=addresses[host], addresses=addresses, latest=None,
                          engine=SimpleNamespace(interval_s=0.2, names={a: h for h, a in addresses.items()},
                                                 exchanges=deque(), counters=Counter()),
                          clock=SimpleNamespace(now_ns=time.time_ns, local_ns=lambda t: t, set_ns=lambda: 0),
                          send=lambda h, m: None, reply=lambda m, to: None, publish=lambda: None,
                          rejected=lambda reason: rejected.update([reason]), time_source=None)
    return ctx, rejected


def control_messages():
    kinds = st.sampled_from(["report", "map", "stepped", "place", "release", "loads", "claims", "x"])
    hosts = st.sampled_from(["h0", "h1", "h2", "h3", "nobody"])
    mapping = st.fixed_dictionaries({f: any_number for f in ("t0_ns", "offset_ns", "drift", "uncertainty_ns")})
    shaped = st.one_of(
        st.fixed_dictionaries({"t": st.just("map"), "hosts": st.dictionaries(hosts, mapping | json_values, max_size=3)}),
        st.fixed_dictionaries({"t": st.just("report"), "host": hosts,
                               "edges": st.lists(st.lists(any_number | hosts, max_size=6), max_size=3) | json_values}),
        st.fixed_dictionaries({"t": st.just("stepped"), "delta_ns": any_number | json_values}),
        st.fixed_dictionaries({"t": kinds, "job": json_values, "want": json_values, "hops": json_values,
                               "host": hosts, "claims": json_values}),
    )
    return st.one_of(shaped.map(lambda m: json.dumps(m).encode()), st.binary(max_size=200),
                     json_values.map(lambda v: json.dumps(v).encode()))


@fuzz
@given(st.lists(st.tuples(control_messages(), st.sampled_from(["h0", "h1", "h3"])), max_size=5))
def test_control_handlers_are_total_and_the_services_keep_working(messages):
    ctx, rejected = control_context("h0")  # h0: the reference, which solves
    clock, claims = ClockSync(ctx), Claims(ctx)
    router = Router([clock, claims])
    for data, sender in messages:
        router.deliver(data, (ctx.addresses[sender], 7299))
    mapping = clock.sync.mapping
    clock.poll(time.monotonic())  # what was stored must not break the loop's later work
    clock.tick(time.time_ns())
    claims.tick(time.time_ns())
    clock.report()
    assert mapping is None or all(v == v for v in (mapping.offset_ns, mapping.drift))  # never a NaN


@fuzz
@given(st.dictionaries(st.sampled_from(["h0", "h1"]), st.fixed_dictionaries(
    {f: any_number for f in ("t0_ns", "offset_ns", "drift", "uncertainty_ns")}), min_size=1))
def test_a_map_moves_our_clock_only_from_the_solver_and_only_when_finite(maps):
    ctx, rejected = control_context("h1")  # h0 is the reference
    clock = ClockSync(ctx)
    router = Router([clock])
    router.deliver(json.dumps({"t": "map", "hosts": maps}).encode(), (ctx.addresses["h2"], 7299))
    assert clock.sync.mapping is None and rejected["not_solver"] == 1
    router.deliver(json.dumps({"t": "map", "hosts": maps}).encode(), (ctx.addresses["h0"], 7299))
    if clock.sync.mapping is not None:
        m = clock.sync.mapping
        # the bound may be infinite (a host the solver could not sync): only never NaN or negative
        assert all(abs(v) < float("inf") for v in (m.t0_ns, m.offset_ns, m.drift)) and m.uncertainty_ns >= 0


def test_the_engine_reflects_a_sealed_probe_and_expires_what_it_reflected(engine):
    pkt = wire.encode(wire.Packet(wire.PROBE0, 77, 1))
    engine._received(engine._reflectors[0], Sealer(PROBE, B, KEYS).seal(pkt, A)[0], _rx_anc(), B, 47611)
    assert (B, 77) in engine._reflected
    engine._last_expiry = 0.0
    engine._expire(time.monotonic() + 61)
    assert (B, 77) not in engine._reflected
