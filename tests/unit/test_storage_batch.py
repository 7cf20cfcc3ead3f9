"""Group commit: pushes waiting together are written in one transaction, each gets its own result,
and a failed batch fails every push in it."""

from __future__ import annotations

import threading
import time

from clockfabric.controller.storage import open_storage
from clockfabric.controller.storage.base import Event, StorageError
from clockfabric.controller.storage.batch import GroupCommit


def test_one_submit_alone_is_written_at_once():
    batches: list[list[int]] = []
    commit = GroupCommit(threading.Lock(), lambda items: batches.append(items) or [i * 10 for i in items])
    assert commit.submit(1) == 10
    assert commit.submit(2) == 20
    assert batches == [[1], [2]]


def test_items_waiting_while_a_batch_is_written_go_in_the_next_one():
    batches: list[list[int]] = []
    first_started, release = threading.Event(), threading.Event()

    def store(items):
        batches.append(list(items))
        if items == [0]:
            first_started.set()
            release.wait(5)
        return [f"r{i}" for i in items]

    commit = GroupCommit(threading.Lock(), store)
    results: dict[int, str] = {}
    first = threading.Thread(target=lambda: results.__setitem__(0, commit.submit(0)))
    first.start()
    assert first_started.wait(5)
    others = [threading.Thread(target=lambda i=i: results.__setitem__(i, commit.submit(i))) for i in range(1, 6)]
    for t in others:
        t.start()
    time.sleep(0.2)  # all five queued behind the first write
    release.set()
    for t in [first, *others]:
        t.join(5)
    assert batches[0] == [0] and sorted(batches[1]) == [1, 2, 3, 4, 5] and len(batches) == 2
    assert results == {i: f"r{i}" for i in range(6)}


def test_a_failed_batch_fails_each_item_with_its_own_copy():
    started, release = threading.Event(), threading.Event()

    def store(items):
        if items == ["first"]:
            started.set()
            release.wait(5)
            return ["ok"]
        raise StorageError("disk full", "full")

    commit = GroupCommit(threading.Lock(), store)
    errors: list[BaseException] = []

    def submit(item):
        try:
            commit.submit(item)
        except StorageError as e:
            errors.append(e)

    first = threading.Thread(target=submit, args=("first",))
    first.start()
    assert started.wait(5)
    failing = [threading.Thread(target=submit, args=(i,)) for i in range(3)]
    for t in failing:
        t.start()
    time.sleep(0.2)
    release.set()
    for t in [first, *failing]:
        t.join(5)
    assert len(errors) == 3 and all(e.kind == "full" and "disk full" in str(e) for e in errors)
    assert len({id(e) for e in errors}) == 3  # no exception object shared between threads


def test_concurrent_pushes_each_count_their_own_new_events(tmp_path):
    threads = 8
    store = open_storage(str(tmp_path / "c.db"))
    news: dict[str, list[int]] = {}

    def push(host: str) -> None:
        for seq in (1, 1, 2):  # the second is a re-send: nothing new
            ev = Event(host=host, seq=seq, boot="b", t_ns=seq, kind="link_down")
            news.setdefault(host, []).append(store.add_push(host, seq, {"n": seq}, [ev]))

    workers = [threading.Thread(target=push, args=(f"h{i}",)) for i in range(threads)]
    for t in workers:
        t.start()
    for t in workers:
        t.join(10)
    assert news == {f"h{i}": [1, 0, 1] for i in range(threads)}
    assert len(store.events(limit=1000)) == 2 * threads
    assert all(h.info == {"n": 2} for h in store.hosts())
    store.close()
