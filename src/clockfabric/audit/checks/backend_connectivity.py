"""backend.connectivity: every NIC reaches every peer's NIC on the same rail (ICMP echo from
the NIC's own address, out of that NIC). A NIC that reaches none of its peers is named once;
a pair that fails while both ends work elsewhere is a path problem, named as a pair; a rail
where nothing reaches anything is named as the rail (its switches)."""

from __future__ import annotations

from clockfabric.audit.blame import Pair, blame, whole_planes
from clockfabric.audit.context import Context
from clockfabric.audit.model import Finding, Verdict
from clockfabric.audit.registry import Outcome, check


def rail_pairs(ctx: Context) -> tuple[dict[Pair, list[dict]], list[Finding]]:
    """(NIC pairs, each way's ping results) for NICs not already found broken, and an unknown
    finding for each NIC that could not ping at all. A pair is pinged from both ends: both
    ways' results are kept together, so a NIC counts each peer once."""
    owner = {addr: hn for hn, addr in ctx.interface_addresses().items()}
    pairs: dict[Pair, list[dict]] = {}
    unknown = []
    for h in ctx.reporting():
        for nic, targets in (ctx.facts(h, "reach") or {}).items():
            if (h, nic) in ctx.broken:
                continue
            if "error" in targets:
                unknown.append(Finding(Verdict.UNKNOWN, targets["error"], host=h, device=nic))
                continue
            for addr, res in targets.items():
                dst = owner.get(addr)
                if dst and dst not in ctx.broken and dst[0] in ctx.reports:
                    first, second = sorted([(h, nic), dst])
                    pairs.setdefault((first, second), []).append(res)
    return pairs, unknown


def plane_of(ctx: Context):
    return lambda e: next(n.plane for n in ctx.nics(e[0]) if n.name == e[1])


def _peer_list(peers) -> list[str]:
    return [f"{h}:{n}" for h, n in peers]


@check("backend.connectivity", "Every NIC reaches every peer on its rail",
       "Check the NIC named (cabling, switch port, ARP/routes); for a pair, the path between them.", active=True)
def run(ctx: Context) -> Outcome:
    pairs, findings = rail_pairs(ctx)
    if not pairs:
        return Outcome("no rail pairs to try", findings or [Finding(Verdict.SKIP, "no NIC with peers on its rail "
                                                                                 "reported pings")])
    allowed = ctx.expect["network"]["connectivity_loss"]
    lost = {p: max(1 - r.get("received", 0) / max(1, r.get("sent", 0)) for r in rs) for p, rs in pairs.items()}
    dead = {p: any(r.get("received", 0) == 0 for r in rs) for p, rs in pairs.items()}
    dark, dead = whole_planes(dead, plane_of(ctx))
    for plane in dark:
        findings.append(Finding(Verdict.FAIL, f"plane {plane}: no NIC reaches any other (its switches?)",
                                evidence={"plane": plane}))
    blamed, left = blame(dead)
    for (h, nic), peers in blamed.items():
        ctx.mark_broken(h, nic, "backend.connectivity")
        findings.append(Finding(Verdict.FAIL, f"unreachable: fails with {len(peers)} of its rail peers",
                                host=h, device=nic, evidence={"peers": _peer_list(peers)}))
    for a, b in left:
        findings.append(Finding(Verdict.FAIL, f"cannot reach {b[0]}:{b[1]} (no echo came back)", host=a[0],
                                device=a[1], evidence={"peer": f"{b[0]}:{b[1]}", "pings": pairs[(a, b)]}))
    lossy = {p: not is_dead and lost[p] > allowed for p, is_dead in dead.items()
             if p[0] not in blamed and p[1] not in blamed}
    lossy_nics, lossy_pairs = blame(lossy)
    for (h, nic), peers in lossy_nics.items():
        share = max(lost[p] for p in lossy if (h, nic) in p and lossy[p])
        findings.append(Finding(Verdict.WARN, f"loses pings with {len(peers)} of its rail peers (up to {share:.0%})",
                                host=h, device=nic, evidence={"peers": _peer_list(peers)}))
    for a, b in lossy_pairs:
        findings.append(Finding(Verdict.WARN, f"{lost[(a, b)]:.0%} of pings to {b[0]}:{b[1]} lost", host=a[0],
                                device=a[1], evidence={"peer": f"{b[0]}:{b[1]}", "lost": lost[(a, b)]}))
    nics = {e for p in pairs for e in p}
    return Outcome(f"{len(pairs)} NIC pairs on {len(ctx.topology.planes)} rails, {len(nics)} NICs", findings)
