"""frontend.reach: every host answers the audit (through its agent, or the lab's exec) within
the per-host timeout. A host that hangs is named here and never holds up the rest."""

from __future__ import annotations

from clockfabric.audit.context import Context
from clockfabric.audit.model import Finding, Verdict
from clockfabric.audit.registry import Outcome, check


@check("frontend.reach", "Management reachability: every host answers",
       "Check the host is up and its agent runs (systemctl status clockfabric-agent), or its management link.")
def run(ctx: Context) -> Outcome:
    findings = [Finding(Verdict.FAIL, why, host=h) for h, why in sorted(ctx.missing.items())]
    return Outcome(f"{len(ctx.reporting())} of {len(ctx.hosts)} hosts answered", findings)
