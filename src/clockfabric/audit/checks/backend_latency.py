"""backend.latency: no NIC sits far from its rail peers. Each pair's floor (its fastest round
trip: a busy CPU delays some pings, a standing queue or a long path delays all of them) is
compared with the fleet's own median plus a margin, or an absolute limit; a NIC that is slow
with many of its peers (a queue in front of it, a long cable, a slow path) is named once.
With agents running and clocks synced, `clockfabric owd` shows which direction it is."""

from __future__ import annotations

import statistics

from clockfabric.audit.blame import blame
from clockfabric.audit.checks.backend_connectivity import rail_pairs
from clockfabric.audit.context import Context
from clockfabric.audit.model import Finding, Verdict
from clockfabric.audit.registry import Outcome, check


@check("backend.latency", "Latency between rail peers within bounds",
       "Look for a queue or a slow link in front of the NIC named: `clockfabric owd`, switch port counters.",
       active=True)
def run(ctx: Context) -> Outcome:
    rtts = {p: min(r["rtt_us"]) for p, r in rail_pairs(ctx).items() if r.get("rtt_us")}
    if not rtts:
        return Outcome("no round trips measured", [Finding(Verdict.SKIP, "no rail pair answered pings")])
    cfg = ctx.expect["latency"]
    fleet = statistics.median(rtts.values())
    limit = cfg["max_us"] if cfg["max_us"] is not None else fleet + cfg["margin_us"]
    ctx.derived["latency.max_us"] = round(limit, 1)
    blamed, left = blame({p: v > limit for p, v in rtts.items()})
    findings = []
    for (h, nic), peers in blamed.items():
        mine = [v for p, v in rtts.items() if (h, nic) in p and v > limit]
        findings.append(Finding(Verdict.FAIL, f"far: round trips of {statistics.median(mine) / 1e3:.2f} ms with "
                                              f"{len(peers)} peers (limit {limit / 1e3:.2f} ms, fleet {fleet:.0f} µs)",
                                host=h, device=nic, evidence={"rtt_us": round(statistics.median(mine), 1),
                                                              "limit_us": round(limit, 1),
                                                              "peers": [f"{a}:{b}" for a, b in peers]}))
    for (a, b) in left:
        findings.append(Finding(Verdict.FAIL, f"round trip to {b[0]}:{b[1]} {rtts[(a, b)] / 1e3:.2f} ms "
                                              f"(limit {limit / 1e3:.2f} ms)", host=a[0], device=a[1],
                                evidence={"peer": f"{b[0]}:{b[1]}", "rtt_us": rtts[(a, b)]}))
    return Outcome(f"{len(rtts)} rail pairs, median floor {fleet:.0f} µs, limit {limit:.0f} µs", findings)
