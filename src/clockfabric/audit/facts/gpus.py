"""GPU facts through NVML: driver, and per GPU its ECC state and errors, retired pages or remapped
rows, clocks, throttle reasons, PCIe link, temperature and power.

Loaded as telemetry/nvidia_gpu.py loads it (pynvml, or a stand-in with its names for tests).
Every field is its own NVML call: one the GPU or driver lacks (NotSupported on a consumer board,
retired pages on Ampere and later, remapped rows before it) is null, with NVML's reason in the
GPU's `unread`, and nothing else is lost. A GPU whose handle cannot be had is listed with its
error: a GPU that fell off the bus is exactly what an audit is for.

XID history: NVML hands out XID events only as they happen, so the driver's past ones are read
where operators read them, the kernel's ring buffer ("NVRM: Xid (PCI:0000:3b:00): 79, pid=...,
GPU has fallen off the bus."), through /dev/kmsg without blocking. A log the audit may not read
(kernel.dmesg_restrict without root) is said so, with the reason.
"""

from __future__ import annotations

import errno
import os
import re
from pathlib import Path

from clockfabric.telemetry.nvidia_gpu import THROTTLE_REASONS, _text

_MISSING = object()
KMSG = Path("/dev/kmsg")
MAX_LOG_BYTES = 64 << 20  # the ring buffer is a few MiB at most; a log still growing stops here


def read(nvml=None, kmsg: Path | None = None) -> dict:
    """kmsg: the kernel log holding this host's XID history. Default: /dev/kmsg with the real NVML;
    none with a stand-in (a test's fake GPUs have nothing to do with this machine's log)."""
    if kmsg is None and nvml is None:
        kmsg = KMSG
    if nvml is None:
        try:
            import pynvml
        except ImportError:
            return {"present": False, "reason": "pynvml not installed (pip install nvidia-ml-py)"}
        nvml = pynvml
    nv = nvml
    try:
        nv.nvmlInit()
    except nv.NVMLError as e:  # LibraryNotFound: no driver; DriverNotLoaded; ...
        return {"present": False, "reason": f"nvmlInit: {e}"}
    try:
        try:
            count = nv.nvmlDeviceGetCount()
        except nv.NVMLError as e:
            return {"present": False, "reason": f"nvmlDeviceGetCount: {e}"}
        if not count:
            return {"present": False, "reason": "NVML sees no GPUs"}
        unread: dict = {}
        driver = _call(nv, unread, "driver", "nvmlSystemGetDriverVersion")
        out = {"present": True,
               "driver": _text(driver) if driver is not None else None,
               "cuda_driver": _call(nv, unread, "cuda_driver", "nvmlSystemGetCudaDriverVersion"),
               "count": count,
               "devices": [device(nv, i) for i in range(count)],
               "unread": unread}
        if kmsg is not None:
            out["xid"] = xid_history(kmsg)
        return out
    finally:
        try:
            nv.nvmlShutdown()
        except nv.NVMLError:
            pass


def _call(nv, unread: dict, field: str, fn: str, *args, default=None):
    """nv.<fn>(*args); on an NVML error (or a pynvml too old to have fn) record why in unread, return default."""
    try:
        return getattr(nv, fn)(*args)
    except (nv.NVMLError, AttributeError) as e:
        unread[field] = str(e) or type(e).__name__
        return default


def device(nv, index: int) -> dict:
    try:
        h = nv.nvmlDeviceGetHandleByIndex(index)
    except nv.NVMLError as e:
        return {"index": index, "error": f"nvmlDeviceGetHandleByIndex: {e}"}
    unread: dict = {}

    def get(field, fn, *args):
        return _call(nv, unread, field, fn, h, *args)

    enabled = nv.NVML_FEATURE_ENABLED
    name, uuid = get("name", "nvmlDeviceGetName"), get("uuid", "nvmlDeviceGetUUID")
    serial = get("serial", "nvmlDeviceGetSerial")
    pci = get("pci_bus_id", "nvmlDeviceGetPciInfo")
    persistence = get("persistence_mode", "nvmlDeviceGetPersistenceMode")
    ecc_mode = get("ecc_mode_current", "nvmlDeviceGetEccMode")
    ecc = {f"ecc_{kind}_{counter}": get(f"ecc_{kind}_{counter}", "nvmlDeviceGetTotalEccErrors",
                                        getattr(nv, f"NVML_MEMORY_ERROR_TYPE_{kind.upper()}"),
                                        getattr(nv, f"NVML_{counter.upper()}_ECC"))
           for kind in ("uncorrected", "corrected") for counter in ("volatile", "aggregate")}
    power = get("power_w", "nvmlDeviceGetPowerUsage")
    return {
        "index": index,
        "name": _text(name) if name is not None else None,
        "uuid": _text(uuid) if uuid is not None else None,
        "pci_bus_id": bus_id(_text(pci.busId)) if pci is not None else None,
        "serial": _text(serial) if serial else None,  # '' or NotSupported on boards without one
        "persistence_mode": None if persistence is None else persistence == enabled,
        "ecc_mode_current": None if ecc_mode is None else ecc_mode[0] == enabled,
        **ecc,
        "retired_pages": _retired_pages(nv, h, unread),
        "remapped_rows": _remapped_rows(get("remapped_rows", "nvmlDeviceGetRemappedRows")),
        "clocks": {"sm_mhz": get("sm_mhz", "nvmlDeviceGetClockInfo", nv.NVML_CLOCK_SM),
                   "max_sm_mhz": get("max_sm_mhz", "nvmlDeviceGetMaxClockInfo", nv.NVML_CLOCK_SM),
                   "mem_mhz": get("mem_mhz", "nvmlDeviceGetClockInfo", nv.NVML_CLOCK_MEM),
                   "max_mem_mhz": get("max_mem_mhz", "nvmlDeviceGetMaxClockInfo", nv.NVML_CLOCK_MEM)},
        "throttle_reasons": _throttle_reasons(nv, h, unread),
        "pcie": {"gen": get("pcie_gen", "nvmlDeviceGetCurrPcieLinkGeneration"),
                 "max_gen": get("pcie_max_gen", "nvmlDeviceGetMaxPcieLinkGeneration"),
                 "width": get("pcie_width", "nvmlDeviceGetCurrPcieLinkWidth"),
                 "max_width": get("pcie_max_width", "nvmlDeviceGetMaxPcieLinkWidth")},
        "temperature_c": get("temperature_c", "nvmlDeviceGetTemperature", nv.NVML_TEMPERATURE_GPU),
        "power_w": power / 1000 if power is not None else None,  # NVML: mW
        "unread": unread,
    }


def bus_id(nvml_id: str) -> str:
    """NVML's '00000000:3B:00.0' -> sysfs's '0000:3b:00.0', so GPUs join the pcie section."""
    domain, _, rest = nvml_id.partition(":")
    try:
        return f"{int(domain, 16):04x}:{rest.lower()}"
    except ValueError:
        return nvml_id


def _retired_pages(nv, h, unread: dict) -> dict | None:
    """Pre-Ampere page retirement; NotSupported (null) on Ampere and later, which remap rows instead."""
    sbe = _call(nv, unread, "retired_pages", "nvmlDeviceGetRetiredPages", h,
                nv.NVML_PAGE_RETIREMENT_CAUSE_MULTIPLE_SINGLE_BIT_ECC_ERRORS)
    if sbe is None:
        return None
    dbe = _call(nv, unread, "retired_pages", "nvmlDeviceGetRetiredPages", h,
                nv.NVML_PAGE_RETIREMENT_CAUSE_DOUBLE_BIT_ECC_ERROR)
    if dbe is None:
        return None
    pending = _call(nv, unread, "retired_pages", "nvmlDeviceGetRetiredPagesPendingStatus", h)
    if pending is None:
        return None
    return {"single_bit": len(sbe), "double_bit": len(dbe), "pending": pending == nv.NVML_FEATURE_ENABLED}


def _remapped_rows(rows) -> dict | None:
    if rows is None:
        return None
    correctable, uncorrectable, pending, failure = rows
    return {"correctable": correctable, "uncorrectable": uncorrectable, "pending": bool(pending),
            "failure": bool(failure)}


def _throttle_reasons(nv, h, unread: dict) -> list[str] | None:
    """Why clocks are held down, by telemetry/nvidia_gpu.py's names; the pre-535 call on old drivers."""
    mask = _call(nv, {}, "throttle_reasons", "nvmlDeviceGetCurrentClocksEventReasons", h, default=_MISSING)
    if mask is _MISSING:
        mask = _call(nv, unread, "throttle_reasons", "nvmlDeviceGetCurrentClocksThrottleReasons", h)
    if mask is None:
        return None
    return [reason for reason, bit in THROTTLE_REASONS.items() if mask & getattr(nv, bit)]


# "NVRM: Xid (PCI:0000:3b:00): 79, pid=1234, name=python3, GPU has fallen off the bus."
# (older drivers write no "PCI:"; the bus id has no function number)
_XID = re.compile(r"NVRM: Xid \((?:PCI:)?(?P<bus>[0-9A-Fa-f]{4}:[0-9A-Fa-f]{2}:[0-9A-Fa-f]{2})(?:\.[0-7])?\): "
                  r"(?P<xid>\d+),\s*(?P<text>.*)")
_KMSG_HEAD = re.compile(r"^\d+,\d+,(?P<us>\d+),[^;]*;")  # /dev/kmsg: priority,sequence,microseconds,flags;
_DMESG_HEAD = re.compile(r"^\[\s*(?P<s>\d+\.\d+)\]")  # dmesg: [  5107.644336]
_WHO = re.compile(r"^(?P<key>pid|name)=(?P<value>[^,]*),\s*")


def xid_history(path: Path = KMSG) -> dict:
    """The XIDs in the kernel log at path, one entry per GPU and XID (a GPU in an XID storm logs
    thousands): {"readable": True, "total": n, "xids": [{pci_bus_id, xid, count, first_uptime_s, last}]},
    or {"readable": False, "reason": ...}."""
    try:
        text = _read_log(path)
    except OSError as e:
        return {"readable": False, "source": str(path), "reason": _unreadable(path, e)}
    events = parse_xids(text)
    seen: dict[tuple[str, int], dict] = {}
    for ev in events:
        entry = seen.setdefault((ev["pci_bus_id"], ev["xid"]), {"pci_bus_id": ev["pci_bus_id"], "xid": ev["xid"],
                                                                "count": 0, "first_uptime_s": ev.get("uptime_s")})
        entry["count"] += 1
        entry["last"] = ev
    return {"readable": True, "source": str(path), "total": len(events), "xids": list(seen.values())}


def _read_log(path: Path) -> str:
    """All of /dev/kmsg's records (one per read) without waiting for new ones; a recorded log (a plain
    file) reads the same way."""
    fd = os.open(path, os.O_RDONLY | os.O_NONBLOCK)
    chunks, size = [], 0
    try:
        while size < MAX_LOG_BYTES:
            try:
                chunk = os.read(fd, 16384)  # more than a record can hold (8 KiB with its dictionary)
            except BlockingIOError:
                break  # caught up with the kernel
            except BrokenPipeError:
                continue  # records overwritten under us: the next read goes on from the oldest left
            if not chunk:
                break
            chunks.append(chunk)
            size += len(chunk)
    finally:
        os.close(fd)
    return b"".join(chunks).decode(errors="replace")


def _unreadable(path: Path, e: OSError) -> str:
    if e.errno in (errno.EPERM, errno.EACCES):
        return (f"{path}: {e.strerror} (with kernel.dmesg_restrict=1 only root or CAP_SYSLOG may read "
                "the kernel log: run the audit's host side as root)")
    if e.errno == errno.ENOENT:
        return f"{path}: no such file (a container without the host's kernel log?)"
    return f"{path}: {e.strerror or e}"


def parse_xids(text: str) -> list[dict]:
    """XID events in kernel-log text, oldest first: /dev/kmsg records, `dmesg` or syslog lines."""
    events = []
    for line in text.splitlines():
        if line.startswith(" "):
            continue  # a kmsg record's KEY=value lines (SUBSYSTEM=pci, ...)
        m = _XID.search(line)
        if not m:
            continue
        event: dict = {"pci_bus_id": m["bus"].lower(), "xid": int(m["xid"])}
        rest = m["text"].strip()
        while who := _WHO.match(rest):  # the process the driver blames, when it names one
            event[who["key"]] = who["value"].strip("'")
            rest = rest[who.end():]
        event["message"] = rest
        if head := _KMSG_HEAD.match(line):
            event["uptime_s"] = int(head["us"]) / 1e6
        elif head := _DMESG_HEAD.match(line):
            event["uptime_s"] = float(head["s"])
        events.append(event)
    return events
