"""AMD collector: absent here (no ROCm), and a small stand-in for the amdsmi module."""

from enum import IntEnum
from types import SimpleNamespace

import pytest

from clockfabric.telemetry.amd_gpu import AmdGpuCollector
from clockfabric.telemetry.base import Collectors


class AmdSmiException(Exception):
    pass


class FakeAmdSmi(SimpleNamespace):
    """amdsmi's names for what the collector reads; an MI300X has no edge sensor."""

    AmdSmiException = AmdSmiException
    AmdSmiTemperatureType = IntEnum("AmdSmiTemperatureType", "EDGE HOTSPOT JUNCTION")
    AmdSmiTemperatureMetric = IntEnum("AmdSmiTemperatureMetric", "CURRENT MAX")

    def __init__(self, gpus=2, init_error=None):
        super().__init__(gpus=gpus, init_error=init_error)

    def amdsmi_init(self):
        if self.init_error:
            raise AmdSmiException(self.init_error)

    def amdsmi_get_processor_handles(self):
        return [f"gpu{i}" for i in range(self.gpus)]

    def amdsmi_get_temp_metric(self, h, sensor, metric):
        if sensor == self.AmdSmiTemperatureType.EDGE:
            raise AmdSmiException("AMDSMI_STATUS_NOT_SUPPORTED")
        return 52 if h == "gpu0" else 71

    def amdsmi_get_power_info(self, h):
        return {"current_socket_power": 312, "average_socket_power": "N/A", "power_limit": 750}

    def amdsmi_get_gpu_total_ecc_count(self, h):
        return {"correctable_count": 3, "uncorrectable_count": 0, "deferred_count": 0}

    def amdsmi_get_gpu_pci_replay_counter(self, h):
        return 7


def test_absent_without_rocm():
    c = AmdGpuCollector()
    why = c.absent()
    if why is None:
        pytest.skip("an AMD GPU is here")
    assert Collectors([c]).collect().status["amd_gpu"] == f"not present: {why}"


def test_init_fails():
    c = AmdGpuCollector(FakeAmdSmi(init_error="AMDSMI_STATUS_DRIVER_NOT_LOADED"))
    assert c.absent() == "amdsmi_init: AMDSMI_STATUS_DRIVER_NOT_LOADED"
    assert AmdGpuCollector(FakeAmdSmi(gpus=0)).absent() == "AMD SMI sees no GPUs"


def test_reads_what_the_gpu_offers():
    metrics = AmdGpuCollector(FakeAmdSmi()).collect()
    got = {(m.name, m.labels["device"], m.labels.get("sensor") or m.labels.get("type")): m.value for m in metrics}
    assert got[("clockfabric_amd_gpu_temperature_celsius", "1", "junction")] == 71
    assert ("clockfabric_amd_gpu_temperature_celsius", "0", "edge") not in got
    assert got[("clockfabric_amd_gpu_power_watts", "0", None)] == 312
    assert got[("clockfabric_amd_gpu_ecc_errors_total", "0", "correctable")] == 3
    assert got[("clockfabric_amd_gpu_ecc_errors_total", "0", "uncorrectable")] == 0
    assert got[("clockfabric_amd_gpu_pcie_replay_total", "1", None)] == 7
