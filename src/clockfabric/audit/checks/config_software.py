"""configuration.software: the same kernel, OS, Python, driver, NCCL, rdma-core and Python
packages on every host. A job whose ranks run different NCCL or torch versions can hang in
its first collective; the odd host out is named."""

from __future__ import annotations

from clockfabric.audit.context import Context
from clockfabric.audit.model import Finding, Verdict
from clockfabric.audit.registry import Outcome, check

FIELDS = ("kernel", "os", "python", "nvidia_driver", "nccl", "rdma_core")
LENIENT = ("kernel", "os")  # rolling OS updates are common and rarely fatal: warn
ABSENT = "not installed"  # a vote too: a package on one host of four is that host's oddity


@check("configuration.software", "Software versions consistent across hosts",
       "Install the expected version on the hosts named (or set software.* in the expectations file).")
def run(ctx: Context) -> Outcome:
    hosts = [h for h in ctx.reporting() if isinstance(ctx.facts(h, "software"), dict)]
    if not hosts:
        return Outcome("no host reported its software", [Finding(Verdict.UNKNOWN, "no software facts")])
    soft = {h: ctx.facts(h, "software") for h in hosts}
    columns: dict[str, dict[str, str | None]] = {f: {h: soft[h].get(f) for h in hosts} for f in FIELDS}
    packages = sorted({p for h in hosts for p in (soft[h].get("packages") or {})}
                      | set(ctx.expect["software"]["packages"]))
    for p in packages:
        columns[f"packages.{p}"] = {h: (soft[h].get("packages") or {}).get(p) for h in hosts}
    findings, compared = [], 0
    for name, values in columns.items():
        if all(v is None for v in values.values()) and not _written(ctx, name):
            continue  # installed nowhere and expected nowhere: nothing to compare
        compared += 1
        findings += _compare(ctx, name, values)
    return Outcome(f"{compared} versions compared on {len(hosts)} hosts", findings)


def _written(ctx: Context, name: str):
    section = ctx.expect["software"]
    return section["packages"].get(name.split(".", 1)[1]) if name.startswith("packages.") else section.get(name)


def _compare(ctx: Context, name: str, values: dict[str, str | None]) -> list[Finding]:
    written = _written(ctx, name)
    if written is not None:
        want, firm = str(written), True
    else:
        want, firm = ctx.expected("software", name, {h: ABSENT if v is None else v for h, v in values.items()})
    label = name.removeprefix("packages.")
    if not firm:
        spread = ", ".join(f"{h}={v}" for h, v in sorted(values.items()))
        return [Finding(Verdict.WARN, f"{label}: no majority version across the fleet ({spread})",
                        evidence={"versions": values})]
    verdict = Verdict.WARN if name in LENIENT or want == ABSENT else Verdict.FAIL
    out = []
    for h, v in sorted(values.items()):
        if (v or ABSENT) != want:
            message = (f"{label} {v} installed here only" if want == ABSENT else
                       f"{label} {v or ABSENT}; the fleet {'expects' if written else 'has'} {want}")
            out.append(Finding(verdict, message, host=h, evidence={"field": label, "found": v, "expected": want}))
    return out
