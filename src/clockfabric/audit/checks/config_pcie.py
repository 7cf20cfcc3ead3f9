"""configuration.pcie: every PCIe device runs at the speed and width it can do. A NIC that
trained at x8 instead of x16 halves its bandwidth and says nothing; sysfs shows it.
GPUs lower their link speed when idle to save power, so for them only the width is judged."""

from __future__ import annotations

from clockfabric.audit.context import Context
from clockfabric.audit.model import Finding, Verdict
from clockfabric.audit.registry import Outcome, check

NETWORK, DISPLAY = "0x02", "0x03"  # PCI base classes (Ethernet/InfiniBand; GPUs and 3D controllers)


@check("configuration.pcie", "PCIe links at full speed and width",
       "Reseat the device or its riser, check BIOS PCIe settings; then `lspci -vv` LnkSta against LnkCap.")
def run(ctx: Context) -> Outcome:
    ignore = set(ctx.expect["pcie"]["ignore"])
    findings, devices = [], 0
    for h in ctx.reporting():
        for d in ctx.facts(h, "pcie") or []:
            if d.get("address") in ignore or f"{d.get('vendor')}:{d.get('device')}" in ignore:
                continue
            devices += 1
            findings += _judge(h, d)
    if not devices:
        return Outcome("no PCIe link information on any host", [Finding(Verdict.SKIP, "no PCIe links in sysfs")])
    return Outcome(f"{devices} PCIe links on {len(ctx.reporting())} hosts", findings)


def _judge(host: str, d: dict) -> list[Finding]:
    cls = str(d.get("class", ""))
    important = cls.startswith((NETWORK, DISPLAY))
    what = f"{d.get('driver') or 'device'} {d.get('vendor')}:{d.get('device')}"
    out = []
    cw, mw = d.get("current_width"), d.get("max_width")
    if cw and mw and cw < mw:
        out.append(Finding(Verdict.FAIL if important else Verdict.WARN,
                           f"{what} link x{cw}, capable of x{mw}", host=host, device=d["address"], evidence=d))
    cs, ms = d.get("current_speed_gts"), d.get("max_speed_gts")
    if cs and ms and cs < ms and not cls.startswith(DISPLAY):
        out.append(Finding(Verdict.FAIL if important else Verdict.WARN,
                           f"{what} link at {cs:g} GT/s, capable of {ms:g} GT/s", host=host, device=d["address"],
                           evidence=d))
    return out
