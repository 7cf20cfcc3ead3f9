"""backend.cabling: each NIC is cabled to the switch port the topology says, as the switch
announces itself over LLDP. Two swapped cables still give link and often even pings (through
the wrong port), and then a rail's traffic crosses planes or lands on the wrong leaf."""

from __future__ import annotations

from clockfabric.audit.context import Context
from clockfabric.audit.model import Finding, Verdict
from clockfabric.audit.registry import Outcome, check


@check("backend.cabling", "NICs cabled to the expected switch ports (LLDP)",
       "Swap the cables back to the ports the topology gives (or fix the topology file).", lldp=True)
def run(ctx: Context) -> Outcome:
    findings, heard, judged, listened = [], 0, 0, 0
    for h in ctx.reporting():
        lldp = ctx.facts(h, "lldp")
        if not isinstance(lldp, dict):
            continue
        listened += 1
        for lk in ctx.topology.links_of(h):
            nic = lk.port(h).iface
            want = lk.other(h)
            info = (ctx.facts(h, "nics") or {}).get(nic) or {}
            if (h, nic) in ctx.broken or not info.get("present") or info.get("carrier") is False \
                    or info.get("admin_up") is False:
                continue  # no link, no LLDP: the NIC checks have it
            judged += 1
            seen = lldp.get(nic)
            if not seen:
                findings.append(Finding(Verdict.WARN, f"no LLDP heard (expected {want})", host=h, device=nic))
                continue
            heard += 1
            got = f"{seen.get('system') or seen.get('chassis')}:{seen.get('port')}"
            if got != str(want):
                ctx.mark_broken(h, nic, "backend.cabling")
                findings.append(Finding(Verdict.FAIL, f"cabled to {got}; the topology has {want}", host=h, device=nic,
                                        evidence={"seen": seen, "expected": str(want)}))
    if not listened:
        return Outcome("no host listened for LLDP", [Finding(Verdict.SKIP, "no host reported LLDP neighbours")])
    if judged and not heard:
        return Outcome("no LLDP neighbour heard on any NIC",
                       [Finding(Verdict.SKIP, "no LLDP on this fabric (switches do not send it, or nothing listens)")])
    return Outcome(f"{heard} of {judged} NICs heard their switch port over LLDP", findings)
