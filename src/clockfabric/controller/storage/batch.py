"""Group commit: pushes that arrive while another batch is being written wait for it to finish, and
then one of them writes all that wait, in one transaction.

One commit (one fsync on PostgreSQL, one BEGIN/COMMIT on SQLite) and one insert of samples serve
many pushes: under load the cost per push falls as the batch grows, and an idle controller writes
each push alone, at once, as before. A batch is stored whole or not at all, like each push in it:
when it fails, every push in it gets the error (agents keep their data and push again).
"""

from __future__ import annotations

import copy
import threading
from collections.abc import Callable
from dataclasses import dataclass, field
from typing import Generic, TypeVar

Item = TypeVar("Item")
Result = TypeVar("Result")


@dataclass(eq=False)
class _Waiting(Generic[Item, Result]):
    item: Item
    done: bool = False
    result: Result | None = None
    error: BaseException | None = field(default=None)
    stored_by_self: bool = False


class GroupCommit(Generic[Item, Result]):
    def __init__(self, lock: threading.Lock, store: Callable[[list[Item]], list[Result]]) -> None:
        """`store`: writes items in one transaction, called with `lock` held; a result per item, in order."""
        self._lock = lock
        self._store = store
        self._queue: list[_Waiting[Item, Result]] = []
        self._turn = threading.Condition()  # guards the queue and `_writing`; told when a batch is done
        self._writing = False

    def submit(self, item: Item) -> Result:
        """Store `item`, with whatever else waits when the writer before is done; its result, or the
        batch's error. A thread whose item another wrote learns it without taking the storage's lock."""
        waiting: _Waiting[Item, Result] = _Waiting(item)
        with self._turn:
            self._queue.append(waiting)
            while self._writing and not waiting.done:
                self._turn.wait()
            if not waiting.done:
                self._writing, waiting.stored_by_self = True, True
                batch, self._queue = self._queue, []
        if waiting.stored_by_self:
            self._write(batch)
        if waiting.error is not None:
            if waiting.stored_by_self:
                raise waiting.error
            # a copy for each other thread: one exception raised in several threads would share a traceback
            raise copy.copy(waiting.error) from waiting.error
        return waiting.result  # type: ignore[return-value]  # set with done, when no error

    def _write(self, batch: list[_Waiting[Item, Result]]) -> None:
        try:
            with self._lock:
                results = self._store([w.item for w in batch])
        except BaseException as e:  # handed to every waiting thread, raised in submit
            for w in batch:
                w.error = e
        else:
            for w, result in zip(batch, results, strict=True):
                w.result = result
        with self._turn:
            for w in batch:
                w.done = True
            self._writing = False
            self._turn.notify_all()
