"""NVIDIA collector against a fake NVML with pynvml's names, constants and errors."""

import socket
import subprocess
import sys

import pynvml
import pytest

from clockfabric.telemetry.base import Collectors
from clockfabric.telemetry.nvidia_gpu import NvidiaGpuCollector, main
from tests.fakes.fake_nvml import FakeGpu, FakeNvml

CORRECTED, UNCORRECTED = pynvml.NVML_MEMORY_ERROR_TYPE_CORRECTED, pynvml.NVML_MEMORY_ERROR_TYPE_UNCORRECTED
VOLATILE, AGGREGATE = pynvml.NVML_VOLATILE_ECC, pynvml.NVML_AGGREGATE_ECC


def two_gpus():
    return FakeNvml([
        FakeGpu(temperature=38, power_mw=71_250, utilization=(0, 0)),
        FakeGpu(uuid="GPU-0f3e9c44-1d2b-4a55-8e0f-7b6c5d4e3a21", temperature=67, power_mw=612_904,
                utilization=(97, 41), memory=(85_520_809_984, 80_000 * 1024 * 1024),
                ecc={(CORRECTED, VOLATILE): 12, (UNCORRECTED, VOLATILE): 0, (CORRECTED, AGGREGATE): 310,
                     (UNCORRECTED, AGGREGATE): 1},
                pcie_replay=4,
                clock_reasons=pynvml.nvmlClocksThrottleReasonSwPowerCap | pynvml.nvmlClocksThrottleReasonHwSlowdown),
    ])


def values(metrics, device):
    """name -> value for one GPU's samples, the per-reason throttle gauges keyed name:reason."""
    out = {}
    for m in metrics:
        if m.labels.get("gpu") == str(device):
            key = f"{m.name}:{m.labels['reason']}" if "reason" in m.labels else m.name
            out[key] = m.value
    return out


def test_absent_without_a_driver():
    """The real pynvml on a machine with no NVIDIA driver: one line, no traceback, nothing after."""
    c = NvidiaGpuCollector()
    why = c.absent()
    if why is None:
        pytest.skip("an NVIDIA GPU is here")
    assert why.startswith(("nvmlInit:", "pynvml not installed"))
    assert Collectors([c]).collect().status["nvidia_gpu"] == f"not present: {why}"


def test_driver_not_loaded():
    nvml = FakeNvml([FakeGpu()], init_error=pynvml.NVML_ERROR_DRIVER_NOT_LOADED)
    report = Collectors([NvidiaGpuCollector(nvml)]).collect()
    assert report.status == {"nvidia_gpu": "not present: nvmlInit: Driver Not Loaded"}
    assert report.metrics == []
    assert nvml.calls == ["nvmlInit"]  # nothing more: absent hardware costs nothing


def test_no_gpus_seen():
    nvml = FakeNvml([])
    assert NvidiaGpuCollector(nvml).absent() == "NVML sees no GPUs"
    assert nvml.calls[-1] == "nvmlShutdown"


def test_two_gpus():
    c = NvidiaGpuCollector(two_gpus())
    assert c.absent() is None
    metrics = c.collect()
    idle, busy = values(metrics, 0), values(metrics, 1)
    assert idle["DCGM_FI_DEV_GPU_TEMP"] == 38
    assert idle["DCGM_FI_DEV_POWER_USAGE"] == pytest.approx(71.25)
    assert idle["DCGM_FI_DEV_ECC_DBE_VOL_TOTAL"] == 0
    assert idle["DCGM_FI_DEV_CLOCK_THROTTLE_REASONS"] == pynvml.nvmlClocksThrottleReasonGpuIdle
    assert idle["clockfabric_gpu_throttle_reason:gpu_idle"] == 1
    assert busy["DCGM_FI_DEV_GPU_TEMP"] == 67
    assert busy["DCGM_FI_DEV_POWER_USAGE"] == pytest.approx(612.904)
    assert busy["DCGM_FI_DEV_ECC_SBE_VOL_TOTAL"] == 12
    assert busy["DCGM_FI_DEV_ECC_SBE_AGG_TOTAL"] == 310
    assert busy["DCGM_FI_DEV_ECC_DBE_AGG_TOTAL"] == 1
    assert busy["DCGM_FI_DEV_PCIE_REPLAY_COUNTER"] == 4
    assert busy["DCGM_FI_DEV_GPU_UTIL"] == 97
    assert busy["DCGM_FI_DEV_MEM_COPY_UTIL"] == 41
    assert busy["DCGM_FI_DEV_FB_USED"] == 80_000
    assert busy["DCGM_FI_DEV_FB_FREE"] == pytest.approx(85_520_809_984 / 2**20 - 80_000)
    assert busy["DCGM_FI_DEV_CLOCK_THROTTLE_REASONS"] == 0x4 | 0x8
    assert busy["clockfabric_gpu_throttle_reason:sw_power_cap"] == 1
    assert busy["clockfabric_gpu_throttle_reason:hw_slowdown"] == 1
    assert busy["clockfabric_gpu_throttle_reason:gpu_idle"] == 0
    assert busy["DCGM_FI_DEV_XID_ERRORS"] == 0
    temp = next(m for m in metrics if m.name == "DCGM_FI_DEV_GPU_TEMP" and m.labels["gpu"] == "1")
    # dcgm-exporter's labels, so these series join its own on the same GPU
    assert temp.labels == {"gpu": "1", "UUID": "GPU-0f3e9c44-1d2b-4a55-8e0f-7b6c5d4e3a21", "device": "nvidia1",
                           "modelName": "NVIDIA H100 80GB HBM3", "Hostname": socket.gethostname()}
    assert not [m for m in metrics if m.name == "clockfabric_gpu_read_errors_total"]


def test_counters_end_in_total():
    for m in NvidiaGpuCollector(two_gpus()).collect():
        assert (m.kind == "counter") == m.name.endswith("_total"), m.name  # as prometheus_client expects


def test_not_supported_field_is_skipped_and_not_asked_again():
    nvml = two_gpus()
    nvml.gpus[1].fail["nvmlDeviceGetPcieReplayCounter"] = pynvml.NVML_ERROR_NOT_SUPPORTED
    nvml.gpus[0].fail["nvmlDeviceGetTotalEccErrors"] = pynvml.NVML_ERROR_NOT_SUPPORTED  # ECC off
    c = NvidiaGpuCollector(nvml)
    metrics = c.collect()
    assert "DCGM_FI_DEV_PCIE_REPLAY_COUNTER" not in values(metrics, 1)
    assert values(metrics, 1)["DCGM_FI_DEV_GPU_TEMP"] == 67
    assert values(metrics, 0)["DCGM_FI_DEV_PCIE_REPLAY_COUNTER"] == 0
    assert not any(k.startswith("DCGM_FI_DEV_ECC") for k in values(metrics, 0))
    assert not [m for m in metrics if m.name == "clockfabric_gpu_read_errors_total"]
    asked = nvml.calls.count("nvmlDeviceGetPcieReplayCounter")
    c.collect()
    assert nvml.calls.count("nvmlDeviceGetPcieReplayCounter") == asked + 1  # GPU 0 only


def test_old_driver_without_clocks_event_reasons():
    nvml = two_gpus()
    nvml.gpus[1].fail["nvmlDeviceGetCurrentClocksEventReasons"] = pynvml.NVML_ERROR_FUNCTION_NOT_FOUND
    assert values(NvidiaGpuCollector(nvml).collect(), 1)["DCGM_FI_DEV_CLOCK_THROTTLE_REASONS"] == 0xC


def test_xid_event_delivered():
    nvml = two_gpus()
    c = NvidiaGpuCollector(nvml)
    c.absent()
    nvml.xid(1, 79)  # GPU has fallen off the bus
    nvml.xid(1, 48)  # double-bit ECC error
    first = c.collect()
    assert values(first, 1)["DCGM_FI_DEV_XID_ERRORS"] == 48
    assert values(first, 1)["clockfabric_gpu_xid_errors_total"] == 2
    assert values(first, 0)["DCGM_FI_DEV_XID_ERRORS"] == 0
    again = c.collect()  # nothing new: the last XID stays, the count too
    assert values(again, 1)["DCGM_FI_DEV_XID_ERRORS"] == 48
    assert values(again, 1)["clockfabric_gpu_xid_errors_total"] == 2


def test_gpu_without_xid_events():
    nvml = two_gpus()
    nvml.gpus[0].fail["nvmlDeviceRegisterEvents"] = pynvml.NVML_ERROR_NOT_SUPPORTED
    metrics = NvidiaGpuCollector(nvml).collect()
    assert "DCGM_FI_DEV_XID_ERRORS" not in values(metrics, 0)
    assert "DCGM_FI_DEV_XID_ERRORS" in values(metrics, 1)


def test_call_raising_mid_collect_costs_only_that_field():
    nvml = two_gpus()
    c = NvidiaGpuCollector(nvml)
    c.collect()
    nvml.gpus[0].fail["nvmlDeviceGetPowerUsage"] = pynvml.NVML_ERROR_GPU_IS_LOST
    nvml.gpus[0].fail["nvmlDeviceGetMemoryInfo"] = pynvml.NVML_ERROR_UNKNOWN
    report = Collectors([c]).collect()
    assert report.status == {"nvidia_gpu": "ok"}
    gpu0 = values(report.metrics, 0)
    assert "DCGM_FI_DEV_POWER_USAGE" not in gpu0 and "DCGM_FI_DEV_FB_USED" not in gpu0
    assert gpu0["DCGM_FI_DEV_GPU_TEMP"] == 38
    assert values(report.metrics, 1)["DCGM_FI_DEV_POWER_USAGE"] == pytest.approx(612.904)
    errors = {m.labels["field"]: m.value for m in report.metrics if m.name == "clockfabric_gpu_read_errors_total"}
    assert errors == {"power": 1, "memory": 1}
    nvml.gpus[0].fail.clear()  # transient: the field comes back on the next read
    assert values(c.collect(), 0)["DCGM_FI_DEV_POWER_USAGE"] == pytest.approx(71.25)


def test_a_bug_is_reported_as_collector_error():
    """Not an NVML error: the collector is marked down, as base.Collectors does for any collector."""
    nvml = two_gpus()
    c = NvidiaGpuCollector(nvml)
    c.absent()
    nvml.gpus[1].memory = None  # unpacking fails inside the collector
    assert Collectors([c]).collect().status["nvidia_gpu"].startswith("error:")


def test_main_prints_one_line_per_metric(capsys):
    assert main(NvidiaGpuCollector(two_gpus())) == 0
    lines = capsys.readouterr().out.splitlines()
    assert 'DCGM_FI_DEV_GPU_TEMP{gpu="1",UUID="GPU-0f3e9c44-1d2b-4a55-8e0f-7b6c5d4e3a21",device="nvidia1",' \
           f'modelName="NVIDIA H100 80GB HBM3",Hostname="{socket.gethostname()}"}} 67' in lines
    assert len(lines) == len(NvidiaGpuCollector(two_gpus()).collect())


def test_main_without_gpu_says_so():
    proc = subprocess.run([sys.executable, "-m", "clockfabric.telemetry.nvidia_gpu"], check=False,
                          capture_output=True, text=True, timeout=60)
    if proc.returncode == 0:
        pytest.skip("an NVIDIA GPU is here")
    assert proc.returncode == 1
    assert proc.stdout.startswith("nvidia_gpu: not present: ")
    assert proc.stderr == ""
