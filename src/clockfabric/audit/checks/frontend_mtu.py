"""frontend.mtu: every NIC of a plane has the same MTU. A host at 9000 on a 1500 fabric (or
the reverse) passes pings and small messages, then drops every full-size frame of a job."""

from __future__ import annotations

from clockfabric.audit.context import Context
from clockfabric.audit.model import Finding, Verdict
from clockfabric.audit.registry import Outcome, check


@check("frontend.mtu", "MTU consistent on every plane",
       "Set the MTU the fabric uses (ip link set dev NIC mtu N, and in the host's network config).")
def run(ctx: Context) -> Outcome:
    findings, judged = [], 0
    for plane in ctx.topology.planes:
        mtus = {}
        for h in ctx.reporting():
            nic = ctx.topology.hosts[h].nic(plane)
            if nic is None:
                continue
            info = (ctx.facts(h, "nics") or {}).get(nic.name)
            if info and info.get("present") and info.get("mtu"):
                mtus[(h, nic.name)] = info["mtu"]
        if not mtus:
            continue
        judged += len(mtus)
        want, firm = ctx.expected("network", "mtu", {f"{h}:{n}": v for (h, n), v in mtus.items()})
        if not firm:
            findings.append(Finding(Verdict.WARN, f"plane {plane}: no majority MTU ({sorted(set(mtus.values()))})",
                                    evidence={f"{h}:{n}": v for (h, n), v in mtus.items()}))
            continue
        for (h, n), mtu in sorted(mtus.items()):
            if mtu != want:
                findings.append(Finding(Verdict.FAIL, f"MTU {mtu}; plane {plane} uses {want}", host=h, device=n,
                                        evidence={"mtu": mtu, "expected": want, "plane": plane}))
    return Outcome(f"{judged} NICs on {len(ctx.topology.planes)} planes", findings)
