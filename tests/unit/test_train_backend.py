"""The NCCL path, run against a fake process group and a fake torch.cuda (no GPU here): the
backend follows the device, NCCL's error handling is set before its group is made, the bound
becomes the group's timeout, a failed NCCL all-reduce raises in the hook, and a group is
aborted before it is destroyed."""

import datetime
import importlib
import os
from types import SimpleNamespace

import pytest

torch = pytest.importorskip("torch")

import torch.distributed as dist  # noqa: E402

from clockfabric.train import backend, ddp, group  # noqa: E402
from clockfabric.train.bound import FACTOR, WARMUP, StepBound  # noqa: E402

elastic = importlib.import_module("clockfabric.train.elastic")  # the package exports a function of that name
NCCL_KEYS = ("TORCH_NCCL_BLOCKING_WAIT", "TORCH_NCCL_ASYNC_ERROR_HANDLING")


@pytest.fixture
def calls(monkeypatch):
    """Every fake collective's call, in order; the NCCL variables restored afterwards."""
    for key in NCCL_KEYS:
        monkeypatch.delenv(key, raising=False)
    monkeypatch.setattr(group, "_backend", backend.GLOO)
    return []


def module_on(device_type: str):
    params = [SimpleNamespace(device=torch.device(device_type, 0) if device_type == "cuda" else torch.device("cpu"))]
    return SimpleNamespace(parameters=lambda: iter(params))


def test_cuda_parameters_choose_nccl_cpu_or_none_choose_gloo():
    assert backend.for_module(module_on("cuda")) == "nccl"
    assert backend.for_module(torch.nn.Linear(2, 2)) == "gloo"
    assert backend.for_module(torch.nn.ReLU()) == "gloo"  # no parameters


def test_nccl_sends_from_the_current_cuda_device(monkeypatch):
    monkeypatch.setattr(torch.cuda, "current_device", lambda: 3)
    assert backend.device("nccl") == torch.device("cuda", 3)
    assert backend.device("gloo") == torch.device("cpu")


class Store:
    def __init__(self):
        self.values = {}

    def set_timeout(self, _):
        pass

    def add(self, key, n):
        self.values[key] = self.values.get(key, 0) + n
        return self.values[key]

    def set(self, key, value):
        self.values[key] = value

    def wait(self, keys):
        assert all(k in self.values for k in keys)


def fake_group(monkeypatch, calls, name):
    """A fake default group of backend `name`: init, timeout, abort and destroy recorded."""
    initialized = {"on": False}
    pg = SimpleNamespace(abort=lambda: calls.append(("abort",)))

    def init(backend_name, **kwargs):
        env = {k: os.environ.get(k) for k in NCCL_KEYS}  # as the group's constructor reads them
        calls.append(("init", backend_name, kwargs, env))
        initialized["on"] = True

    def destroy():
        calls.append(("destroy",))
        initialized["on"] = False

    monkeypatch.setattr(dist, "init_process_group", init)
    monkeypatch.setattr(dist, "destroy_process_group", destroy)
    monkeypatch.setattr(dist, "is_initialized", lambda: initialized["on"])
    monkeypatch.setattr(dist, "get_backend", lambda _pg=None: name)
    monkeypatch.setattr(dist.distributed_c10d, "_get_default_group", lambda: pg)
    monkeypatch.setattr(dist.distributed_c10d, "_set_pg_timeout", lambda t, group=None: calls.append(("timeout", t)))
    monkeypatch.setattr(torch.cuda, "current_device", lambda: 0)
    return initialized


def test_nccl_group_is_made_with_blocking_wait_on_the_device(monkeypatch, calls):
    fake_group(monkeypatch, calls, "nccl")
    group.form(Store(), 0, 1, timeout_s=5, backend="nccl")
    (_, name, kwargs, env), timeout = calls
    assert name == "nccl" and group.current() == "nccl"
    # set before the group exists: ProcessGroupNCCL reads them in its constructor
    assert env == {"TORCH_NCCL_BLOCKING_WAIT": "1", "TORCH_NCCL_ASYNC_ERROR_HANDLING": "0"}
    assert kwargs["device_id"] == torch.device("cuda", 0)
    assert kwargs["timeout"] == datetime.timedelta(seconds=5)  # gloo's connect fifth is not NCCL's
    assert timeout == ("timeout", datetime.timedelta(seconds=5))


def test_gloo_group_is_made_as_before(monkeypatch, calls):
    fake_group(monkeypatch, calls, "gloo")
    group.form(Store(), 0, 1, timeout_s=5)
    (_, name, kwargs, env), _ = calls
    assert name == "gloo" and group.current() == "gloo"
    assert "device_id" not in kwargs and kwargs["timeout"] == datetime.timedelta(seconds=1)
    assert env == {k: None for k in NCCL_KEYS}


@pytest.mark.parametrize("abort_fails", [False, True])
def test_nccl_group_is_aborted_before_it_is_destroyed(monkeypatch, calls, abort_fails):
    initialized = fake_group(monkeypatch, calls, "nccl")
    group.form(Store(), 0, 1, backend="nccl")
    if abort_fails:  # its own blocking wait aborted it already: still destroyed
        def failing():
            calls.append(("abort",))
            raise RuntimeError("already aborted")
        dist.distributed_c10d._get_default_group().abort = failing
    calls.clear()
    group.leave()
    assert calls == [("abort",), ("destroy",)] and not initialized["on"]


def test_reforming_a_nccl_group_aborts_the_old_one_first(monkeypatch, calls):
    fake_group(monkeypatch, calls, "nccl")
    group.form(Store(), 0, 1, backend="nccl")
    group.form(Store(), 0, 1, backend="nccl")
    assert [c[0] for c in calls] == ["init", "timeout", "abort", "destroy", "init", "timeout"]


def test_gloo_group_is_destroyed_without_abort(monkeypatch, calls):
    fake_group(monkeypatch, calls, "gloo")
    group.form(Store(), 0, 1)
    calls.clear()
    group.leave()
    assert calls == [("destroy",)]


class Work:
    """An all-reduce whose future completed when it was queued (as NCCL's does) and whose
    blocking wait raises, as a timed-out or aborted NCCL collective's."""

    def __init__(self, calls):
        self.calls = calls

    def wait(self):
        self.calls.append(("wait",))
        raise RuntimeError("NCCL work timed out in blocking wait")

    def get_future(self):
        fut = torch.futures.Future()
        fut.set_result(None)
        return fut


def bucket_of(grads):
    flat = torch.cat([g.flatten() for g in grads])
    params = [object() for _ in grads]
    return SimpleNamespace(buffer=lambda: flat, gradients=lambda: grads, parameters=lambda: params), params


@pytest.mark.parametrize("name", ["nccl", "gloo"])
def test_failed_nccl_all_reduce_marks_the_step_failed(monkeypatch, calls, name):
    monkeypatch.setattr(group, "_backend", name)
    monkeypatch.setattr(dist, "all_reduce", lambda t, async_op: Work(calls))
    bucket, params = bucket_of([torch.ones(2), torch.ones(3)])
    job = SimpleNamespace(failed=False, world=2, order={p: i for i, p in enumerate(params)})
    ddp.average(job, bucket).wait()
    # NCCL: the blocking wait raised, the step is redone; gloo's future carries its own errors
    assert job.failed is (name == "nccl")
    assert calls == ([("wait",)] if name == "nccl" else [])


def test_step_time_includes_its_cuda_work_and_sets_the_group_timeout(monkeypatch, calls):
    """The bound is sized from steps measured after torch.cuda.synchronize: each step's GPU
    work (2 s on the fake clock) counts, so the timeout is 4 x 2 s, not the 3 s floor."""
    clock = {"now": 100.0}
    gpu_s = 2.0

    def synchronize():
        calls.append(("synchronize",))
        clock["now"] += gpu_s  # the device finishes the step's work
    monkeypatch.setattr(elastic, "time", SimpleNamespace(time=lambda: clock["now"]))
    monkeypatch.setattr(torch.cuda, "synchronize", synchronize)
    monkeypatch.setattr(dist.distributed_c10d, "_set_pg_timeout", lambda t, group=None: calls.append(("timeout", t)))
    monkeypatch.setattr(group, "_backend", "nccl")
    job = object.__new__(elastic.Elastic)
    module = torch.nn.Linear(2, 2)
    job.__dict__.update(module=module, _optimizer=torch.optim.SGD(module.parameters(), lr=0.1), buddy=None,
                        loader=lambda position, rank: position, log=lambda **_: None, bound=StepBound(30.0),
                        checkpoints=None, gen=None, rank=0, step=0, failed=False, fields={}, _lent=None,
                        board_gone="none here")  # no board: _follow looks for no newer generation
    job.bound.joined()
    for _ in job.steps(WARMUP + 1):
        pass
    assert calls.count(("synchronize",)) == WARMUP + 1
    timeouts = [c[1] for c in calls if c[0] == "timeout"]
    assert timeouts == [datetime.timedelta(seconds=FACTOR * gpu_s)]
    assert calls.index(("timeout", timeouts[0])) == calls.index(("synchronize",)) + WARMUP  # after the 3rd step
