"""Forming a generation's group is bounded, gloo's connections too: real gloo processes on
localhost, one member killed after it published its address, before the others connect to it."""

import ctypes
import multiprocessing
import os
import socket
import time

import pytest

torch = pytest.importorskip("torch")

WORLD = 3
SLACK_S = 2.5  # a loaded machine's scheduling, on top of the bound
CLONE_NEWUTS = 0x04000000

pytestmark = pytest.mark.skipif(os.geteuid() != 0, reason="each member names itself in a UTS namespace (root)")


def own_address(rank: int) -> None:
    """Gloo binds to the address the hostname resolves to: 127.0.0.(rank + 1), all on lo. Of a
    pair, gloo makes the higher address connect and the lower one listen: the last rank, the
    victim, connects to the survivors, and they wait for it (its connection is what never comes)."""
    os.environ.pop("GLOO_SOCKET_IFNAME", None)
    assert ctypes.CDLL(None, use_errno=True).unshare(CLONE_NEWUTS) == 0
    socket.sethostname(f"127.0.0.{rank + 1}")


def member(store: str, rank: int, ready, go, out) -> None:
    import torch.distributed as dist

    from clockfabric.train import group

    own_address(rank)
    ready.put(rank)
    go.wait()
    began = time.monotonic()
    try:
        group.form(dist.FileStore(store, WORLD), rank, WORLD)
        out.put((rank, time.monotonic() - began, None))
    except RuntimeError as e:
        out.put((rank, time.monotonic() - began, str(e)))


def victim(store: str, rank: int, ready, go, out) -> None:
    """Arrives, publishes its address (gloo's init, with no bound of its own), waits for the others'."""
    import datetime

    import torch.distributed as dist

    from clockfabric.train import group

    own_address(rank)
    ready.put(rank)
    go.wait()
    rendezvous = dist.FileStore(store, WORLD)
    rendezvous.add(group.ARRIVED, 1)
    dist.init_process_group("gloo", store=rendezvous, rank=rank, world_size=WORLD,
                            timeout=datetime.timedelta(seconds=60))


def test_a_member_killed_while_the_group_connects_costs_the_others_the_form_bound(tmp_path):
    from clockfabric.train.group import FORM_S

    ctx = multiprocessing.get_context("spawn")
    ready, out = ctx.Queue(), ctx.Queue()
    go_victim, go_survivors = ctx.Event(), ctx.Event()
    store = str(tmp_path / "store.1")
    lost = ctx.Process(target=victim, args=(store, 2, ready, go_victim, out))
    survivors = [ctx.Process(target=member, args=(store, rank, ready, go_survivors, out)) for rank in (0, 1)]
    for p in [lost, *survivors]:
        p.start()
    try:
        assert sorted(ready.get(timeout=90) for _ in range(WORLD)) == [0, 1, 2]  # torch imported everywhere
        go_victim.set()
        time.sleep(2.0)  # the victim publishes its address in the store, then waits for the others'
        lost.kill()
        lost.join(10)
        go_survivors.set()
        results = sorted(out.get(timeout=120) for _ in survivors)
    finally:
        for p in [lost, *survivors]:
            p.kill()
            p.join(10)
    assert [rank for rank, _, _ in results] == [0, 1]
    assert all(error is not None for _, _, error in results), results  # neither formed a group without rank 2
    # the victim's address was read from the store: the survivors failed connecting to it
    assert any("connect" in error.lower() for _, _, error in results), results
    slowest = max(took for _, took, _ in results)
    assert slowest < FORM_S + SLACK_S, f"the group's forming took {slowest:.1f} s, past its {FORM_S} s bound"
