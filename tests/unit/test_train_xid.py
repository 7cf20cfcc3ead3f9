"""The GPU collector's XID hook that a job's coordinator polls: each XID taken once, per GPU."""

from clockfabric.telemetry.nvidia_gpu import NvidiaGpuCollector
from tests.fakes.fake_nvml import FakeGpu, FakeNvml


def test_new_xids_are_taken_once_whether_or_not_collect_drained_them_first():
    nvml = FakeNvml([FakeGpu(), FakeGpu(uuid="GPU-2")])
    c = NvidiaGpuCollector(nvml)
    assert c.new_xids() == []
    nvml.xid(1, 79)
    assert c.new_xids() == [(1, 79)]
    assert c.new_xids() == []
    nvml.xid(0, 48)
    nvml.xid(1, 94)
    c.collect()  # the exporter's scrape drains the event set too
    assert c.new_xids() == [(0, 48), (1, 94)]


def test_no_gpu_means_no_xids():
    assert NvidiaGpuCollector(FakeNvml([])).new_xids() == []
