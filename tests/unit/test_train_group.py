"""Re-forming the group with gloo on localhost processes: a replacement joins at the lost
rank's index and receives the state from the member that completed the most steps."""

import multiprocessing
import os

import pytest

torch = pytest.importorskip("torch")

WORLD = 3


def member(store0: str, store1: str, rank: int, role: str, out) -> None:
    import torch.distributed as dist

    from clockfabric.train import group, state

    os.environ["GLOO_SOCKET_IFNAME"] = "lo"
    torch.manual_seed(0)
    module = torch.nn.Linear(4, 2)
    opt = torch.optim.SGD(module.parameters(), lr=0.1, momentum=0.9)
    completed = -1
    if role != "replacement":
        group.form(dist.FileStore(store0, WORLD), rank, WORLD, timeout_s=20)
        for step in range(2):
            module.weight.grad = torch.full_like(module.weight, float(step + 1))
            module.bias.grad = torch.zeros_like(module.bias)
            dist.all_reduce(module.weight.grad)
            opt.step()
            completed = step + 1
        if role == "lost":
            os._exit(0)  # gone in the middle of the job
        if rank == 1:  # the survivor that went furthest: its third step's all-reduce completed, rank 0's failed
            module.weight.grad = torch.ones_like(module.weight)
            opt.step()
            completed = 3
    group.form(dist.FileStore(store1, WORLD), rank, WORLD, timeout_s=20)
    source, counts = group.most_advanced(completed)
    best = counts[source]
    mine = state.to_bytes(state.capture(module, opt, completed, completed)) if rank == source else None
    blob = group.broadcast_bytes(mine, source)
    if rank != source:
        completed, _ = state.restore(state.from_bytes(blob), module, opt)
    out.put((rank, role, source, best, completed, state.digest(module), dist.get_world_size()))
    dist.destroy_process_group()


def test_group_reforms_with_a_replacement_and_state_from_the_most_advanced(tmp_path):
    ctx = multiprocessing.get_context("spawn")
    out = ctx.Queue()
    store0, store1 = str(tmp_path / "store.0"), str(tmp_path / "store.1")
    roles = [(0, "survivor"), (1, "survivor"), (2, "lost"), (2, "replacement")]
    procs = [ctx.Process(target=member, args=(store0, store1, rank, role, out)) for rank, role in roles]
    for p in procs:
        p.start()
    results = [out.get(timeout=90) for _ in range(3)]
    for p in procs:
        p.join(30)
    by_rank = {r[0]: r for r in results}
    assert sorted(by_rank) == [0, 1, 2] and {r[1] for r in results} == {"survivor", "replacement"}
    assert {r[2] for r in results} == {1} and {r[3] for r in results} == {3}  # source: rank 1, 3 steps
    assert {r[4] for r in results} == {3}  # every member resumes after the third step
    assert len({r[5] for r in results}) == 1  # bit-equal parameters everywhere
    assert {r[6] for r in results} == {WORLD}  # the same world size
