"""collective.allreduce: all-reduce bus bandwidth across the healthy hosts, against what the
link rates allow.

Judged: a ring on each plane alone (one subflow, pinned to the plane's NICs), the hosts in
ring order leaf by leaf (the ring crosses each leaf's uplinks once each way, as NCCL orders its
rings by topology). A plane that falls short is bisected with pair tests down to the NIC (or
the pair's path) that is slow: a quarter-rate link passes every passive check and every ping.
The bisect names a NIC only from two slow tests; where every pair is at rate, the ring runs
again, and a plane short twice in a row is the fabric between the leaves (once: a hiccup).
The bisect comes before any second ring because a slow ring is slow to repeat: four times as
long at a quarter of the rate. The planes run one after the other: on a lab their workers share
the machine's CPUs, and two rings at once come out short for that reason alone.
Swept, as evidence: 1, 2, 4 and 8 subflows per peer (our queue-pair analogue) over every
plane, flat ring and hierarchical, on a sample of the hosts spread over the leaves, the same
number under each (how busbw scales with subflows is a property of the fabric, not of each
host; NICs the bisect named are left out); only if even the best setting falls short is it a
warning (the fabric, or the hosts, cannot carry it).

Message sizes (collective.size "auto", the default) come from the link rates: each ring step
moves collective.step_ms of link time (a rank's buffer is n segments of expected busbw x
step), so a step is long against its fixed cost (a round trip, thread hand-offs) at any
rate and any n, and an iteration lasts 2(n-1) steps. A fixed size (1M) made a 32-host ring
step 32 KiB, mostly that fixed cost.
"""

from __future__ import annotations

import time

from clockfabric.audit.bisect import auto_size, ring_order, slow_nics
from clockfabric.audit.context import Context
from clockfabric.audit.model import Finding, Verdict
from clockfabric.audit.registry import Outcome, check
from clockfabric.errors import ClockfabricError


def sweep_sample(ctx: Context, hosts: list[str], most: int) -> list[str]:
    """Up to `most` hosts, the same number under each leaf (at least two, so hier has groups)."""
    from clockfabric.collective.expected import leaf_groups

    groups = leaf_groups(ctx.topology, hosts, ctx.topology.planes[0]) if hosts else []
    if not groups:
        return []
    groups = [g for g in groups if len(g) >= 2] or groups  # a leaf with one host left gives hier no group
    each = min(max(2, most // len(groups)), min(len(g) for g in groups))  # equal groups, or hier cannot run
    return [h for g in groups for h in g[:each]][:max(most, 2)]


@check("collective.allreduce", "All-reduce bus bandwidth at link rate (per plane; 1-8 subflows, ring and hier)",
       "Test the NIC named alone (clockfabric bench allreduce --hosts A,B --planes P); check its link speed, "
       "optics and switch port counters.", active=True)
def run(ctx: Context) -> Outcome:
    from clockfabric.collective.run import allreduce
    from clockfabric.collective.sizes import parse_size

    fleet = ctx.machines
    if fleet is None:
        return Outcome("no hosts to start workers on",
                       [Finding(Verdict.SKIP, "collective tests start a worker on each host: not yet on real hosts")])
    broken_hosts = {h for h, _ in ctx.broken}
    hosts = [h for h in ctx.reporting() if h not in broken_hosts]
    excluded = sorted(set(ctx.hosts) - set(hosts))
    if len(hosts) < 2:
        return Outcome("fewer than two healthy hosts", [Finding(Verdict.SKIP, "fewer than two hosts passed the "
                                                                           "back-end checks")])
    cfg = ctx.expect["collective"]
    fixed = None if cfg["size"] == "auto" else parse_size(cfg["size"])
    step_s = cfg["step_ms"] / 1e3

    def measure(subflows: int, planes: list[int] | None, algorithm: str = "ring", among: list[str] = hosts) -> dict:
        size = fixed or auto_size(ctx.topology, among, subflows, planes, algorithm, step_s)
        t0 = time.monotonic()
        result = allreduce(fleet, among, sizes=[size], subflows=subflows, planes=planes, algorithm=algorithm,
                           iters=cfg["iters"], timeout_s=cfg["timeout_s"])
        row = result.rows[-1]
        return {"algorithm": algorithm, "subflows": subflows, "planes": result.planes, "hosts": len(among),
                "size_bytes": row.size_bytes, "time_us": row.time_us,
                "busbw_gbps": round(row.busbw_gbps, 5), "expected_gbps": round(result.expected_busbw_gbps, 5),
                "ratio": round(result.ratio(row), 3), "wrong": row.wrong,
                "seconds": round(time.monotonic() - t0, 2)}

    try:
        per_plane = [measure(1, [p], among=ring_order(ctx.topology, hosts, p)) for p in ctx.topology.planes]
    except ClockfabricError as e:
        return Outcome("the all-reduce did not run", [Finding(Verdict.FAIL, str(e))])
    ctx.derived["collective.per_plane"] = per_plane
    if wrong := [r for r in per_plane if r["wrong"]]:
        return Outcome("wrong results", [Finding(Verdict.FAIL, f"{wrong[0]['wrong']} wrong elements in the all-reduce",
                                                 evidence=wrong[0])])
    findings, slow_hosts = [], set()
    for i, r in enumerate(per_plane):  # short: bisect that plane
        if r["ratio"] >= cfg["min_ratio"]:
            continue
        plane = r["planes"][0]
        slow = slow_nics(ctx, hosts, plane, fixed)  # each NIC it names was slow in two tests
        slow_hosts |= {h for h, _ in slow}
        findings += [Finding(Verdict.FAIL, f"slow on plane {plane}: pair all-reduce at {e['ratio']:.0%} of expected",
                             host=h, device=nic, evidence=e) for (h, nic), e in slow.items()]
        if slow:
            continue
        try:  # every pair at rate: the ring again, as a fault repeats and a hiccup does not
            again = measure(1, [plane], among=ring_order(ctx.topology, hosts, plane))
        except ClockfabricError as e:
            return Outcome("the all-reduce did not run", findings + [Finding(Verdict.FAIL, str(e))])
        per_plane[i] = r = max(r, again, key=lambda x: x["ratio"]) | {"first_ratio": r["ratio"],
                                                                      "seconds": r["seconds"] + again["seconds"]}
        if r["wrong"]:
            return Outcome("wrong results", findings + [Finding(Verdict.FAIL, f"{r['wrong']} wrong elements in "
                                                                              "the all-reduce", evidence=r)])
        if r["ratio"] < cfg["min_ratio"]:
            findings.append(Finding(Verdict.FAIL, f"plane {plane}: ring at {r['ratio']:.0%} of expected while "
                                                  "every pair is at rate: the fabric between leaves", evidence=r))
    # the sweep asks how the fabric scales with subflows: a NIC already named would only slow it down
    sample = sweep_sample(ctx, [h for h in hosts if h not in slow_hosts], cfg["sweep_hosts"])
    try:
        sweep = [measure(k, None, a, sample) for a in cfg["algorithms"] for k in cfg["subflows"]] \
            if len(sample) >= 2 else []
    except ClockfabricError as e:
        return Outcome("the all-reduce did not run", findings + [Finding(Verdict.FAIL, str(e))])
    ctx.derived["collective.sweep"] = sweep
    if wrong := [r for r in sweep if r["wrong"]]:
        return Outcome("wrong results", findings + [Finding(Verdict.FAIL, f"{wrong[0]['wrong']} wrong elements in "
                                                                          "the all-reduce", evidence=wrong[0])])
    best = max(sweep, key=lambda r: r["ratio"], default=None)
    if best and best["ratio"] < cfg["min_ratio"]:
        findings.append(Finding(Verdict.WARN, f"the best setting ({best['algorithm']}, {best['subflows']} subflows) "
                                              f"reaches {best['ratio']:.0%} of expected", evidence={"sweep": sweep}))
    findings.append(Finding(Verdict.PASS, "busbw per plane and over subflows", evidence={"per_plane": per_plane,
                                                                                         "sweep": sweep}))
    planes = ", ".join(f"{r['ratio']:.0%}" for r in per_plane)
    summary = f"{len(hosts)} hosts; per plane {planes} of expected ({per_plane[0]['size_bytes'] / 2**20:.2f} MiB)"
    if best:
        summary += (f"; best of {len(sweep)} settings on {len(sample)} hosts {best['ratio']:.0%} "
                    f"({best['algorithm']}, {best['subflows']} subflows)")
    if excluded:
        summary += f"; not tried (failed earlier checks): {', '.join(excluded)}"
    return Outcome(summary, findings)
