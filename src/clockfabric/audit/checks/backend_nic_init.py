"""backend.nic_init: every back-end NIC the topology gives a host exists, is enabled, carries
its planned address, and has its RDMA device when the fleet requires RDMA."""

from __future__ import annotations

from clockfabric.audit.context import Context
from clockfabric.audit.model import Finding, Verdict
from clockfabric.audit.registry import Outcome, check


@check("backend.nic_init", "Back-end NICs initialized",
       "Load the NIC driver/firmware, bring the interface up and restore its address (see the host's network config).")
def run(ctx: Context) -> Outcome:
    planned = ctx.interface_addresses()
    need_rdma = ctx.expect["network"]["rdma"] == "required"
    findings, judged = [], 0
    for h in ctx.reporting():
        nics = ctx.facts(h, "nics") or {}
        for nic in ctx.nics(h):
            judged += 1
            info = nics.get(nic.name) or {}
            problem = None
            if not info.get("present"):
                problem = "missing: no such interface"
            elif info.get("admin_up") is False:
                problem = "administratively down"
            elif info.get("ipv4") is None:
                findings.append(Finding(Verdict.WARN, f"addresses not readable: {info.get('ipv4_error', 'unknown')}",
                                        host=h, device=nic.name))
            elif (want := planned.get((h, nic.name))) and not any(a.split("/")[0] == want for a in info["ipv4"]):
                problem = f"has {', '.join(info['ipv4']) or 'no address'}, not its planned {want}"
            elif need_rdma and not info.get("rdma"):
                problem = "no RDMA device (network.rdma is required)"
            if problem:
                ctx.mark_broken(h, nic.name, "backend.nic_init")
                findings.append(Finding(Verdict.FAIL, problem, host=h, device=nic.name, evidence=info))
    return Outcome(f"{judged} NICs on {len(ctx.reporting())} hosts", findings)
