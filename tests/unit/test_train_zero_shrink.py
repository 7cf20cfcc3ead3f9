"""ZeRO-1 on a shrunk group, with gloo on localhost processes: every shard of the old partition
gathered (the lost rank's from its buddy's mirror), and ZeRO made again for the smaller world
holds the same global state, bit for bit."""

import multiprocessing
import os

import pytest

torch = pytest.importorskip("torch")

from tests.unit.test_train_zero import same  # noqa: E402  (after the skip: it needs torch)

WORLD, LOST, STEPS = 3, 1, 3


def member(store0: str, store1: str, rank: int, out) -> None:
    import torch.distributed as dist
    from torch.distributed.optim import ZeroRedundancyOptimizer

    from clockfabric.train import group, state, zero

    os.environ["GLOO_SOCKET_IFNAME"] = "lo"
    torch.manual_seed(0)
    module = torch.nn.Sequential(*[torch.nn.Linear(6, 6) for _ in range(5)])

    def optimizer():
        return ZeroRedundancyOptimizer(module.parameters(), optimizer_class=torch.optim.AdamW, lr=0.01)

    group.form(store0, rank, WORLD, timeout_s=20)
    opt = optimizer()
    buddy = zero.Buddy(opt)
    for step in range(STEPS):
        for i, p in enumerate(module.parameters()):
            p.grad = torch.randn(p.shape, generator=torch.Generator().manual_seed(step * 100 + i))
        buddy.step()
        opt.step()
    opt.consolidate_state_dict(to=0)
    if rank == 0:
        out.put(("before", state.to_bytes(opt.state_dict())))
    dist.barrier()
    if rank == LOST:
        return
    new_rank = [r for r in range(WORLD) if r != LOST].index(rank)
    group.form(store1, new_rank, WORLD - 1, timeout_s=20)
    zero.rebind(opt)
    at, plan = zero.regathered(opt, STEPS, None)
    merged, sent = plan.gather(buddy)
    shrunk = optimizer()
    shrunk.load_state_dict(merged)
    shrunk.consolidate_state_dict(to=0)
    if new_rank == 0:
        out.put(("after", state.to_bytes(shrunk.state_dict())))
    out.put(("plan", (at, plan.rebuilt, plan.member, sent, shrunk.world_size)))
    dist.destroy_process_group()


def test_a_shrunk_zero_holds_every_shard_the_lost_one_from_its_buddy(tmp_path):
    from clockfabric.train import state

    ctx = multiprocessing.get_context("spawn")
    out = ctx.Queue()
    store0, store1 = str(tmp_path / "store.0"), str(tmp_path / "store.1")
    procs = [ctx.Process(target=member, args=(store0, store1, rank, out)) for rank in range(WORLD)]
    for p in procs:
        p.start()
    got = [out.get(timeout=90) for _ in range(4)]
    for p in procs:
        p.join(30)
    before = state.from_bytes(next(v for k, v in got if k == "before"))
    after = state.from_bytes(next(v for k, v in got if k == "after"))
    plans = [v for k, v in got if k == "plan"]
    assert all(p[:3] == (STEPS, [LOST], {0: 0, 2: 1}) for p in plans)  # rank 1's shard from rank 2's mirror
    assert all(p[3] > 0 and p[4] == WORLD - 1 for p in plans)
    assert len(before["state"]) == 10  # every parameter's state: 5 layers' weights and biases
    assert same(after["state"], before["state"]) and after["param_groups"] == before["param_groups"]
