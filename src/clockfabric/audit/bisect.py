"""Bisect a slow collective down to a NIC: pair tests on one plane, all pairs at once.

Round 1 pairs hosts under the same leaf where it can (so pairs share no fabric link) and
runs a two-rank all-reduce on each, pinned to the plane: same-leaf pairs all at once,
cross-leaf pairs one by one (they would share uplinks). Round 2 re-pairs each end of a slow
pair with a host from a pair that was at rate: an end that is slow again is the culprit;
if neither is, the pair's own path is (reported on both ends)."""

from __future__ import annotations

from concurrent.futures import ThreadPoolExecutor

from clockfabric.audit.context import Context
from clockfabric.errors import ClockfabricError

SUBFLOWS = 1  # as the per-plane ring it bisects


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
        pairs += list(zip(group[::2], group[1::2]))
        if len(group) % 2:
            leftover.append(group[-1])
    pairs += list(zip(leftover[::2], leftover[1::2]))
    return pairs


def _test(ctx: Context, pairs: list[tuple[str, str]], plane: int, size: int) -> dict[tuple[str, str], float]:
    """busbw / expected for each pair (0.0 when the test fails). Pairs under one leaf share no
    fabric link and run all at once; pairs across leaves would share uplinks, so run one by one."""
    from clockfabric.collective.run import allreduce

    def one(pair: tuple[str, str]) -> float:
        try:
            res = allreduce(ctx.lab, list(pair), sizes=[size], subflows=SUBFLOWS, planes=[plane],
                            iters=ctx.expect["collective"]["iters"], timeout_s=ctx.expect["collective"]["timeout_s"])
        except ClockfabricError:
            return 0.0
        return res.ratio(res.rows[-1])

    local = [p for p in pairs if _leaf(ctx, p[0], plane) == _leaf(ctx, p[1], plane)]
    with ThreadPoolExecutor(max(1, len(local))) as pool:
        out = dict(zip(local, pool.map(one, local)))
    return out | {p: one(p) for p in pairs if p not in out}


def slow_nics(ctx: Context, hosts: list[str], plane: int, size: int) -> dict[tuple[str, str], dict]:
    """(host, nic) -> evidence, for the NICs on `plane` that pair tests find below the bar."""
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
    culprits: dict[str, list[dict]] = {}
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
        second: dict[tuple[str, str], float] = {}
        while retest:
            used, batch, rest = set(), [], []
            for p in retest:
                (rest if used & set(p) else batch).append(p)
                used |= set(p)
            second |= _test(ctx, batch, plane, size)
            retest = rest
        for a, b in slow:
            ends = [e for e in (a, b) if any(r < bar for p, r in second.items() if p[0] == e)]
            for e in ends or (a, b):  # neither alone is slow: the pair's path is
                culprits.setdefault(e, []).append({"pair": [a, b], "ratio": round(first.get((a, b), 0.0), 3)})
            for p, r in second.items():
                if p[0] in ends:
                    culprits[p[0]].append({"pair": list(p), "ratio": round(r, 3)})
    else:
        for a, b in slow:
            for e in (a, b):
                culprits.setdefault(e, []).append({"pair": [a, b], "ratio": round(first.get((a, b), 0.0), 3)})
    out = {}
    for host, tests in culprits.items():
        nic = ctx.topology.hosts[host].nic(plane)
        out[(host, nic.name if nic else f"plane{plane}")] = {"plane": plane, "tests": tests,
                                                             "ratio": min(t["ratio"] for t in tests)}
    return out
