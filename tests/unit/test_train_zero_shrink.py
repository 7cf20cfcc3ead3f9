"""ZeRO-1 on a group of another size, with gloo on localhost processes: a job shrunk from 3
ranks to 2 gathers every shard of the old partition (the lost rank's from its buddy's mirror),
then grows back to 3 with a new member; ZeRO made again each time holds the same global state,
bit for bit."""

import multiprocessing
import os

import pytest

torch = pytest.importorskip("torch")

from tests.unit.test_train_zero import same  # noqa: E402  (after the skip: it needs torch)

WORLD, LOST, STEPS = 3, 1, 3


def member(stores: list[str], rank: int, out) -> None:
    import torch.distributed as dist
    from torch.distributed.optim import ZeroRedundancyOptimizer

    from clockfabric.train import group, state, zero

    os.environ["GLOO_SOCKET_IFNAME"] = "lo"
    torch.manual_seed(0)
    module = torch.nn.Sequential(*[torch.nn.Linear(6, 6) for _ in range(5)])

    def optimizer():
        return ZeroRedundancyOptimizer(module.parameters(), optimizer_class=torch.optim.AdamW, lr=0.01)

    def consolidated(opt, tag):
        opt.consolidate_state_dict(to=0)
        if dist.get_rank() == 0:
            out.put((tag, state.to_bytes(opt.state_dict())))

    def regroup(buddy, completed, tag):
        plan = zero.agree(buddy, completed, None)
        merged, sent = plan.gather(buddy)
        opt = optimizer()
        opt.load_state_dict(merged)
        out.put(("plan", (tag, plan.at, plan.world, plan.rebuilt, plan.member, plan.resharded, sent > 0)))
        consolidated(opt, tag)
        return zero.Buddy(opt)

    if rank < WORLD:  # the first three ranks
        group.form(dist.FileStore(stores[0], WORLD), rank, WORLD, timeout_s=20)
        opt = optimizer()
        buddy = zero.Buddy(opt)
        for step in range(STEPS):
            for i, p in enumerate(module.parameters()):
                p.grad = torch.randn(p.shape, generator=torch.Generator().manual_seed(step * 100 + i))
            buddy.step()
            opt.step()
        consolidated(opt, "before")
        dist.barrier()
        if rank == LOST:
            return
        shrunk_rank = [r for r in range(WORLD) if r != LOST].index(rank)
        group.form(dist.FileStore(stores[1], WORLD - 1), shrunk_rank, WORLD - 1, timeout_s=20)
        zero.rebind(opt)
        buddy = regroup(buddy, STEPS, "shrunk")
        dist.barrier()
        group.form(dist.FileStore(stores[2], WORLD), shrunk_rank, WORLD, timeout_s=20)
        zero.rebind(buddy.zero)
        regroup(buddy, STEPS, "grown")
    else:  # a new member joins the grown group at its last index
        group.form(dist.FileStore(stores[2], WORLD), WORLD - 1, WORLD, timeout_s=60)
        regroup(zero.Buddy(optimizer()), -1, "grown")
    dist.destroy_process_group()


def test_a_zero1_job_shrunk_then_grown_back_keeps_every_shard(tmp_path):
    from clockfabric.train import state

    ctx = multiprocessing.get_context("spawn")
    out = ctx.Queue()
    stores = [str(tmp_path / f"store.{i}") for i in range(3)]
    procs = [ctx.Process(target=member, args=(stores, rank, out)) for rank in range(WORLD + 1)]
    for p in procs:
        p.start()
    got = [out.get(timeout=120) for _ in range(3 + 2 + 3)]
    for p in procs:
        p.join(30)
    states = {k: state.from_bytes(v) for k, v in got if k != "plan"}
    plans = [v for k, v in got if k == "plan"]
    # shrunk: rank 1's shard from rank 2's mirror; grown: every shard from its own rank, the new member's none
    shrunk, grown = ([p[1:] for p in plans if p[0] == tag] for tag in ("shrunk", "grown"))
    assert shrunk == [(STEPS, WORLD, [LOST], {0: 0, 2: 1}, True, True)] * 2
    assert grown == [(STEPS, WORLD - 1, [], {0: 0, 1: 1}, True, True)] * 3
    before = states["before"]
    assert len(before["state"]) == 10  # every parameter's state: 5 layers' weights and biases
    for tag in ("shrunk", "grown"):
        assert same(states[tag]["state"], before["state"]) and states[tag]["param_groups"] == before["param_groups"]
