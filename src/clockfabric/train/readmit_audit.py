"""The audit a drained host must pass before it rejoins a job's spares (`train run --readmit`).

`clockfabric audit`'s checks that judge one host: it answers (frontend.reach), its MTU and name
resolution, its back-end NICs present and up, each plane reached (its NICs pinged against a
healthy peer's: the job's first rank), its software against the peer's, its GPUs where NVML
exists. The peer reports too, but only what the audit finds on the drained host (or between it
and the peer) fails it: a peer's own trouble is not the drained host's.
"""

from __future__ import annotations

from collections.abc import Callable
from typing import Any

from clockfabric.audit.model import Finding, Report, Verdict
from clockfabric.audit.registry import get_check
from clockfabric.audit.run import audit as run_audit
from clockfabric.topology import Topology
from clockfabric.train.readmit import AuditResult, HostAudit

CHECKS = ("frontend.reach", "frontend.mtu", "frontend.names", "backend.nic_init", "backend.nic_active",
          "backend.connectivity", "configuration.software", "configuration.gpu")
REFERENCE_PEERS = 1  # each peer runs the audit's report too, beside the training: one is enough to reach
BAD = (Verdict.FAIL, Verdict.UNKNOWN)  # a warning does not keep a host out; not knowing does


def host_audit(topo: Topology, reach: Callable[[], dict[str, Any]], expectations: dict, fleet: str) -> HostAudit:
    """reach: how the audit reaches the hosts, made anew for each audit (audit()'s transport
    and its friends: a lab's, or ssh's for real hosts), so a drained host is audited the way
    every host is."""
    checks = [get_check(c) for c in CHECKS]

    def audit(host: str, peers: list[str]) -> AuditResult:
        report = run_audit(topo, [host, *peers[:REFERENCE_PEERS]], checks, expect=expectations, fleet=fleet, **reach())
        return AuditResult([c.id for c in checks], failing_on(report, host))

    return audit


def failing_on(report: Report, host: str) -> dict[str, str]:
    """check id -> what it failed on host (its findings there, or about the fleet as a whole)."""
    out = {}
    for result in report.results:
        bad = [f for f in result.findings if f.verdict in BAD and concerns(f, host)]
        if bad:
            out[result.id] = "; ".join(f"{f.where}: {f.message}" for f in bad)[:300]
    return out


def concerns(finding: Finding, host: str) -> bool:
    peer = str(finding.evidence.get("peer", ""))
    return finding.host in ("", host) or peer.split(":")[0] == host
