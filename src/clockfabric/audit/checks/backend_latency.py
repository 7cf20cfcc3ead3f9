"""backend.latency: no NIC sits far from its rail peers. Each pair's floor (its fastest round
trip either way: a busy CPU delays some pings, a standing queue or a long path delays all of
them) is compared with the fleet's typical floor (the lower quartile: one far NIC in many
pairs must not set it) plus a margin, or an absolute limit. A NIC that is slow with many of
its peers (a queue in front of it, a long cable, a slow path) is named once.
With agents running and clocks synced, `clockfabric owd` shows which direction it is."""

from __future__ import annotations

import statistics

from clockfabric.audit.blame import blame, whole_planes
from clockfabric.audit.checks.backend_connectivity import plane_of, rail_pairs
from clockfabric.audit.context import Context
from clockfabric.audit.model import Finding, Verdict
from clockfabric.audit.registry import Outcome, check


@check("backend.latency", "Latency between rail peers within bounds",
       "Look for a queue or a slow link in front of the NIC named: `clockfabric owd`, switch port counters.",
       active=True)
def run(ctx: Context) -> Outcome:
    pairs, _ = rail_pairs(ctx)  # NICs that could not ping are connectivity's to report
    floors = {p: min(x for r in rs for x in r.get("rtt_us", [])) for p, rs in pairs.items()
              if any(r.get("rtt_us") for r in rs)}
    if not floors:
        return Outcome("no round trips measured", [Finding(Verdict.SKIP, "no rail pair answered pings")])
    cfg = ctx.expect["latency"]
    typical = sorted(floors.values())[len(floors) // 4]
    limit = cfg["max_us"] if cfg["max_us"] is not None else typical + cfg["margin_us"]
    ctx.derived["latency.max_us"] = round(limit, 1)
    slow, rest = whole_planes({p: v > limit for p, v in floors.items()}, plane_of(ctx))
    findings = [Finding(Verdict.FAIL, f"plane {plane}: every round trip is above {limit / 1e3:.2f} ms",
                        evidence={"plane": plane}) for plane in slow]
    blamed, left = blame(rest)
    for (h, nic), peers in blamed.items():
        mine = [v for p, v in floors.items() if (h, nic) in p and v > limit]
        ctx.mark_broken(h, nic, "backend.latency")
        findings.append(Finding(Verdict.FAIL, f"far: round trips of {statistics.median(mine) / 1e3:.2f} ms with "
                                              f"{len(peers)} peers (limit {limit / 1e3:.2f} ms, "
                                              f"typical {typical:.0f} µs)",
                                host=h, device=nic, evidence={"rtt_us": round(statistics.median(mine), 1),
                                                              "limit_us": round(limit, 1),
                                                              "peers": [f"{a}:{b}" for a, b in peers]}))
    for a, b in left:
        findings.append(Finding(Verdict.FAIL, f"round trip to {b[0]}:{b[1]} {floors[(a, b)] / 1e3:.2f} ms "
                                              f"(limit {limit / 1e3:.2f} ms)", host=a[0], device=a[1],
                                evidence={"peer": f"{b[0]}:{b[1]}", "rtt_us": floors[(a, b)]}))
    return Outcome(f"{len(floors)} rail pairs, typical floor {typical:.0f} µs, limit {limit:.0f} µs", findings)
