"""The wrapped DDP's forward: a lost peer there marks the step failed; the script's own error still raises."""

from types import SimpleNamespace

import pytest

torch = pytest.importorskip("torch")

from torch.nn.parallel import DistributedDataParallel  # noqa: E402

from clockfabric.train import group  # noqa: E402
from clockfabric.train.ddp import Guarded  # noqa: E402


@pytest.fixture
def model(tmp_path, monkeypatch):
    import torch.distributed as dist

    monkeypatch.setenv("GLOO_SOCKET_IFNAME", "lo")
    group.form(dist.FileStore(str(tmp_path / "store"), 1), 0, 1)
    module = torch.nn.Linear(4, 2)
    m = Guarded(module)
    m.job = SimpleNamespace(failed=False)
    yield m
    dist.destroy_process_group()


def test_a_collective_failing_in_forward_marks_the_step_failed(model, monkeypatch):
    x = torch.ones(3, 4)
    assert model(x).shape == (3, 2) and not model.job.failed

    def lost(self, *a, **k):
        raise RuntimeError("Connection closed by peer")

    monkeypatch.setattr(DistributedDataParallel, "forward", lost)
    out = model(x)
    assert model.job.failed and torch.equal(out, model.module(x))  # the module's output, for a step undone


def test_the_scripts_own_error_in_forward_still_raises(model):
    with pytest.raises(RuntimeError, match="mat1 and mat2"):
        model(torch.ones(3, 5))  # a shape the module cannot take
    assert not model.job.failed
