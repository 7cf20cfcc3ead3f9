"""Bisect a slow collective down to a NIC: pair tests on one plane.

Round 1 pairs hosts under the same leaf where it can (so pairs share no fabric link) and
runs a two-rank all-reduce on each, pinned to the plane: same-leaf pairs several at once,
cross-leaf pairs one by one (they would share uplinks). Round 2 re-pairs each end of a slow
pair with a host from a pair that was at rate: an end that is slow again is the culprit;
if neither is, the pair is tested again alone, and if it is slow again its own path is the
culprit (reported on both ends); if not, it was a hiccup and nothing is reported.

Also here, for the check and its bisect alike: the ring order (leaf by leaf) and message
sizes from link rates (auto_size)."""

from __future__ import annotations

from collections.abc import Sequence
from concurrent.futures import ThreadPoolExecutor

from clockfabric.audit.context import Context
from clockfabric.errors import ClockfabricError
from clockfabric.topology import Topology

SUBFLOWS = 1  # as the per-plane ring it bisects
# on a lab every pair's workers share the machine's CPUs: 16 pairs at once read 0.78 on a clean
# 32-host lab
PAIRS_AT_ONCE = 4
# a pair's all-reduce is 2 steps, each this much link time (or a ring step, if that is longer): on a
# clean 5 Mbit/s lab, pairs with 100 ms steps read 0.79-0.94 of expected, with 400 ms ones 0.90-0.93.
# Not a multiple of the ring's step: a longer ring step (for a steadier ring of many hosts) made
# every pair test, and most of all the slow ones, last that many times longer, for no steadier reading.
PAIR_STEP_S = 0.4
MAX_SIZE = 1 << 30  # bytes per rank, whatever the rates


def ring_order(topo: Topology, hosts: Sequence[str], plane: int) -> list[str]:
    """hosts leaf by leaf on plane (in their order within a leaf): the ring then crosses each
    leaf's uplinks once each way, instead of wherever sorted names happen to change leaf."""
    from clockfabric.collective.expected import leaf_groups

    return [h for group in leaf_groups(topo, list(hosts), plane) for h in group]


def auto_size(topo: Topology, hosts: Sequence[str], subflows: int, planes: Sequence[int] | None,
              algorithm: str, step_s: float) -> int:
    """Bytes per rank such that each of a ring's 2(n-1) steps moves step_s of link time: n
    segments of (expected busbw x step_s), the expectation from link rates alone. Rounded down
    to n equal segments of whole floats; at least one float per segment, at most MAX_SIZE."""
    from clockfabric.collective.expected import expected_busbw_gbps

    n = len(hosts)
    busbw = expected_busbw_gbps(topo, list(hosts), subflows, planes, algorithm=algorithm) * 1e9  # bytes/s per hop
    size = min(MAX_SIZE, int(n * busbw * step_s))
    return max(4 * n, size - size % (4 * n))


def _leaf(ctx: Context, host: str, plane: int) -> str:
    nic = ctx.topology.hosts[host].nic(plane)
    links = [lk for lk in ctx.topology.links_of(host) if nic and lk.port(host).iface == nic.name]
    return links[0].other(host).node if links else ""


def pair_up(ctx: Context, hosts: list[str], plane: int) -> list[tuple[str, str]]:
    """Disjoint pairs, same-leaf first; an odd host out joins the last pair's first host later."""
    by_leaf: dict[str, list[str]] = {}
    for h in hosts:
        by_leaf.setdefault(_leaf(ctx, h, plane), []).append(h)
    pairs, leftover = [], []
    for group in by_leaf.values():
        pairs += list(zip(group[::2], group[1::2], strict=False))
        if len(group) % 2:
            leftover.append(group[-1])
    pairs += list(zip(leftover[::2], leftover[1::2], strict=False))
    return pairs


def _test(ctx: Context, pairs: list[tuple[str, str]], plane: int, size: int | None) -> dict[tuple[str, str], float]:
    """busbw / expected for each pair (0.0 when the test fails). Pairs under one leaf share no
    fabric link and run together, PAIRS_AT_ONCE at a time; pairs across leaves would share
    uplinks, so run one by one.
    size None: from the pair's link rates (auto_size, PAIR_STEP_S of link time a step)."""
    from clockfabric.collective.run import allreduce

    fleet = ctx.machines
    assert fleet is not None  # the collective check runs these only where it can start workers

    step_s = max(PAIR_STEP_S, ctx.expect["collective"]["step_ms"] / 1e3)

    def one(pair: tuple[str, str]) -> float:
        try:
            each = size or auto_size(ctx.topology, pair, SUBFLOWS, [plane], "ring", step_s)
            res = allreduce(fleet, list(pair), sizes=[each], subflows=SUBFLOWS, planes=[plane],
                            iters=ctx.expect["collective"]["iters"], timeout_s=ctx.expect["collective"]["timeout_s"])
        except ClockfabricError:
            return 0.0
        return res.ratio(res.rows[-1])

    local = [p for p in pairs if _leaf(ctx, p[0], plane) == _leaf(ctx, p[1], plane)]
    with ThreadPoolExecutor(max(1, min(PAIRS_AT_ONCE, len(local)))) as pool:
        out = dict(zip(local, pool.map(one, local), strict=True))
    return out | {p: one(p) for p in pairs if p not in out}


def slow_nics(ctx: Context, hosts: list[str], plane: int, size: int | None = None) -> dict[tuple[str, str], dict]:
    """(host, nic) -> evidence, for the NICs on `plane` that pair tests find below the bar.
    size: bytes per rank of every pair test; None: from the link rates."""
    bar = ctx.expect["collective"]["min_ratio"]
    pairs = pair_up(ctx, hosts, plane)
    first = _test(ctx, pairs, plane, size)
    good = [h for p, r in first.items() if r >= bar for h in p]
    slow = [p for p, r in first.items() if r < bar]
    if len(hosts) % 2 and good:  # the odd host out: test it with a good one
        odd = next(h for h in hosts if not any(h in p for p in pairs))
        first |= _test(ctx, [(odd, good[0])], plane, size)
        if first[(odd, good[0])] < bar:
            slow.append((odd, good[0]))
    second: dict[tuple[str, str], float] = {}
    if slow and len(good) >= 2:
        partners = iter(good)
        retest = []
        for a, b in slow:
            for end in (a, b):
                partner = next(partners, None)
                if partner is None:
                    partners = iter(good)
                    partner = next(partners)
                if partner != end:
                    retest.append((end, partner))
        # the re-tests reuse good hosts, so run them in rounds of disjoint pairs
        while retest:
            used: set[str] = set()
            batch: list[tuple[str, str]] = []
            rest: list[tuple[str, str]] = []
            for p in retest:
                (rest if used & set(p) else batch).append(p)
                used |= set(p)
            second |= _test(ctx, batch, plane, size)
            retest = rest
    culprits: dict[str, list[dict]] = {}
    for a, b in slow:
        was = {"pair": [a, b], "ratio": round(first.get((a, b), 0.0), 3)}
        ends = [e for e in (a, b) if any(r < bar for p, r in second.items() if p[0] == e)]
        for e in ends:
            culprits.setdefault(e, []).append(was)
            culprits[e] += [{"pair": list(p), "ratio": round(r, 3)} for p, r in second.items() if p[0] == e]
        if not ends:  # neither end is slow with another host (or none was at rate to try): the pair's
            again = _test(ctx, [(a, b)], plane, size)[(a, b)]  # own path, if it is slow again, alone
            if again < bar:  # a fault repeats; a hiccup (a busy CPU) does not
                for e in (a, b):
                    culprits.setdefault(e, []).extend([was, {"pair": [a, b], "ratio": round(again, 3)}])
    out = {}
    for host, tests in culprits.items():
        nic = ctx.topology.hosts[host].nic(plane)
        out[(host, nic.name if nic else f"plane{plane}")] = {"plane": plane, "tests": tests,
                                                             "ratio": min(t["ratio"] for t in tests)}
    return out
