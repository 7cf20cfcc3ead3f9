"""A stand-in for the pynvml module, for machines without an NVIDIA GPU.

Same function names and return shapes as pynvml (nvidia-ml-py); the constants and the
NVMLError classes are pynvml's own, raised the way pynvml raises them (NVMLError(code),
which becomes the subclass for that code), so the collector's error handling is the real one.
Only what the collector and the audit facts call is faked: anything else raises AttributeError,
not a real call.
"""

from __future__ import annotations

from collections import deque
from dataclasses import dataclass, field
from types import SimpleNamespace

import pynvml


@dataclass
class FakeGpu:
    name: str = "NVIDIA H100 80GB HBM3"
    uuid: str = "GPU-5b2a1d0e-8c3f-4f7e-9a61-0c2d9e4b7a10"
    temperature: int = 41
    power_mw: int = 118_540
    ecc: dict = field(default_factory=dict)  # (error type, counter type) -> count; missing: 0
    pcie_replay: int = 0
    utilization: tuple[int, int] = (0, 0)  # gpu %, memory %
    memory: tuple[int, int] = (85_520_809_984, 595_591_168)  # total, used bytes
    clock_reasons: int = pynvml.nvmlClocksThrottleReasonGpuIdle
    # what the audit facts read (clockfabric.audit.facts.gpus)
    serial: str = "1654922012345"
    pci_bus_id: str = "00000000:18:00.0"  # NVML's form: 8-digit domain, upper case
    persistence: int = pynvml.NVML_FEATURE_ENABLED
    ecc_mode: tuple[int, int] = (pynvml.NVML_FEATURE_ENABLED, pynvml.NVML_FEATURE_ENABLED)  # current, pending
    retired_pages: dict = field(default_factory=dict)  # NVML_PAGE_RETIREMENT_CAUSE_* -> pages; missing: none
    retired_pending: int = pynvml.NVML_FEATURE_DISABLED
    remapped_rows: tuple[int, int, int, int] = (0, 0, 0, 0)  # correctable, uncorrectable, pending, failure
    clocks: dict = field(default_factory=lambda: {pynvml.NVML_CLOCK_SM: 1980, pynvml.NVML_CLOCK_MEM: 2619})
    max_clocks: dict = field(default_factory=lambda: {pynvml.NVML_CLOCK_SM: 1980, pynvml.NVML_CLOCK_MEM: 2619})
    pcie_link: tuple[int, int, int, int] = (5, 5, 16, 16)  # gen, max gen, width, max width
    fail: dict[str, int] = field(default_factory=dict)  # pynvml function name -> NVML error code it returns


@dataclass(frozen=True, eq=False)
class FakeHandle:
    """Opaque to the caller, like pynvml's c_nvmlDevice_t."""
    index: int


class FakeNvml:
    def __init__(self, gpus: list[FakeGpu], init_error: int | None = None, driver: str = "550.54.15",
                 cuda_driver: int = 12040, fail: dict[str, int] | None = None):
        self.gpus = gpus
        self.init_error = init_error
        self.driver = driver
        self.cuda_driver = cuda_driver
        self.fail = fail or {}  # system-wide calls (no handle) -> NVML error code
        self.calls: list[str] = []
        self._sets: list[tuple[deque, dict[int, int]]] = []  # per event set: queue, index -> event mask

    def __getattr__(self, name):
        if name.startswith(("NVML", "nvmlClocks", "nvmlEventType")):  # constants and error classes
            return getattr(pynvml, name)
        raise AttributeError(f"FakeNvml has no {name}")

    def _call(self, fn: str, handle: FakeHandle | None = None) -> FakeGpu | None:
        self.calls.append(fn)
        gpu = self.gpus[handle.index] if handle is not None else None
        fail = gpu.fail if gpu is not None else self.fail
        if fn in fail:
            raise pynvml.NVMLError(fail[fn])
        return gpu

    # -- test controls --
    def xid(self, index: int, code: int) -> None:
        """The driver reports XID `code` on GPU `index`: queued to every set registered for it."""
        for queue, masks in self._sets:
            if masks.get(index, 0) & pynvml.nvmlEventTypeXidCriticalError:
                queue.append(SimpleNamespace(device=FakeHandle(index), eventType=pynvml.nvmlEventTypeXidCriticalError,
                                             eventData=code, gpuInstanceId=0xFFFFFFFF, computeInstanceId=0xFFFFFFFF))

    # -- pynvml's API --
    def nvmlInit(self):
        self._call("nvmlInit")
        if self.init_error is not None:
            raise pynvml.NVMLError(self.init_error)

    def nvmlShutdown(self):
        self._call("nvmlShutdown")

    def nvmlDeviceGetCount(self):
        self._call("nvmlDeviceGetCount")
        return len(self.gpus)

    def nvmlDeviceGetHandleByIndex(self, index):
        if not 0 <= index < len(self.gpus):
            raise pynvml.NVMLError(pynvml.NVML_ERROR_INVALID_ARGUMENT)
        self._call("nvmlDeviceGetHandleByIndex", FakeHandle(index))
        return FakeHandle(index)

    def nvmlDeviceGetIndex(self, handle):
        self._call("nvmlDeviceGetIndex", handle)
        return handle.index

    def nvmlDeviceGetUUID(self, handle):
        return self._call("nvmlDeviceGetUUID", handle).uuid.encode()  # bytes: pynvml does not decode this one

    def nvmlDeviceGetName(self, handle):
        return self._call("nvmlDeviceGetName", handle).name

    def nvmlDeviceGetTemperature(self, handle, sensor):
        assert sensor == pynvml.NVML_TEMPERATURE_GPU
        return self._call("nvmlDeviceGetTemperature", handle).temperature

    def nvmlDeviceGetPowerUsage(self, handle):
        return self._call("nvmlDeviceGetPowerUsage", handle).power_mw

    def nvmlDeviceGetTotalEccErrors(self, handle, error_type, counter_type):
        return self._call("nvmlDeviceGetTotalEccErrors", handle).ecc.get((error_type, counter_type), 0)

    def nvmlDeviceGetPcieReplayCounter(self, handle):
        return self._call("nvmlDeviceGetPcieReplayCounter", handle).pcie_replay

    def nvmlDeviceGetUtilizationRates(self, handle):
        gpu = self._call("nvmlDeviceGetUtilizationRates", handle)
        return SimpleNamespace(gpu=gpu.utilization[0], memory=gpu.utilization[1])

    def nvmlDeviceGetMemoryInfo(self, handle, version=None):
        gpu = self._call("nvmlDeviceGetMemoryInfo", handle)
        total, used = gpu.memory
        return SimpleNamespace(total=total, used=used, free=total - used)

    def nvmlDeviceGetCurrentClocksEventReasons(self, handle):
        return self._call("nvmlDeviceGetCurrentClocksEventReasons", handle).clock_reasons

    def nvmlDeviceGetCurrentClocksThrottleReasons(self, handle):
        return self._call("nvmlDeviceGetCurrentClocksThrottleReasons", handle).clock_reasons

    def nvmlEventSetCreate(self):
        self._call("nvmlEventSetCreate")
        self._sets.append((deque(), {}))
        return len(self._sets) - 1

    def nvmlDeviceRegisterEvents(self, handle, event_types, event_set):
        self._call("nvmlDeviceRegisterEvents", handle)
        masks = self._sets[event_set][1]
        masks[handle.index] = masks.get(handle.index, 0) | event_types

    def nvmlEventSetWait(self, event_set, timeoutms):
        self._call("nvmlEventSetWait")
        queue = self._sets[event_set][0]
        if not queue:  # pynvml raises on timeout
            raise pynvml.NVMLError(pynvml.NVML_ERROR_TIMEOUT)
        return queue.popleft()

    # -- what the audit facts read --
    def nvmlSystemGetDriverVersion(self):
        self._call("nvmlSystemGetDriverVersion")
        return self.driver

    def nvmlSystemGetCudaDriverVersion(self):
        self._call("nvmlSystemGetCudaDriverVersion")
        return self.cuda_driver

    def nvmlDeviceGetSerial(self, handle):
        return self._call("nvmlDeviceGetSerial", handle).serial

    def nvmlDeviceGetPciInfo(self, handle):
        gpu = self._call("nvmlDeviceGetPciInfo", handle)
        bus_id = gpu.pci_bus_id.encode()  # c_char arrays in pynvml's struct: bytes
        return SimpleNamespace(busId=bus_id, busIdLegacy=bus_id)

    def nvmlDeviceGetPersistenceMode(self, handle):
        return self._call("nvmlDeviceGetPersistenceMode", handle).persistence

    def nvmlDeviceGetEccMode(self, handle):
        return list(self._call("nvmlDeviceGetEccMode", handle).ecc_mode)

    def nvmlDeviceGetRetiredPages(self, handle, cause):
        n = self._call("nvmlDeviceGetRetiredPages", handle).retired_pages.get(cause, 0)
        return [0x1F3A000 + 0x1000 * i for i in range(n)]  # page addresses

    def nvmlDeviceGetRetiredPagesPendingStatus(self, handle):
        return self._call("nvmlDeviceGetRetiredPagesPendingStatus", handle).retired_pending

    def nvmlDeviceGetRemappedRows(self, handle):
        return tuple(self._call("nvmlDeviceGetRemappedRows", handle).remapped_rows)

    def nvmlDeviceGetClockInfo(self, handle, clock):
        return self._call("nvmlDeviceGetClockInfo", handle).clocks[clock]

    def nvmlDeviceGetMaxClockInfo(self, handle, clock):
        return self._call("nvmlDeviceGetMaxClockInfo", handle).max_clocks[clock]

    def nvmlDeviceGetCurrPcieLinkGeneration(self, handle):
        return self._call("nvmlDeviceGetCurrPcieLinkGeneration", handle).pcie_link[0]

    def nvmlDeviceGetMaxPcieLinkGeneration(self, handle):
        return self._call("nvmlDeviceGetMaxPcieLinkGeneration", handle).pcie_link[1]

    def nvmlDeviceGetCurrPcieLinkWidth(self, handle):
        return self._call("nvmlDeviceGetCurrPcieLinkWidth", handle).pcie_link[2]

    def nvmlDeviceGetMaxPcieLinkWidth(self, handle):
        return self._call("nvmlDeviceGetMaxPcieLinkWidth", handle).pcie_link[3]
