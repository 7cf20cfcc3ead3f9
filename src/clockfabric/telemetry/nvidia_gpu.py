"""NVIDIA GPUs through NVML (`pynvml`, from the nvidia-ml-py package), named as dcgm-exporter names them.

Labels are dcgm-exporter's too, so a series here joins one of dcgm-exporter's on the same GPU:
`gpu` (NVML index), `UUID`, `device` ("nvidia0"), `modelName`, `Hostname`. Every one is bounded:
a host's GPUs, never a process or a port.

Each field is one NVML call, read on its own: a field the GPU or driver lacks
(NotSupported, FunctionNotFound) is dropped for good after the first try; any other NVML error
drops it for this read only and counts it in clockfabric_gpu_read_errors_total, so one flaky
sensor or a lost GPU hides nothing else. XIDs come from NVML's event API, drained without
waiting on each collect.

dcgm-exporter types its ECC and PCIe replay fields as counters, but their names lack the
lowercase `_total` that a counter here must end in (prometheus_client would append one): they
are gauges here so the names stay the ones dashboards query.

`python -m clockfabric.telemetry.nvidia_gpu` prints one line per metric, to try it by hand.
"""

from __future__ import annotations

import logging
import socket
import sys
from collections import Counter, deque
from collections.abc import Callable
from dataclasses import dataclass

from clockfabric.telemetry.base import COLLECTORS, Collector, CollectorContext, Metric

log = logging.getLogger(__name__)

MIB = 1024 * 1024
# label value -> pynvml constant (bit) of nvmlDeviceGetCurrentClocksEventReasons
THROTTLE_REASONS = {
    "gpu_idle": "nvmlClocksThrottleReasonGpuIdle",
    "applications_clocks_setting": "nvmlClocksThrottleReasonApplicationsClocksSetting",
    "sw_power_cap": "nvmlClocksThrottleReasonSwPowerCap",
    "hw_slowdown": "nvmlClocksThrottleReasonHwSlowdown",
    "sync_boost": "nvmlClocksThrottleReasonSyncBoost",
    "sw_thermal_slowdown": "nvmlClocksThrottleReasonSwThermalSlowdown",
    "hw_thermal_slowdown": "nvmlClocksThrottleReasonHwThermalSlowdown",
    "hw_power_brake_slowdown": "nvmlClocksThrottleReasonHwPowerBrakeSlowdown",
    "display_clock_setting": "nvmlClocksThrottleReasonDisplayClockSetting",
}

Read = Callable[[object, object, dict], list[Metric]]  # (nvml, handle, labels) -> metrics


def _temperature(nv, h, labels):
    return [Metric("DCGM_FI_DEV_GPU_TEMP", nv.nvmlDeviceGetTemperature(h, nv.NVML_TEMPERATURE_GPU), labels,
                   help="GPU temperature (in C).")]


def _power(nv, h, labels):
    return [Metric("DCGM_FI_DEV_POWER_USAGE", nv.nvmlDeviceGetPowerUsage(h) / 1000, labels,  # NVML: mW
                   help="Power draw (in W).")]


def _ecc(metric: str, error: str, counter: str, what: str) -> Read:
    def read(nv, h, labels):
        n = nv.nvmlDeviceGetTotalEccErrors(h, getattr(nv, error), getattr(nv, counter))
        return [Metric(metric, n, labels, help=f"Total number of {what} ECC errors.")]
    return read


def _pcie_replay(nv, h, labels):
    return [Metric("DCGM_FI_DEV_PCIE_REPLAY_COUNTER", nv.nvmlDeviceGetPcieReplayCounter(h), labels,
                   help="Total number of PCIe retries.")]


def _utilization(nv, h, labels):
    u = nv.nvmlDeviceGetUtilizationRates(h)
    return [Metric("DCGM_FI_DEV_GPU_UTIL", u.gpu, labels, help="GPU utilization (in %)."),
            Metric("DCGM_FI_DEV_MEM_COPY_UTIL", u.memory, labels, help="Memory utilization (in %).")]


def _memory(nv, h, labels):
    m = nv.nvmlDeviceGetMemoryInfo(h)
    return [Metric("DCGM_FI_DEV_FB_USED", m.used / MIB, labels, help="Framebuffer memory used (in MiB)."),
            Metric("DCGM_FI_DEV_FB_FREE", m.free / MIB, labels, help="Framebuffer memory free (in MiB).")]


def _throttle(nv, h, labels):
    try:
        mask = nv.nvmlDeviceGetCurrentClocksEventReasons(h)
    except (AttributeError, nv.NVMLError_FunctionNotFound):  # pynvml or driver from before the 535 rename
        mask = nv.nvmlDeviceGetCurrentClocksThrottleReasons(h)
    return [Metric("DCGM_FI_DEV_CLOCK_THROTTLE_REASONS", mask, labels,
                   help="Why clocks are below their maximum, as NVML's bitmask (0: not held back).")] + [
        Metric("clockfabric_gpu_throttle_reason", float(bool(mask & getattr(nv, bit))), {**labels, "reason": reason},
               help="1 while this reason holds the GPU's clocks down")
        for reason, bit in THROTTLE_REASONS.items()]


FIELDS: dict[str, Read] = {
    "temperature": _temperature,
    "power": _power,
    "ecc_sbe_volatile": _ecc("DCGM_FI_DEV_ECC_SBE_VOL_TOTAL", "NVML_MEMORY_ERROR_TYPE_CORRECTED",
                             "NVML_VOLATILE_ECC", "single-bit volatile"),
    "ecc_dbe_volatile": _ecc("DCGM_FI_DEV_ECC_DBE_VOL_TOTAL", "NVML_MEMORY_ERROR_TYPE_UNCORRECTED",
                             "NVML_VOLATILE_ECC", "double-bit volatile"),
    "ecc_sbe_aggregate": _ecc("DCGM_FI_DEV_ECC_SBE_AGG_TOTAL", "NVML_MEMORY_ERROR_TYPE_CORRECTED",
                              "NVML_AGGREGATE_ECC", "single-bit persistent"),
    "ecc_dbe_aggregate": _ecc("DCGM_FI_DEV_ECC_DBE_AGG_TOTAL", "NVML_MEMORY_ERROR_TYPE_UNCORRECTED",
                              "NVML_AGGREGATE_ECC", "double-bit persistent"),
    "pcie_replay": _pcie_replay,
    "utilization": _utilization,
    "memory": _memory,
    "throttle": _throttle,
}


def _text(value: str | bytes) -> str:
    return value.decode() if isinstance(value, bytes) else value  # pynvml returns bytes for some strings


def dcgm_labels(index: int, uuid: str, model: str) -> dict[str, str]:
    """A GPU's labels as dcgm-exporter writes them (its Hostname is the node's host name too)."""
    return {"gpu": str(index), "UUID": uuid, "device": f"nvidia{index}", "modelName": model,
            "Hostname": socket.gethostname()}


@dataclass
class _Gpu:
    index: int
    handle: object
    labels: dict[str, str]
    xid_events: bool = False  # registered for XID events
    last_xid: int = 0
    xids: int = 0


class NvidiaGpuCollector(Collector):
    name = "nvidia_gpu"

    def __init__(self, nvml=None):
        self.nvml = nvml  # a stand-in with pynvml's names, or None for pynvml itself
        self._why: str | None = None
        self._gpus: list[_Gpu] = []  # empty until started: _start never keeps an empty list
        self._events = None
        self._unsupported: set[tuple[int, str]] = set()
        self._errors: Counter[tuple[int, str]] = Counter()
        self._unread: deque[tuple[int, int]] = deque(maxlen=256)  # (GPU index, XID) not yet taken by new_xids

    def absent(self) -> str | None:
        if not self._gpus and self._why is None:
            self._why = self._start()
        return self._why

    def _start(self) -> str | None:
        if self.nvml is None:
            try:
                import pynvml
            except ImportError:
                return "pynvml not installed (pip install nvidia-ml-py)"
            self.nvml = pynvml
        nv = self.nvml
        try:
            nv.nvmlInit()
        except nv.NVMLError as e:  # LibraryNotFound: no driver installed; DriverNotLoaded; ...
            return f"nvmlInit: {e}"
        try:
            count = nv.nvmlDeviceGetCount()
        except nv.NVMLError as e:
            nv.nvmlShutdown()
            return f"nvmlDeviceGetCount: {e}"
        gpus = []
        for i in range(count):
            try:
                h = nv.nvmlDeviceGetHandleByIndex(i)
                labels = dcgm_labels(i, _text(nv.nvmlDeviceGetUUID(h)), _text(nv.nvmlDeviceGetName(h)))
            except nv.NVMLError as e:  # e.g. a GPU that fell off the bus, or one we may not see
                log.warning("NVIDIA GPU %d skipped: %s", i, e)
                continue
            gpus.append(_Gpu(i, h, labels))
        if not gpus:
            nv.nvmlShutdown()
            return "NVML sees no GPUs"
        self._gpus = gpus
        self._watch_xids()
        return None

    def _watch_xids(self) -> None:
        nv = self.nvml
        try:
            self._events = nv.nvmlEventSetCreate()
        except nv.NVMLError as e:
            log.warning("no NVML event set, so no XIDs: %s", e)
            return
        for g in self._gpus:
            try:
                nv.nvmlDeviceRegisterEvents(g.handle, nv.nvmlEventTypeXidCriticalError, self._events)
                g.xid_events = True
            except nv.NVMLError as e:  # NotSupported on some boards and in some containers
                log.info("GPU %d: no XID events: %s", g.index, e)

    def _drain_xids(self) -> None:
        nv = self.nvml
        by_index = {g.index: g for g in self._gpus}
        while True:
            try:
                event = nv.nvmlEventSetWait(self._events, 0)
            except nv.NVMLError_Timeout:  # nothing (more) waiting
                return
            except nv.NVMLError as e:
                log.warning("reading NVML events: %s", e)
                return
            try:
                g = by_index.get(nv.nvmlDeviceGetIndex(event.device))
            except nv.NVMLError:
                g = None
            if g is not None and event.eventType & nv.nvmlEventTypeXidCriticalError:
                g.last_xid, g.xids = int(event.eventData), g.xids + 1
                self._unread.append((g.index, g.last_xid))

    def new_xids(self) -> list[tuple[int, int]]:
        """(GPU index, XID) for each XID reported since the last call: what a job's coordinator
        watches to move a rank off a failing GPU before it crashes."""
        if self.absent() is None and self._events is not None:
            self._drain_xids()
        taken = list(self._unread)
        self._unread.clear()
        return taken

    def collect(self) -> list[Metric]:
        if why := self.absent():
            raise RuntimeError(f"not present: {why}")
        nv = self.nvml
        if self._events is not None:
            self._drain_xids()
        out = []
        for g in self._gpus:
            for field, read in FIELDS.items():
                if (g.index, field) in self._unsupported:
                    continue
                try:
                    out += read(nv, g.handle, g.labels)
                except (nv.NVMLError_NotSupported, nv.NVMLError_FunctionNotFound):
                    self._unsupported.add((g.index, field))
                except nv.NVMLError as e:
                    log.debug("GPU %d %s: %s", g.index, field, e)
                    self._errors[g.index, field] += 1
            if g.xid_events:
                out += [Metric("DCGM_FI_DEV_XID_ERRORS", g.last_xid, g.labels,
                               help="Value of the last XID error encountered."),
                        Metric("clockfabric_gpu_xid_errors_total", g.xids, g.labels, "counter",
                               "XID errors NVML reported since the collector started")]
        out += [Metric("clockfabric_gpu_read_errors_total", n, {"gpu": str(i), "field": field}, "counter",
                       "NVML reads that failed, other than for an unsupported field")
                for (i, field), n in sorted(self._errors.items())]
        return out


@COLLECTORS.register("nvidia_gpu", help="NVIDIA GPUs by NVML, as DCGM names them; XID events")
def nvidia_gpu_collector(ctx: CollectorContext) -> NvidiaGpuCollector:
    return NvidiaGpuCollector()


def main(c: NvidiaGpuCollector | None = None) -> int:
    c = c or NvidiaGpuCollector()
    if why := c.absent():
        print(f"nvidia_gpu: not present: {why}")
        return 1
    for m in c.collect():
        labels = ",".join(f'{k}="{v}"' for k, v in m.labels.items())
        print(f"{m.name}{{{labels}}} {m.value:g}")
    return 0


if __name__ == "__main__":
    sys.exit(main())
