"""configuration.gpu: GPUs through NVML: the count the fleet expects, ECC on and clean, no
pending page retirement or row remap, persistence mode, clocks not held down, full PCIe width;
and the XIDs the driver logged since boot (facts/gpus.py reads them from the kernel log).
The anchors are DCGM's diagnostics and Azure's HPC health checks."""

from __future__ import annotations

import statistics

from clockfabric.audit.context import Context
from clockfabric.audit.model import Finding, Verdict
from clockfabric.audit.registry import Outcome, check

BAD_THROTTLE = {"hw_slowdown", "hw_thermal_slowdown", "hw_power_brake_slowdown", "sw_thermal_slowdown"}
# XIDs after which NVIDIA's catalogue has the GPU reset, drained or serviced: these fail. The rest
# (13, 31, 43, 45, ...) are most often the application's own faults: they warn.
CRITICAL_XIDS = {46: "GPU stopped processing", 48: "double-bit ECC error", 62: "internal micro-controller halt",
                 63: "ECC page retirement or row remap recorded", 64: "ECC page retirement or row remap failed",
                 74: "NVLink error", 79: "GPU has fallen off the bus", 92: "high single-bit ECC error rate",
                 94: "contained ECC error", 95: "uncontained ECC error", 119: "GSP RPC timeout", 120: "GSP error"}


@check("configuration.gpu", "GPUs present, healthy and configured",
       "Drain the host: reset or replace the GPU named (nvidia-smi -q), enable ECC/persistence as the fleet does.")
def run(ctx: Context) -> Outcome:
    gpus = {h: g for h in ctx.reporting() if isinstance(g := ctx.facts(h, "gpus"), dict)}
    if not any(g.get("present") for g in gpus.values()):
        reasons = sorted({g.get("reason", "") for g in gpus.values()} - {""})
        return Outcome("no GPUs on any host", [Finding(Verdict.SKIP, f"no GPUs: {'; '.join(reasons) or 'none found'}")])
    counts = {h: len(g.get("devices", [])) if g.get("present") else 0 for h, g in gpus.items()}
    want, firm = ctx.expected("gpu", "count", counts)
    if not firm:  # GPUs fall off the bus, never appear: with no majority, the higher count is the norm
        want = statistics.median_high(counts.values())
        ctx.derived["gpu.count"] = want
    findings = [Finding(Verdict.FAIL, f"{n} GPUs; the fleet expects {want}", host=h,
                        evidence={"gpus": n, "expected": want}) for h, n in sorted(counts.items()) if n != want]
    devices = [(h, d) for h, g in sorted(gpus.items()) for d in g.get("devices", [])]
    clocks = {f"{h}/{d.get('index')}": (d.get("clocks") or {}).get("max_sm_mhz") for h, d in devices}
    max_sm, firm = ctx.expected("gpu", "max_sm_mhz", clocks)
    if not firm and max_sm is not None:
        findings.append(Finding(Verdict.WARN, "no majority max SM clock across the fleet's GPUs",
                                evidence={"max_sm_mhz": clocks}))
    for h, d in devices:
        findings += _judge(ctx, h, d, max_sm if firm else None)
    for h, g in sorted(gpus.items()):
        findings += _xids(h, g)
    total = sum(counts.values())
    return Outcome(f"{total} GPUs on {sum(1 for n in counts.values() if n)} hosts (expected {want} each)", findings)


def _judge(ctx: Context, host: str, d: dict, fleet_max_sm: int | None) -> list[Finding]:
    want = ctx.expect["gpu"]
    dev = f"gpu{d.get('index')}"
    out = []

    def add(verdict: Verdict, message: str, **evidence) -> None:
        out.append(Finding(verdict, message, host=host, device=dev,
                           evidence={"uuid": d.get("uuid"), "pci_bus_id": d.get("pci_bus_id"), **evidence}))

    if "error" in d:
        add(Verdict.FAIL, f"NVML cannot read it: {d['error']}")
        return out
    if want["ecc"] and d.get("ecc_mode_current") is False:
        add(Verdict.FAIL, "ECC is off", ecc_mode_current=False)
    if (n := d.get("ecc_uncorrected_volatile")) and n > 0:
        add(Verdict.FAIL, f"{n} uncorrected ECC errors since the driver loaded", ecc_uncorrected_volatile=n)
    if (pages := d.get("retired_pages")) and pages.get("pending"):
        add(Verdict.FAIL, "page retirement pending: reset the GPU", retired_pages=pages)
    if rows := d.get("remapped_rows"):
        if rows.get("failure"):
            add(Verdict.FAIL, "row remapping failed: replace the GPU", remapped_rows=rows)
        elif rows.get("pending"):
            add(Verdict.FAIL, "row remap pending: reset the GPU", remapped_rows=rows)
        elif rows.get("uncorrectable"):
            add(Verdict.WARN, f"{rows['uncorrectable']} rows remapped for uncorrectable errors", remapped_rows=rows)
    if want["persistence"] and d.get("persistence_mode") is False:
        add(Verdict.WARN, "persistence mode off (slow first CUDA call, driver unloads between jobs)")
    if bad := sorted(set(d.get("throttle_reasons") or []) & BAD_THROTTLE):
        add(Verdict.WARN, f"clocks throttled: {', '.join(bad)}", throttle_reasons=bad)
    max_sm = (d.get("clocks") or {}).get("max_sm_mhz")
    if max_sm and fleet_max_sm and max_sm != fleet_max_sm:  # another SKU, or clocks locked down
        add(Verdict.WARN, f"max SM clock {max_sm} MHz; the fleet's GPUs run {fleet_max_sm} MHz", max_sm_mhz=max_sm)
    pcie = d.get("pcie") or {}
    if pcie.get("width") and pcie.get("max_width") and pcie["width"] < pcie["max_width"]:
        add(Verdict.FAIL, f"PCIe x{pcie['width']}, capable of x{pcie['max_width']}", pcie=pcie)
    return out


def _xids(host: str, gpus: dict) -> list[Finding]:
    """One finding per GPU and XID logged since boot: critical ones fail, the rest warn."""
    log = gpus.get("xid")
    if log is None or not gpus.get("present"):
        return []  # a host side that does not read the log
    if not log.get("readable"):
        return [Finding(Verdict.WARN, f"XID history not read: {log.get('reason')}", host=host, evidence={"xid": log})]
    gpu_at = {d["pci_bus_id"].rsplit(".", 1)[0]: f"gpu{d.get('index')}" for d in gpus.get("devices", [])
              if d.get("pci_bus_id")}  # the log names a GPU by bus id, without the function
    out = []
    for seen in sorted(log.get("xids", []), key=lambda x: (x["pci_bus_id"], x["xid"])):
        bus, xid, n, last = seen["pci_bus_id"], seen["xid"], seen["count"], seen.get("last", {})
        what = CRITICAL_XIDS.get(xid)
        message = (f"XID {xid} on {bus}: {last.get('message') or what or 'no message'} "
                   f"({f'{n} times' if n > 1 else 'once'} since boot)")
        if bus not in gpu_at:
            message += "; NVML lists no GPU there now"
        out.append(Finding(Verdict.FAIL if what else Verdict.WARN, message, host=host, device=gpu_at.get(bus, bus),
                           evidence={**seen, "critical": what}))
    return out
