"""`clockfabric train run` watching the GPUs itself: a critical XID (fake NVML) names the host
whose rank is to be moved, once; other XIDs and a machine without NVML name none."""

from types import SimpleNamespace

from typer.testing import CliRunner

import clockfabric.telemetry.nvidia_gpu as nvidia_gpu
from clockfabric.cli import train_cmds
from clockfabric.cli.train_cmds import gpu_watch
from tests.fakes.fake_nvml import FakeGpu, FakeNvml

HOSTS = ["h0", "h1", "h2", "h3"]


def test_a_critical_xid_names_its_gpus_host_once():
    nvml = FakeNvml([FakeGpu(uuid=f"GPU-{i}") for i in range(4)])
    fault, watched = gpu_watch(HOSTS, nvml)
    assert fault is not None and "GPUs 0-3" in watched
    assert [fault(h) for h in HOSTS] == [None] * 4
    nvml.xid(1, 79)
    nvml.xid(2, 13)  # a graphics engine exception: the application's, not the GPU's
    assert fault("h0") is None  # the drain for h0 keeps h1's XID for h1
    assert fault("h1") == "XID 79 (GPU has fallen off the bus) on GPU 1"
    assert [fault(h) for h in HOSTS] == [None] * 4


def test_xids_of_gpus_past_the_hosts_are_ignored():
    nvml = FakeNvml([FakeGpu(uuid=f"GPU-{i}") for i in range(3)])
    fault, _ = gpu_watch(["h0", "h1"], nvml)
    assert fault is not None
    nvml.xid(2, 48)
    assert fault("h0") is None and fault("h1") is None


def test_no_gpu_means_no_watch_and_says_why():
    fault, watched = gpu_watch(HOSTS, FakeNvml([]))
    assert fault is None and watched.startswith("GPUs not watched: ")


def test_train_run_hands_the_watch_to_the_coordinator(monkeypatch, tmp_path):
    nvml = FakeNvml([FakeGpu(uuid=f"GPU-{i}") for i in range(4)])
    real = nvidia_gpu.NvidiaGpuCollector
    monkeypatch.setattr(nvidia_gpu, "NvidiaGpuCollector", lambda _=None: real(nvml))
    reach = SimpleNamespace(hosts={}, topology=SimpleNamespace(), audit={}, fleet="lab t", runner=None,
                            serve_on=None, local=True)
    monkeypatch.setattr("clockfabric.cli.train_reach.lab_reach", lambda name: reach)
    given = {}

    class Job:
        def __init__(self, hosts, ranks, spares, argv, folder, **options):
            given.update(ranks=ranks, spares=spares, **options)

        def start(self):
            return self

        def wait(self, timeout_s):
            if given["gpu_fault"]:
                nvml.xid(3, 95)
                given["fault"] = given["gpu_fault"]("h3")
            return True

        def stop(self):
            pass

    monkeypatch.setattr("clockfabric.train.launch.TrainJob", Job)
    script = tmp_path / "train.py"
    script.write_text("")
    result = CliRunner().invoke(train_cmds.app, ["run", "--hosts", ",".join(HOSTS), "--spares", "1",
                                                 "--dir", str(tmp_path / "job"), "--", str(script)])
    assert result.exit_code == 0, result.output
    assert given["ranks"] == HOSTS[:3] and given["spares"] == ["h3"]
    assert given["fault"] == "XID 95 (uncontained ECC error) on GPU 3"
    assert "watching GPUs 0-3" in result.output

    given.clear()
    result = CliRunner().invoke(train_cmds.app, ["run", "--hosts", ",".join(HOSTS), "--spares", "1",
                                                 "--no-watch-gpus", "--dir", str(tmp_path / "job"), "--",
                                                 str(script)])
    assert result.exit_code == 0, result.output
    assert given["gpu_fault"] is None and "--no-watch-gpus" in result.output
