"""ZeRO-1 buddy copies with gloo on localhost processes: each rank holds its predecessor's
optimizer shard, a failed step's copy is never held, and a replacement gets its shard back."""

import multiprocessing
import os
import threading

import pytest

torch = pytest.importorskip("torch")

from clockfabric.train import state  # noqa: E402  (after the skip: it imports torch)

WORLD = 3


def member(store0: str, store1: str, rank: int, role: str, out) -> None:
    import torch.distributed as dist
    from torch.distributed.optim import ZeroRedundancyOptimizer

    from clockfabric.train import group, state, zero

    os.environ["GLOO_SOCKET_IFNAME"] = "lo"
    torch.manual_seed(0)
    module = torch.nn.Sequential(torch.nn.Linear(8, 8), torch.nn.Linear(8, 8), torch.nn.Linear(8, 2))
    buddy = zero.Buddy()
    counts = [2, 2, -1]
    if role != "replacement":
        group.form(store0, rank, WORLD, timeout_s=20)
        opt = ZeroRedundancyOptimizer(module.parameters(), optimizer_class=torch.optim.SGD, lr=0.1, momentum=0.9)
        for step in range(3):
            for p in module.parameters():
                p.grad = torch.full_like(p, float(step + 1))
            buddy.settle()  # the previous step's copies, in flight during this step's forward and backward
            opt.step()
            buddy.post(opt, step + 1)
            assert threading.active_count() == 1  # gloo's threads carry the copies, no Python thread
            if step < 2:
                buddy.commit()
            else:  # the third step failed somewhere: its copies are dropped, the shard put back
                buddy.close()
        mine = state.to_bytes(opt.optim.state_dict())
        assert buddy.held is not None and buddy.held.completed == 2
        out.put(("shard", rank, mine, state.to_bytes(buddy.held.state_dict())))
        if role == "lost":
            out.close()
            out.join_thread()  # the shard is sent before the process goes
            os._exit(0)
    group.form(store1, rank, WORLD, timeout_s=20)
    if role == "replacement":
        opt = ZeroRedundancyOptimizer(module.parameters(), optimizer_class=torch.optim.SGD, lr=0.1, momentum=0.9)
    zero.rebind(opt)
    buddy.hand_over(counts, 2, opt)
    out.put(("after", rank, state.to_bytes(opt.optim.state_dict()), None))
    dist.destroy_process_group()


def test_the_replacement_gets_its_shard_from_its_buddy(tmp_path):
    ctx = multiprocessing.get_context("spawn")
    out = ctx.Queue()
    store0, store1 = str(tmp_path / "store.0"), str(tmp_path / "store.1")
    roles = [(0, "survivor"), (1, "survivor"), (2, "lost"), (2, "replacement")]
    procs = [ctx.Process(target=member, args=(store0, store1, rank, role, out)) for rank, role in roles]
    for p in procs:
        p.start()
    got = [out.get(timeout=90) for _ in range(6)]
    for p in procs:
        p.join(30)
    shards = {r: (mine, held) for kind, r, mine, held in got if kind == "shard"}
    after = {r: mine for kind, r, mine, _ in got if kind == "after"}
    # each held copy is the predecessor's shard as of the last committed step (the second), not the third's
    assert all(shards[r][1] is not None and shards[r][1] != shards[(r - 1) % WORLD][0] for r in range(WORLD))
    held = {r: state.from_bytes(shards[r][1]) for r in range(WORLD)}
    for r in range(WORLD):
        momentum = [s["momentum_buffer"] for s in held[(r + 1) % WORLD]["state"].values()]
        assert momentum and all(torch.equal(m, torch.full_like(m, 1 * 0.9 + 2)) for m in momentum)
    assert after[0] == shards[0][0] and after[1] == shards[1][0]  # the survivors keep their own
    assert after[2] == shards[0][1]  # rank 2's shard as rank 0, its buddy, held it


def test_a_rank_lost_with_its_buddy_stops_with_shard_lost_which_no_join_retries():
    from clockfabric.train import zero

    held = [{4, 5}] * WORLD
    with pytest.raises(zero.ShardLost, match="rank 1 and its buddy rank 2 were both lost"):
        zero.resume_at([5, -1, -1], [4, -9, -9], held)  # two lost at once: with 3 ranks, always neighbours
    with pytest.raises(zero.ShardLost, match="every rank was lost"):
        zero.resume_at([-1, -1, -1], [-9] * WORLD, held)
    assert not issubclass(zero.ShardLost, RuntimeError)  # the runtime's join goes on after a RuntimeError


def test_the_members_go_on_from_the_step_the_lost_shards_copies_allow():
    from clockfabric.train import zero

    # rank 1 lost; rank 2 holds its shard as of 4 and 5 steps: everyone goes on from 5
    assert zero.resume_at([5, -1, 5], [4, -9, 4], [set(), set(), {4, 5}]) == 5
    # rank 1's copy of step 5 was still in flight when it was lost: the survivors redo step 4
    assert zero.resume_at([5, -1, 5], [4, -9, 4], [set(), set(), {3, 4}]) == 4
    # survivors a step apart: the one ahead goes back to its snapshot (a shard is never brought forward)
    assert zero.resume_at([5, -1, 4], [4, -9, 3], [set(), set(), {4, 5}]) == 4
    assert zero.resume_at([5, 5, 4], [4, 4, 3], [set(), set(), set()]) == 4  # nobody lost
    with pytest.raises(zero.ShardLost, match="no step every member holds"):
        zero.resume_at([5, -1, 5], [-9, -9, 4], [set(), set(), {3, 4}])  # rank 0 has no snapshot from step 4
    with pytest.raises(zero.ShardLost, match="no step every member holds"):
        zero.resume_at([5, -1, 5], [4, -9, 4], [set(), set(), {2, 3}])
