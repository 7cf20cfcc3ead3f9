"""backend.connectivity: every NIC reaches every peer's NIC on the same rail (ICMP echo from
the NIC's own address, out of that NIC). A NIC that reaches none of its peers is named once;
a pair that fails while both ends work elsewhere is a path problem, named as a pair."""

from __future__ import annotations

from clockfabric.audit.blame import blame
from clockfabric.audit.context import Context
from clockfabric.audit.model import Finding, Verdict
from clockfabric.audit.registry import Outcome, check


def rail_pairs(ctx: Context) -> dict[tuple[tuple[str, str], tuple[str, str]], dict]:
    """(src (host, nic), dst (host, nic)) -> ping result, for NICs not already found broken."""
    owner = {addr: hn for hn, addr in ctx.interface_addresses().items()}
    out = {}
    for h in ctx.reporting():
        reach = ctx.facts(h, "reach") or {}
        for nic, targets in reach.items():
            if (h, nic) in ctx.broken or not isinstance(targets, dict):
                continue
            for addr, res in targets.items():
                dst = owner.get(addr)
                if dst and dst not in ctx.broken and dst[0] in ctx.reports:
                    out[((h, nic), dst)] = res
    return out


@check("backend.connectivity", "Every NIC reaches every peer on its rail",
       "Check the NIC named (cabling, switch port, ARP/routes); for a pair, the path between them.", active=True)
def run(ctx: Context) -> Outcome:
    pairs = rail_pairs(ctx)
    if not pairs:
        return Outcome("no rail pairs to try", [Finding(Verdict.SKIP, "no NIC with peers on its rail reported pings")])
    allowed = ctx.expect["network"]["connectivity_loss"]
    lost = {p: 1 - r.get("received", 0) / max(1, r.get("sent", 0)) for p, r in pairs.items()}
    dead = {p: r.get("received", 0) == 0 for p, r in pairs.items()}
    blamed, left = blame(dead)
    findings = []
    for (h, nic), peers in blamed.items():
        ctx.mark_broken(h, nic, "backend.connectivity")
        findings.append(Finding(Verdict.FAIL, f"unreachable: fails with {len(peers)} of its rail peers",
                                host=h, device=nic, evidence={"peers": [f"{ph}:{pn}" for ph, pn in peers]}))
    for (a, b) in left:
        findings.append(Finding(Verdict.FAIL, f"cannot reach {b[0]}:{b[1]} (no echo came back)", host=a[0],
                                device=a[1], evidence={"peer": f"{b[0]}:{b[1]}", **pairs[(a, b)]}))
    lossy = {p: not dead[p] and share > allowed for p, share in lost.items()
             if p[0] not in blamed and p[1] not in blamed}
    lossy_nics, lossy_pairs = blame(lossy)
    for (h, nic), peers in lossy_nics.items():
        share = max(lost[p] for p in lossy if (h, nic) in p and lossy[p])
        findings.append(Finding(Verdict.WARN, f"loses pings with {len(peers)} of its rail peers (up to {share:.0%})",
                                host=h, device=nic, evidence={"peers": [f"{ph}:{pn}" for ph, pn in peers]}))
    for (a, b) in lossy_pairs:
        findings.append(Finding(Verdict.WARN, f"{lost[(a, b)]:.0%} of pings to {b[0]}:{b[1]} lost", host=a[0],
                                device=a[1], evidence={"peer": f"{b[0]}:{b[1]}", "lost": lost[(a, b)]}))
    nics = {e for p in pairs for e in p}
    return Outcome(f"{len(pairs)} NIC pairs on {len(ctx.topology.planes)} rails, {len(nics)} NICs", findings)
