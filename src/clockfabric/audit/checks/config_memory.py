"""configuration.memory: each host has the memory and the DIMM count the others have. A host
that lost a DIMM boots fine with less memory and slower bandwidth; only comparison finds it."""

from __future__ import annotations

import statistics

from clockfabric.audit.context import Context
from clockfabric.audit.model import Finding, Verdict
from clockfabric.audit.registry import Outcome, check

GIB = 2 ** 30


@check("configuration.memory", "Memory size and DIMM count match the fleet",
       "Reseat or replace the missing DIMM on the hosts named; check `dmidecode -t memory`.")
def run(ctx: Context) -> Outcome:
    mem = {h: m for h in ctx.reporting() if isinstance(m := ctx.facts(h, "memory"), dict) and m.get("total_bytes")}
    if not mem:
        return Outcome("no host reported its memory", [Finding(Verdict.UNKNOWN, "no memory facts")])
    findings = []
    sizes = {h: m["total_bytes"] / GIB for h, m in mem.items()}
    want_gib, _ = ctx.expected("memory", "total_gib", sizes, how="median")
    floor = want_gib * (1 - ctx.expect["memory"]["tolerance"])
    for h, gib in sorted(sizes.items()):
        if gib < floor:
            findings.append(Finding(Verdict.FAIL, f"{gib:.1f} GiB of memory; the fleet expects {want_gib:.1f} GiB",
                                    host=h, evidence={"total_gib": round(gib, 2), "expected_gib": round(want_gib, 2)}))
    dimms = {h: m["dimms"] for h, m in mem.items() if m.get("dimms") is not None}
    if dimms:
        want, firm = ctx.expected("memory", "dimms", dimms)
        if not firm:  # DIMMs go missing, never appear: with no majority, the higher count is the norm
            want = statistics.median_high(dimms.values())
            ctx.derived["memory.dimms"] = want
        findings += [Finding(Verdict.FAIL, f"{n} DIMMs; the fleet expects {want}", host=h,
                             evidence={"dimms": n, "expected": want}) for h, n in sorted(dimms.items()) if n != want]
    counted = f", {len(dimms)} with DIMM counts" if dimms else " (DIMM counts not readable: no EDAC or dmidecode)"
    return Outcome(f"{len(mem)} hosts, median {want_gib:.1f} GiB{counted}", findings)
