"""The fleet side of clock sync: who probes whom (clock/graph.py), local -> global mappings
(clock/mapping.py) and the solver (clock/solver.py) fed with exact synthetic reports.

Synthetic hosts have clocks that are affine in real time; a report's edge is what a perfect
pair fit would say, by the model in clock/network.py: from i's side, a = c_j - c_i when i's
clock reads C, and b = d(c_j - c_i)/d(c_i).
"""

from __future__ import annotations

from collections import deque
from dataclasses import dataclass

import numpy as np
import pytest

from clockfabric.clock.delays import FLOOR_HORIZON, percentile
from clockfabric.clock.graph import neighbours, probe_peers
from clockfabric.clock.mapping import DRIFT_BOUND, Mapping
from clockfabric.clock.solver import Solver
from clockfabric.clock.sync import HostSync
from clockfabric.probe.engine import Exchange

EPOCH = 1_800_000_000_000_000_000


# ---- probe graph ----------------------------------------------------------------------------

def _connected(peers: dict[str, list[str]]) -> bool:
    near = neighbours(peers)
    start = next(iter(near))
    seen, todo = {start}, deque([start])
    while todo:
        for p in near[todo.popleft()]:
            if p not in seen:
                seen.add(p)
                todo.append(p)
    return seen == set(near)


@pytest.mark.parametrize("n,k", [(2, 1), (5, 3), (12, 4), (40, 10), (100, 16)])
def test_probe_peers_are_k_distinct_others_and_connected(n, k):
    hosts = [f"h{i:03d}" for i in range(n)]
    peers = probe_peers(hosts, k, seed=7)
    assert set(peers) == set(hosts)
    for h, ps in peers.items():
        assert len(ps) == k
        assert len(set(ps)) == k
        assert h not in ps
        assert set(ps) <= set(hosts)
    ring = sorted(hosts)
    for i, h in enumerate(ring):  # the ring edge comes first: the graph is connected whatever the chords
        assert peers[h][0] == ring[(i + 1) % n]
    assert _connected(peers)


def test_probe_peers_is_deterministic_for_a_seed_and_ignores_input_order():
    hosts = [f"node-{i}" for i in range(30)]
    a = probe_peers(hosts, 6, seed=3)
    assert a == probe_peers(list(reversed(hosts)), 6, seed=3)  # every host computes the same graph
    b = probe_peers(hosts, 6, seed=4)
    assert a != b
    assert sum(a[h] != b[h] for h in hosts) > 20  # the chords move, not just one host's


def test_probe_peers_with_too_few_hosts_or_no_k():
    assert probe_peers(["a", "b", "c"], 10) == {"a": ["b", "c"], "b": ["c", "a"], "c": ["a", "b"]}
    assert probe_peers(["a", "b", "c"], 0) == {"a": [], "b": [], "c": []}
    assert probe_peers(["solo"], 3) == {"solo": []}


def test_neighbours_are_symmetric():
    hosts = [f"h{i}" for i in range(15)]
    peers = probe_peers(hosts, 3, seed=1)
    near = neighbours(peers)
    for h, ps in peers.items():
        for p in ps:
            assert p in near[h] and h in near[p]
    for h, ns in near.items():  # and nothing else
        assert all(p in peers[h] or h in peers[p] for p in ns)
        assert h not in ns
    assert neighbours({"a": ["b"]}) == {"a": {"b"}, "b": {"a"}}


# ---- mapping --------------------------------------------------------------------------------

@pytest.mark.parametrize("offset_ns,drift", [(0.0, 0.0), (50_000_000.4, 100e-6), (-50_000_000.7, -100e-6),
                                             (123.456, 1e-9), (-7_654_321.25, 37.3e-6)])
def test_mapping_inverts_the_clock_model_at_epoch_scale(offset_ns, drift):
    t0 = EPOCH + 123_456_789
    m = Mapping(t0, offset_ns, drift, 10.0)
    rng = np.random.default_rng(0)
    for g in [t0, t0 + 1, t0 - 1, *(t0 + int(d) for d in rng.integers(-3_600 * 10**9, 3_600 * 10**9, 200))]:
        c = g + round(offset_ns + drift * (g - t0))  # the host's clock reading, an integer
        back = m.global_ns(c)
        assert isinstance(back, int)
        assert abs(back - g) <= 1


def test_mapping_round_trips_through_a_dict():
    m = Mapping(EPOCH + 5, -1234.5, 2.5e-6, 42.0, synced=False)
    assert Mapping.from_dict(m.as_dict()) == m
    assert Mapping.from_dict({"t0_ns": str(EPOCH), "offset_ns": 1, "drift": 0, "uncertainty_ns": 0}).synced is True


# ---- the solver, end to end -----------------------------------------------------------------

@dataclass(frozen=True)
class Host:
    """reading(tau) = EPOCH + offset + (1 + drift) * tau, tau in ns of real time since EPOCH."""

    offset_ns: float
    drift: float

    def read(self, tau: float) -> int:
        return EPOCH + round(self.offset_ns + (1 + self.drift) * tau)

    def real(self, reading: int) -> float:
        return ((reading - EPOCH) - self.offset_ns) / (1 + self.drift)


def edge_row(clocks: dict[str, Host], i: str, j: str, center: int, weight: int = 20, margin: float = 0.0,
             drift_bound: float = DRIFT_BOUND) -> list:
    """[peer, a, b, C, weight, margin, drift bound] as i's pair fit of j would report it, exactly."""
    ci, cj = clocks[i], clocks[j]
    tau = ci.real(center)
    a = (cj.offset_ns + (1 + cj.drift) * tau) - (center - EPOCH)
    b = (cj.drift - ci.drift) / (1 + ci.drift)
    return [j, a, b, center, weight, margin, drift_bound]


def make_fleet(n: int, seed: int = 0) -> dict[str, Host]:
    rng = np.random.default_rng(seed)
    return {f"h{i:02d}": Host(float(rng.uniform(-50e6, 50e6)), float(rng.uniform(-100e-6, 100e-6))) for i in range(n)}


def report(clocks: dict[str, Host], host: str, peers: list[str], tau_center: float) -> dict:
    center = clocks[host].read(tau_center)  # the middle of the host's last window, its own clock
    return {"t": "report", "host": host, "edges": [edge_row(clocks, host, p, center) for p in peers]}


NOW_TAU = 10e9  # the solve happens 10 s of real time after EPOCH


def max_mapping_error(clocks: dict[str, Host], msgs: dict, anchor: str, hosts) -> float:
    """The worst |mapping(host's reading) - anchor's reading| over 2 s around the solve, in ns."""
    worst = 0.0
    for h in hosts:
        m = Mapping.from_dict(msgs[h]["hosts"][h])
        for tau in np.linspace(NOW_TAU - 2e9, NOW_TAU + 2e9, 9):
            worst = max(worst, abs(m.global_ns(clocks[h].read(tau)) - clocks[anchor].read(tau)))
    return worst


def test_solver_maps_every_host_onto_the_reference_clock():
    clocks = make_fleet(16, seed=1)
    peers = probe_peers(list(clocks), 4, seed=2)
    solver = Solver(list(clocks), "h03")
    for h in clocks:
        solver.on_report(report(clocks, h, peers[h], NOW_TAU - 1e9), now=100.0)
    t0 = clocks["h03"].read(NOW_TAU)
    msgs = solver.solve(t0, now=101.0)
    assert set(msgs) == set(clocks)
    assert solver.rejected == 0
    near = neighbours(peers)
    for h, msg in msgs.items():
        assert msg["t"] == "map"
        assert msg["parts"] == 1
        assert msg["dropped_edges"] == 0
        assert set(msg["hosts"]) == near[h] | {h}  # its own mapping and its neighbours'
        for m in msg["hosts"].values():
            assert m["t0_ns"] == t0 and m["synced"] is True
            # exact edges with no band: only the drift allowance over the fits' age (1 s) per hop
            assert m["uncertainty_ns"] <= 4 * DRIFT_BOUND * 1e9 + 1.0
        assert msg["hosts"][h] == msgs[next(iter(near[h]))]["hosts"][h]  # everyone hears the same
        # ... as the same objects: a batch's shared parts are encoded once (wirejson.SharedParts)
        assert msg["hosts"][h] is msgs[next(iter(near[h]))]["hosts"][h] and msg["frame"] is msgs["h03"]["frame"]
    ref = Mapping.from_dict(msgs["h03"]["hosts"]["h03"])
    assert ref.offset_ns == 0.0 and ref.drift == 0.0
    assert max_mapping_error(clocks, msgs, "h03", clocks) <= 3.0


def test_solver_edges_centred_at_different_times_and_weights():
    """Each host's window centre in its own clock differs; weights differ; still exact."""
    clocks = make_fleet(10, seed=5)
    peers = probe_peers(list(clocks), 3, seed=5)
    solver = Solver(list(clocks), "h00")
    rng = np.random.default_rng(6)
    for h in clocks:
        center = clocks[h].read(NOW_TAU - float(rng.uniform(0.5e9, 3e9)))
        edges = [edge_row(clocks, h, p, center, weight=int(rng.integers(1, 21))) for p in peers[h]]
        solver.on_report({"t": "report", "host": h, "edges": edges}, now=0.0)
    msgs = solver.solve(clocks["h00"].read(NOW_TAU), now=1.0)
    assert max_mapping_error(clocks, msgs, "h00", clocks) <= 3.0


def test_a_stale_host_drops_out_and_returns_when_it_reports_again():
    clocks = make_fleet(12, seed=3)
    hosts = list(clocks)
    peers = probe_peers(hosts, 4, seed=3)
    solver = Solver(hosts, "h00", stale_s=5.0)
    t0 = clocks["h00"].read(NOW_TAU)

    for h in hosts:
        solver.on_report(report(clocks, h, peers[h], NOW_TAU - 1e9), now=100.0)
    msgs = solver.solve(t0, now=101.0)
    assert set(msgs) == set(hosts)

    for h in hosts:  # h07 goes quiet
        if h != "h07":
            solver.on_report(report(clocks, h, peers[h], NOW_TAU - 1e9), now=110.0)
    msgs = solver.solve(t0, now=111.0)  # h07's report is 11 s old
    assert "h07" not in msgs
    assert all("h07" not in msg["hosts"] for msg in msgs.values())  # nobody is told about it either
    assert set(msgs) == set(hosts) - {"h07"}
    assert all(msg["parts"] == 1 for msg in msgs.values())
    assert max_mapping_error(clocks, msgs, "h00", msgs) <= 3.0

    solver.on_report(report(clocks, "h07", peers["h07"], NOW_TAU - 1e9), now=112.0)
    msgs = solver.solve(t0, now=113.0)
    assert set(msgs) == set(hosts)
    assert max_mapping_error(clocks, msgs, "h00", clocks) <= 3.0

    assert solver.solve(t0, now=200.0) == {}  # everyone stale: nothing to say


def test_the_stale_limit_is_inclusive():
    clocks = make_fleet(4, seed=9)
    peers = probe_peers(list(clocks), 2)
    solver = Solver(list(clocks), "h00", stale_s=5.0)
    for h in clocks:
        solver.on_report(report(clocks, h, peers[h], NOW_TAU), now=10.0)
    t0 = clocks["h00"].read(NOW_TAU)
    assert set(solver.solve(t0, now=15.0)) == set(clocks)
    assert solver.solve(t0, now=15.001) == {}


def test_reports_from_unknown_hosts_are_rejected_and_unknown_peers_ignored():
    clocks = make_fleet(6, seed=4)
    peers = probe_peers(list(clocks), 2, seed=4)
    solver = Solver(list(clocks), "h00")
    intruder = [["h00", 1e6, 0.0, EPOCH, 20, 0.0, DRIFT_BOUND]]
    solver.on_report({"t": "report", "host": "intruder", "edges": intruder}, now=0.0)
    solver.on_report({"t": "report", "edges": []}, now=0.0)  # no host at all
    assert solver.rejected == 2
    assert "intruder" not in solver.reports
    for h in clocks:
        msg = report(clocks, h, peers[h], NOW_TAU)
        msg["edges"].append(["ghost", 5e6, 1e-5, EPOCH, 20, 0.0, DRIFT_BOUND])  # a peer the solver does not know
        solver.on_report(msg, now=0.0)
    assert solver.rejected == 2
    msgs = solver.solve(clocks["h00"].read(NOW_TAU), now=1.0)
    assert set(msgs) == set(clocks)
    assert all(msg["dropped_edges"] == 0 for msg in msgs.values())
    assert max_mapping_error(clocks, msgs, "h00", clocks) <= 3.0


def test_a_split_graph_gives_two_parts_and_the_cut_off_part_is_not_synced():
    clocks = make_fleet(12, seed=8)
    left = [f"h{i:02d}" for i in range(6)]
    right = [f"h{i:02d}" for i in range(6, 12)]
    solver = Solver(list(clocks), "h02")
    for group in (left, right):
        peers = probe_peers(group, 3, seed=1)  # edges only inside each group
        for h in group:
            solver.on_report(report(clocks, h, peers[h], NOW_TAU - 1e9), now=0.0)
    msgs = solver.solve(clocks["h02"].read(NOW_TAU), now=1.0)
    assert set(msgs) == set(clocks)
    assert all(msg["parts"] == 2 for msg in msgs.values())
    for h in left:
        assert msgs[h]["hosts"][h]["synced"] is True
        assert set(msgs[h]["hosts"]) <= set(left)
    for h in right:
        assert msgs[h]["hosts"][h]["synced"] is False
        assert set(msgs[h]["hosts"]) <= set(right)
    assert max_mapping_error(clocks, msgs, "h02", left) <= 3.0
    # the cut-off part is pinned to its lowest host: consistent among itself, not with the reference
    assert max_mapping_error(clocks, msgs, "h06", right) <= 3.0
    assert max_mapping_error(clocks, msgs, "h02", right) > 1_000


def test_one_lying_edge_is_dropped_and_the_rest_stay_exact():
    """An edge off by 50 us (an asymmetric path) disagrees around every loop: the network effect
    finds it, drops it and solves again. (The peeling round that drops it may take an honest
    edge beside it, bent by the liar past worst/8; that one is not re-admitted.)"""
    clocks = make_fleet(16, seed=11)
    peers = probe_peers(list(clocks), 5, seed=11)
    solver = Solver(list(clocks), "h00")
    for h in clocks:
        msg = report(clocks, h, peers[h], NOW_TAU - 1e9)
        if h == "h05":
            msg["edges"][1][1] += 50_000.0
        solver.on_report(msg, now=0.0)
    msgs = solver.solve(clocks["h00"].read(NOW_TAU), now=1.0)
    sol = solver.last
    liar = int(np.argmax(np.abs(sol.residual_ns)))
    assert sol.residual_ns[liar] == pytest.approx(50_000.0, abs=5.0)  # the solution does not follow the lie
    assert not sol.kept[liar]
    assert np.abs(sol.residual_ns[sol.kept]).max() < 1.0
    assert all(1 <= msg["dropped_edges"] <= 2 for msg in msgs.values())
    assert max_mapping_error(clocks, msgs, "h00", clocks) <= 3.0


@pytest.mark.parametrize("n", [1, 2, 3, 7, 20, 101])
def test_percentile_matches_numpy(n):
    values = sorted(np.random.default_rng(n).integers(0, 10**6, n).tolist())
    for q in (0, 50, 99, 100):
        assert percentile(values, q) == pytest.approx(np.percentile(values, q))


def _exchange(t: int, out_ns: int, back_ns: int, path: str = "eth0:7300") -> Exchange:
    """An exchange between clocks that agree: each direction's one-way delay as given."""
    return Exchange("b", path, (t, t + 10_000), (t + out_ns, t + out_ns + 10_000),
                    (t + out_ns + 50_000, t + out_ns + 60_000), (t + out_ns + 50_000 + back_ns,) * 2)


def test_owd_per_direction_and_a_floor_that_forgets_early_guesses():
    sync = HostSync("a", ["b"])
    sync.on_map({"hosts": {h: Mapping(EPOCH, 0.0, 0.0, 0.0).as_dict() for h in "ab"}})
    sync.pairs["b"].exchanges.extend([_exchange(EPOCH, -1_000, 30_000)])  # a mapping still converging
    first = {r["src"]: r for r in sync.owd()}
    assert first["a"]["floor_ns"] == first["a"]["min_ns"] == -1_000
    assert (first["b"]["src"], first["b"]["dst"], first["b"]["min_ns"]) == ("b", "a", 30_000)
    for k in range(FLOOR_HORIZON):
        sync.pairs["b"].exchanges.clear()
        sync.pairs["b"].exchanges.extend([_exchange(EPOCH + k, 20_000 + 10 * i, 30_000) for i in range(5)])
        rows = {r["src"]: r for r in sync.owd()}
        assert rows["a"]["n"] == 5 and rows["a"]["min_ns"] == 20_000 and rows["a"]["p50_ns"] == 20_020
        expected = -1_000 if k < FLOOR_HORIZON - 1 else 20_000  # the bad guess ages out, not sooner
        assert rows["a"]["floor_ns"] == expected


def test_floors_are_read_again_with_the_newest_mappings():
    sync = HostSync("a", ["b"])
    settled = {h: Mapping(EPOCH, 0.0, 0.0, 0.0).as_dict() for h in "ab"}
    sync.on_map({"hosts": settled})
    sync.pairs["b"].exchanges.append(_exchange(EPOCH, -1_000, 30_000))  # read with a guess
    assert {r["src"]: r["floor_ns"] for r in sync.owd()} == {"a": -1_000, "b": 30_000}

    moved = dict(settled, b=Mapping(EPOCH, -21_000.0, 0.0, 0.0).as_dict())  # b's mapping moved 21 us
    sync.on_map({"hosts": moved})
    rows = {r["src"]: r for r in sync.owd()}
    assert rows["a"]["floor_ns"] == rows["a"]["min_ns"] == 20_000  # the old packet, read with the new mapping
    assert rows["b"]["floor_ns"] == 9_000

    ours_moved = dict(moved, a=Mapping(EPOCH, -10_000.0, 0.0, 0.0).as_dict())  # our own mapping moved
    sync.on_map({"hosts": ours_moved})
    assert {r["src"]: r["floor_ns"] for r in sync.owd()} == {"a": 10_000, "b": 19_000}


def test_a_standing_queue_stays_above_its_floor_when_the_mappings_move():
    """On the lab, a filled link made the solver's maps move or leave a peer out for a round;
    when that voided the floors, the queue became the floor and the congestion went unseen."""
    sync = HostSync("a", ["b"])
    sync.on_map({"hosts": {h: Mapping(EPOCH, 0.0, 0.0, 0.0).as_dict() for h in "ab"}})
    sync.pairs["b"].exchanges.extend(_exchange(EPOCH + i, 20_000, 30_000) for i in range(5))
    sync.owd()
    for k, hosts in enumerate([{"a": 0.0, "b": 3_000.0}, {"a": 0.0}, {"a": 1_000.0, "b": -300_000.0},
                               {"a": 0.0, "b": 0.0}]):  # moved; b left out; one bad solve; back
        sync.on_map({"hosts": {h: Mapping(EPOCH, off, 0.0, 0.0).as_dict() for h, off in hosts.items()}})
        sync.pairs["b"].exchanges.clear()
        sync.pairs["b"].exchanges.extend(_exchange(EPOCH + 100 * k + i, 4_020_000, 30_000) for i in range(5))
        (out,) = [r for r in sync.owd() if r["src"] == "a"]  # b's map stays while a round leaves it out
        assert out["p50_ns"] - out["floor_ns"] == 4_000_000


def test_the_agents_validators_take_what_hosts_and_the_solver_send():
    """The control channel's checks and the clock's messages must agree: a report or a map the
    agent's clock service refuses as invalid leaves every host unsynced."""
    from clockfabric.agent.services.clock import valid_map, valid_report

    clocks = make_fleet(6, seed=3)
    peers = probe_peers(list(clocks), 3, seed=4)
    solver = Solver(list(clocks), "h00")
    for h in clocks:
        msg = report(clocks, h, peers[h], NOW_TAU - 1e9)
        if h == "h02":  # a host with an external time source says how far its clock is from UTC
            msg["utc"] = [1_500.0, 2e-8, clocks[h].read(NOW_TAU - 1e9)]
            assert not valid_report({**msg, "utc": [1.0, float("nan"), 0]}, h, clocks)
            assert not valid_report({**msg, "utc": "soon"}, h, clocks)
        assert valid_report(msg, h, clocks), msg
        solver.on_report(msg, now=100.0)
    msgs = solver.solve(clocks["h00"].read(NOW_TAU), now=101.0)
    assert all(valid_map(m, clocks) for m in msgs.values())
    unsynced = {**msgs["h01"], "hosts": {**msgs["h01"]["hosts"]}}
    unsynced["hosts"]["h01"] = {**unsynced["hosts"]["h01"], "uncertainty_ns": float("inf"), "synced": False}
    assert valid_map(unsynced, clocks)  # a host that cannot be synced has an infinite bound
    nan = {**unsynced, "hosts": {"h01": {**unsynced["hosts"]["h01"], "uncertainty_ns": float("nan")}}}
    assert not valid_map(nan, clocks)
    assert "limit_ns" in msgs["h01"]["hosts"]["h01"] and "drift_limit" in msgs["h01"]["hosts"]["h01"]
    for field in ("limit_ns", "drift_limit"):  # what a held-over mapping serves
        for bad in (-1.0, float("nan"), "wide"):
            wrong = {**msgs["h01"], "hosts": {"h01": {**msgs["h01"]["hosts"]["h01"], field: bad}}}
            assert not valid_map(wrong, clocks), (field, bad)


@pytest.mark.parametrize("update_s, expected", [(1.0, 2), (10.0, 10)])
def test_an_update_longer_than_the_window_reads_every_exchange_since_the_last(update_s, expected):
    """Exchanges once a second, a 2 s window: an agent updating every 10 s reads the ten since its
    last update, where the window alone would give the last two seconds' and drop the rest."""
    sync = HostSync("a", ["b"], report_ns=int(update_s * 1e9))
    sync.on_map({"hosts": {h: Mapping(EPOCH, 0.0, 0.0, 0.0).as_dict() for h in "ab"}})
    sync.add([_exchange(EPOCH + k * 1_000_000_000, 20_000 + k, 30_000) for k in range(10)])
    sync.report(EPOCH + 10_000_000_000)  # the update's refit trims what is past the span
    out = next(r for r in sync.owd() if r["src"] == "a")
    assert out["n"] == expected and out["min_ns"] == 20_000 + 10 - expected
    pair = sync.pairs["b"]  # the clock's own NTP filter still reads the window alone
    assert pair.ntp() is not None and pair.ntp().at_ns >= EPOCH + 7_000_000_000
