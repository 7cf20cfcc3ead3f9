"""ZeRO-1 mirrors with gloo on localhost processes: each rank's mirror of its predecessor's shard
stays bit-equal to that shard step after step, a step's undo covers it, and a replacement gets
its shard back from its buddy's mirror."""

import multiprocessing
import os

import pytest

torch = pytest.importorskip("torch")

WORLD = 3
STEPS = 4
OPTIMIZERS = {"sgd": ("SGD", {"lr": 0.1, "momentum": 0.9}),
              "adamw": ("AdamW", {"lr": 0.01, "weight_decay": 0.1})}


def same(a, b) -> bool:
    """Equal state dicts, every tensor bit for bit with its dtype."""
    if isinstance(a, torch.Tensor):
        return isinstance(b, torch.Tensor) and a.dtype == b.dtype and torch.equal(a, b)
    if isinstance(a, dict):
        return isinstance(b, dict) and a.keys() == b.keys() and all(same(a[k], b[k]) for k in a)
    if isinstance(a, list | tuple):
        return type(a) is type(b) and len(a) == len(b) and all(same(x, y) for x, y in zip(a, b, strict=True))
    return a == b


def member(store0: str, store1: str, rank: int, role: str, kind: str, out) -> None:
    import torch.distributed as dist
    from torch.distributed.optim import ZeroRedundancyOptimizer

    from clockfabric.train import group, state, zero

    os.environ["GLOO_SOCKET_IFNAME"] = "lo"
    torch.manual_seed(0)
    module = torch.nn.Sequential(torch.nn.Linear(8, 8), torch.nn.Linear(8, 8), torch.nn.Linear(8, 2))
    name, options = OPTIMIZERS[kind]

    def optimizer():
        return ZeroRedundancyOptimizer(module.parameters(), optimizer_class=getattr(torch.optim, name), **options)

    if role != "replacement":
        group.form(dist.FileStore(store0, WORLD), rank, WORLD, timeout_s=20)
        opt = optimizer()
        buddy = zero.Buddy(opt)
        for step in range(STEPS + 1):
            if step == 2:  # a schedule changes the learning rate: the mirror follows it
                for g in opt.param_groups:
                    g["lr"] /= 2
            if step == STEPS:  # a step undone: its snapshot puts back both shards
                undo = state.snapshot(module, buddy, step, step)
            for i, p in enumerate(module.parameters()):  # the averaged gradients, alike on every rank
                p.grad = torch.randn(p.shape, generator=torch.Generator().manual_seed(step * 100 + i))
            buddy.step()  # before ZeRO's step changes the parameters
            opt.step()
        state.restore(undo, module, buddy)
        assert buddy.cost_s > 0 and buddy.bytes > 0
        out.put(("shard", rank, state.to_bytes(buddy.state_dict())))
        if role == "lost":
            out.close()
            out.join_thread()  # the shard is sent before the process goes
            os._exit(0)
    group.form(dist.FileStore(store1, WORLD), rank, WORLD, timeout_s=20)
    if role == "replacement":
        opt = optimizer()
        buddy = zero.Buddy(opt)
    zero.rebind(opt)
    buddy.hand_over([2])
    buddy.exchange()
    out.put(("after", rank, state.to_bytes(buddy.state_dict())))
    dist.destroy_process_group()


@pytest.mark.parametrize("kind", sorted(OPTIMIZERS))
def test_each_mirror_stays_bit_equal_and_a_replacement_gets_its_shard_from_it(tmp_path, kind):
    from clockfabric.train import state

    ctx = multiprocessing.get_context("spawn")
    out = ctx.Queue()
    store0, store1 = str(tmp_path / "store.0"), str(tmp_path / "store.1")
    roles = [(0, "survivor"), (1, "survivor"), (2, "lost"), (2, "replacement")]
    procs = [ctx.Process(target=member, args=(store0, store1, rank, role, kind, out)) for rank, role in roles]
    for p in procs:
        p.start()
    got = [out.get(timeout=90) for _ in range(6)]
    for p in procs:
        p.join(30)
    shards = {r: state.from_bytes(blob) for what, r, blob in got if what == "shard"}
    after = {r: state.from_bytes(blob) for what, r, blob in got if what == "after"}
    for r in range(WORLD):  # each mirror equals its predecessor's shard, undone step and all
        own, mirrored = shards[(r - 1) % WORLD]["own"], shards[r]["mirror"]
        assert own["state"] and same(mirrored, own)
        assert all(g["lr"] == OPTIMIZERS[kind][1]["lr"] / 2 for g in mirrored["param_groups"])
        assert not same(own, shards[r]["own"])  # the shards differ: the check above could fail
    steps = {int(s["step"]) for s in shards[0]["own"]["state"].values() if "step" in s}
    assert kind == "sgd" or steps == {STEPS}  # the undone step is not counted
    assert same(after[0]["own"], shards[0]["own"]) and same(after[1]["own"], shards[1]["own"])
    assert same(after[2]["own"], shards[2]["own"])  # rank 2's shard, from rank 0's mirror
    for r in range(WORLD):  # the group formed: every mirror holds its predecessor's shard again
        assert same(after[r]["mirror"], after[(r - 1) % WORLD]["own"])


def test_a_rank_lost_with_its_buddy_stops_with_shard_lost_which_no_join_retries():
    from clockfabric.train import zero

    with pytest.raises(zero.ShardLost, match="rank 1 and its buddy rank 2 were both lost"):
        zero.resume_at([5, -1, -1], [4, -9, -9])  # two lost at once: with 3 ranks, always neighbours
    with pytest.raises(zero.ShardLost, match="every rank was lost"):
        zero.resume_at([-1, -1, -1], [-9] * WORLD)
    assert not issubclass(zero.ShardLost, RuntimeError)  # the elastic loop's join goes on after a RuntimeError


def test_the_members_go_on_from_the_most_completed_step_the_mirrors_allow():
    from clockfabric.train import zero

    # rank 1 lost; rank 2's mirror holds its shard as of rank 2's own count: everyone goes on from 5
    assert zero.resume_at([5, -1, 5], [4, -9, 4]) == (5, [1])
    # a survivor a step behind: its shard as of the step ahead is in its buddy's mirror, so nothing
    # is redone, and it is rebuilt like a new member
    assert zero.resume_at([5, 5, 4], [4, 4, 3]) == (5, [2])  # nobody lost
    assert zero.resume_at([5, -1, 5, 4], [4, -9, 4, 3]) == (5, [1, 3])
    # unless that buddy is the lost rank, or the lost rank's buddy is the one behind: all go back a step
    assert zero.resume_at([5, -1, 4], [4, -9, 3]) == (4, [1])
    assert zero.resume_at([4, -1, 5], [3, -9, 4]) == (4, [1])
    with pytest.raises(zero.ShardLost, match=r"no step every member holds.*completed \[4, 5\] steps"):
        zero.resume_at([4, -1, 5], [3, -9, -9])  # rank 2 has no snapshot from step 4
