"""collective.allreduce: all-reduce bus bandwidth across the healthy hosts, swept over 1, 2, 4
and 8 subflows per peer (our queue-pair analogue), flat ring and hierarchical, against what the
link rates allow. When a run falls short, pair tests on each plane bisect it down to the NIC
(or the pair's path) that is slow: a quarter-rate link passes every passive check and ping.
"""

from __future__ import annotations

from clockfabric.audit.bisect import slow_nics
from clockfabric.audit.context import Context
from clockfabric.audit.model import Finding, Verdict
from clockfabric.audit.registry import Outcome, check
from clockfabric.errors import ClockfabricError


@check("collective.allreduce", "All-reduce bus bandwidth at link rate (1-8 subflows, ring and hierarchical)",
       "Test the NIC named alone (clockfabric bench allreduce --hosts A,B --planes P); check its link speed, "
       "optics and switch port counters.", active=True)
def run(ctx: Context) -> Outcome:
    from clockfabric.collective.run import allreduce
    from clockfabric.collective.sizes import parse_size

    if ctx.lab is None:
        return Outcome("collective tests need a lab for now",
                       [Finding(Verdict.SKIP, "collective tests run on labs (--lab); on real hosts: not yet")])
    broken_hosts = {h for h, _ in ctx.broken}
    hosts = [h for h in ctx.reporting() if h not in broken_hosts]
    excluded = sorted(set(ctx.hosts) - set(hosts))
    if len(hosts) < 2:
        return Outcome("fewer than two healthy hosts", [Finding(Verdict.SKIP, "fewer than two hosts passed the "
                                                                           "back-end checks")])
    cfg = ctx.expect["collective"]
    size = parse_size(cfg["size"])
    rows, short_planes = [], set()
    for algorithm in cfg["algorithms"]:
        for k in cfg["subflows"]:
            try:
                result = allreduce(ctx.lab, hosts, sizes=[size], subflows=k, algorithm=algorithm,
                                   iters=cfg["iters"], timeout_s=cfg["timeout_s"])
            except ClockfabricError as e:
                return Outcome("the all-reduce did not run", [Finding(Verdict.FAIL, str(e))])
            row = result.rows[-1]
            ratio = result.ratio(row) if result.expected_busbw_gbps else None
            rows.append({"algorithm": algorithm, "subflows": k, "size_bytes": row.size_bytes,
                         "busbw_gbps": round(row.busbw_gbps, 5), "expected_gbps": round(result.expected_busbw_gbps, 5),
                         "ratio": None if ratio is None else round(ratio, 3), "wrong": row.wrong})
            if row.wrong:
                return Outcome("wrong results", [Finding(Verdict.FAIL, f"{row.wrong} wrong elements in the all-reduce "
                                                                       f"({algorithm}, {k} subflows)", evidence=row.__dict__)])
            if ratio is not None and ratio < cfg["min_ratio"]:
                short_planes |= set(result.planes[:k])
    ctx.derived["collective.sweep"] = rows
    worst = min((r["ratio"] for r in rows if r["ratio"] is not None), default=None)
    summary = f"{len(hosts)} hosts, {len(rows)} runs, worst busbw {worst:.0%} of expected"
    if excluded:
        summary += f"; not tried (failed earlier checks): {', '.join(excluded)}"
    if not short_planes:
        return Outcome(summary, [Finding(Verdict.PASS, "busbw sweep", evidence={"runs": rows})])
    findings = []
    for plane in sorted(short_planes):
        for (h, nic), evidence in slow_nics(ctx, hosts, plane, size).items():
            findings.append(Finding(Verdict.FAIL, f"slow: all-reduce with {len(evidence['tests'])} partners at "
                                                  f"{evidence['ratio']:.0%} of expected on plane {plane}",
                                    host=h, device=nic, evidence=evidence))
    if not findings:
        findings.append(Finding(Verdict.FAIL, f"busbw {worst:.0%} of expected, but every pair test was at rate: "
                                              "the shortfall is in the fabric between leaves", evidence={"runs": rows}))
    return Outcome(summary, findings)
