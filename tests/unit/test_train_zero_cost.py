"""What the elastic wrapper does per step without allocating: a snapshot copied into the last
unwanted one, and still an undo of the step."""

import pytest

torch = pytest.importorskip("torch")

from clockfabric.train import state  # noqa: E402  (after the skip: it imports torch)


def trained(steps: int = 2):
    torch.manual_seed(0)
    module = torch.nn.Sequential(torch.nn.Linear(6, 5), torch.nn.BatchNorm1d(5), torch.nn.Linear(5, 2))
    opt = torch.optim.SGD(module.parameters(), lr=0.1, momentum=0.9)
    for _ in range(steps):
        step(module, opt)
    return module, opt


def step(module, opt) -> None:
    opt.zero_grad()
    module(torch.randn(4, 6)).square().mean().backward()
    opt.step()


def momentum(opt) -> list[torch.Tensor]:
    return [s["momentum_buffer"] for s in opt.state.values()]


def test_a_snapshot_is_copied_into_the_one_lent_and_still_undoes_the_step():
    module, opt = trained()
    first = state.snapshot(module, opt, 2, 2)
    lent_ptrs = {t.data_ptr() for t in first["module"].values()}
    before = state.digest(module)
    step(module, opt)
    undo = state.snapshot(module, opt, 3, 3, into=first)
    assert {t.data_ptr() for t in undo["module"].values()} == lent_ptrs  # no new tensors
    after = state.digest(module)
    step(module, opt)
    assert state.restore(undo, module, opt) == (3, 3) and state.digest(module) == after != before


def test_a_restored_snapshot_lent_again_leaves_the_live_optimizer_alone():
    module, opt = trained()
    undo = state.snapshot(module, opt, 2, 2)
    state.restore(undo, module, opt)
    kept = [m.clone() for m in momentum(opt)]
    for tensor in undo["optimizer"]["state"][0].values():
        tensor.fill_(7.0)  # what copying the next snapshot into it does
    assert all(torch.equal(m, k) for m, k in zip(momentum(opt), kept, strict=True))


def test_a_snapshot_whose_shapes_changed_gets_new_tensors():
    module, opt = trained(steps=0)  # no momentum yet: the first step makes it
    empty = state.snapshot(module, opt, 0, 0)
    step(module, opt)
    full = state.snapshot(module, opt, 1, 1, into=empty)
    assert all(torch.equal(full["optimizer"]["state"][i]["momentum_buffer"], m) for i, m in enumerate(momentum(opt)))

