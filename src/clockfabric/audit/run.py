"""Run an audit: gather every host's report at once, then run the chosen checks in order,
each under its own timeout, and put the results in a Report."""

from __future__ import annotations

import threading
import time
from contextlib import AbstractContextManager, nullcontext

from clockfabric.audit.context import Context
from clockfabric.audit.gather import Progress, Transport, gather, specs
from clockfabric.audit.model import CheckResult, Finding, Report, Verdict, worst
from clockfabric.audit.registry import Check, Outcome
from clockfabric.hosts import Fleet
from clockfabric.topology import Topology


def audit(topo: Topology, hosts: list[str], checks: list[Check], *, transport: Transport, expect: dict,
          fleet: str, machines: Fleet | None = None, during: AbstractContextManager | None = None,
          progress: Progress | None = None) -> Report:
    """machines: where active checks start workers (collective tests); during: what runs while the
    hosts report (on a lab, its switches announcing themselves over LLDP, as real switches always do)."""
    started_ns, t0 = time.time_ns(), time.monotonic()
    report = progress or (lambda *_: None)
    pinging = any(c.active and c.category == "backend" for c in checks)  # --passive: no traffic at all
    # a switch announces itself every 30 s or so: hosts wait for it only when a check judges it
    listening = any(c.lldp for c in checks)
    tell = specs(topo, hosts, pings=expect["latency"]["samples"] if pinging else 0,
                 lldp_wait_s=expect["timeouts"]["lldp_s"] if listening else 0.0)
    with during or nullcontext():
        reports, missing = gather(tell, transport, timeout_s=expect["timeouts"]["host_s"], progress=report)
    ctx = Context(topo, hosts, reports, missing, expect=expect, machines=machines)
    results = []
    for i, check in enumerate(checks):
        report("checks", i, len(checks))
        results.append(run_check(ctx, check, expect["timeouts"]["check_s"]))
    report("checks", len(checks), len(checks))
    return Report(fleet, hosts, results, started_ns, time.monotonic() - t0, expectations=ctx.derived)


def run_check(ctx: Context, check: Check, timeout_s: float) -> CheckResult:
    """One check in its own thread: one that hangs or crashes says so and the audit goes on."""
    box: dict = {}

    def body() -> None:
        try:
            box["outcome"] = check.run(ctx)
        except Exception as e:  # noqa: BLE001 - a broken check is an unknown verdict, not a crashed audit
            box["error"] = f"{type(e).__name__}: {e}"

    t0 = time.monotonic()
    thread = threading.Thread(target=body, name=check.id, daemon=True)
    thread.start()
    thread.join(timeout_s)
    if thread.is_alive():
        outcome = Outcome(f"timed out after {timeout_s:g} s",
                          [Finding(Verdict.UNKNOWN, f"no verdict within {timeout_s:g} s")])
    elif "error" in box:
        outcome = Outcome("the check failed to run", [Finding(Verdict.UNKNOWN, box["error"])])
    else:
        outcome = box["outcome"]
    return CheckResult(check.id, check.category, check.title, worst(f.verdict for f in outcome.findings),
                       outcome.summary, outcome.findings, check.fix, time.monotonic() - t0)
