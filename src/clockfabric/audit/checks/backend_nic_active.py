"""backend.nic_active: every back-end NIC has carrier (operstate up) and, with RDMA, its port
is ACTIVE / LinkUp. A NIC that lost its link is the first thing to rule out."""

from __future__ import annotations

from clockfabric.audit.context import Context
from clockfabric.audit.model import Finding, Verdict
from clockfabric.audit.registry import Outcome, check


@check("backend.nic_active", "Back-end NICs active (link up)",
       "Check the cable/optic and the switch port; `ip link show NIC`, `ibstat` for the RDMA port.")
def run(ctx: Context) -> Outcome:
    findings, judged = [], 0
    for h in ctx.reporting():
        nics = ctx.facts(h, "nics") or {}
        for nic in ctx.nics(h):
            info = nics.get(nic.name) or {}
            if not info.get("present") or (h, nic.name) in ctx.broken:
                continue  # backend.nic_init has it
            judged += 1
            problem = None
            if info.get("carrier") is False or info.get("operstate") not in ("up", "unknown"):
                problem = f"link down (operstate {info.get('operstate')}, carrier {info.get('carrier')})"
            elif (rdma := info.get("rdma")) and (rdma.get("state") or "").upper() != "ACTIVE":
                problem = (f"RDMA port {rdma.get('device')}/{rdma.get('port')} is {rdma.get('state')} "
                           f"({rdma.get('phys_state')})")
            if problem:
                ctx.mark_broken(h, nic.name, "backend.nic_active")
                findings.append(Finding(Verdict.FAIL, problem, host=h, device=nic.name,
                                        evidence={k: info.get(k)
                                                  for k in ("operstate", "carrier", "carrier_changes", "rdma")}))
    return Outcome(f"{judged} NICs up and running checked", findings)
