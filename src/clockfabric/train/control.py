"""The job's board: how the coordinator and the members tell each other things.

The board is a c10d store every member reaches, so it works the same whatever launched the
members and whatever happens to the fabric between them:

- `tcp://HOST:PORT`: a TCPStore that the coordinator serves (`clockfabric train coordinator`);
  torchrun's own rendezvous may share it (`--rdzv-backend c10d --rdzv-endpoint HOST:PORT`), so
  no member's host holds the store the others need;
- `file:///PATH`: a FileStore on a filesystem every member shares (the lab's, or a cluster's).

The coordinator writes the generation (who holds each rank, which members were lost); each
member registers, writes its heartbeat report (when, and when it last heard each peer over the
network), and, when it enters a generation, a ready mark: the members form the group only
once every mark is there, so a member lost before that never leaves the others blocked in the
group's rendezvous. What the coordinator must know of the members' own progress (joined, a
rendezvous failed, the job stopped) they post as records. Each generation's group meets under
its own prefix, as torchft re-forms its groups with a new store prefix.

A c10d store's check and get wait forever on a server that stopped answering, whatever the
store's timeout (a stopped or wedged coordinator, a network that drops its packets), so every
store operation runs on a thread of the board's own and its caller waits a bounded time: a
read or an overwrite is tried once more on a fresh connection (the fault may be that
connection's alone), and then the board is gone (`BoardGone`, one line), never a hang.
"""

from __future__ import annotations

import datetime
import json
import threading
import time
import urllib.parse
from collections.abc import Callable
from dataclasses import asdict, dataclass, field
from pathlib import Path
from typing import Any

from clockfabric.errors import ClockfabricError

STORE_ENV = "CLOCKFABRIC_TRAIN_STORE"  # the job's board: tcp://HOST:PORT or file:///PATH
NAME_ENV = "CLOCKFABRIC_TRAIN_HOST"  # the member's name (default: the host's name, /LOCAL_RANK if several)
BEAT_ENV = "CLOCKFABRIC_TRAIN_BEAT"  # address[:port] its heartbeats are sent from (default: its hostname's)
SPARE_ENV = "CLOCKFABRIC_TRAIN_SPARE"  # set on a spare: it waits to be given a rank
RANKS_ENV = "CLOCKFABRIC_TRAIN_RANKS"  # the job's ranks: a task numbered past them is a spare (srun)
RUNNING, PAUSED, DONE = "running", "paused", "done"
CONNECT_S = 30.0  # a member's wait for the board when it starts (the coordinator may start after it)
ANSWER_S = 30.0  # the longest a store operation may take before the board is taken as gone
KEY = "clockfabric/train/"


@dataclass
class Generation:
    number: int
    state: str  # running | paused (a rank is lost and no spare is left) | done
    hosts: list[str]  # rank i is held by the member named hosts[i]
    beats: list[str]  # rank i's heartbeat address:port
    lost: list[str] = field(default_factory=list)  # heartbeat addresses of every member lost so far

    @property
    def world(self) -> int:
        return len(self.hosts)


def parse_url(url: str) -> tuple[str, str, int]:
    """('tcp', host, port) or ('file', path, 0); one clear line for anything else."""
    parts = urllib.parse.urlsplit(url)
    if parts.scheme == "file" and parts.path:
        return "file", parts.path, 0
    if parts.scheme == "tcp" and parts.hostname and parts.port is not None:
        return "tcp", parts.hostname, parts.port
    raise ClockfabricError(f"{STORE_ENV}={url!r}: give tcp://HOST:PORT (the coordinator's) or file:///PATH "
                           "(on a filesystem every member shares)")


class BoardGone(ClockfabricError):
    """The board stopped answering (its coordinator ended, or the network to it)."""


def _bounded(operation: Callable[[], Any], limit_s: float) -> Any:
    """operation()'s answer, run on a thread of its own; TimeoutError if it takes over limit_s
    (the thread is left in it: its connection is dropped)."""
    box: dict[str, Any] = {}

    def run() -> None:
        try:
            box["value"] = operation()
        except BaseException as e:  # handed to the caller, raised there
            box["error"] = e

    thread = threading.Thread(target=run, name="board store", daemon=True)
    thread.start()
    thread.join(limit_s)
    if thread.is_alive():
        raise TimeoutError(f"no answer within {limit_s:g} s")
    if "error" in box:
        raise box["error"]
    return box["value"]


class Board:
    def __init__(self, store: Any, url: str, *, answer_s: float = ANSWER_S, reopen: Callable[[], Any] | None = None):
        self.store, self.url = store, url
        self.port = parse_url(url)[2]  # a tcp board's: fencing a peer on its host never shuts it
        self.answer_s = answer_s
        self._reopen = reopen  # a fresh connection to the same store; None: none is tried
        self._server = store  # a served board's store: it must outlive every connection replacing it
        self._records: list[dict[str, Any]] = []  # read so far

    @classmethod
    def open(cls, url: str, *, serve: bool = False, timeout_s: float = CONNECT_S,
             answer_s: float = ANSWER_S) -> Board:
        """The board at url; serve: this process is the coordinator and serves a tcp one (its
        port may be 0: a free one, `url` then says which)."""
        import torch.distributed as dist  # the coordinator of a lab job imports torch only here

        kind, where, port = parse_url(url)
        limit = datetime.timedelta(seconds=timeout_s)
        if kind == "file":
            Path(where).parent.mkdir(parents=True, exist_ok=True)
            return cls(dist.FileStore(where, -1), url, answer_s=answer_s,
                       reopen=lambda: dist.FileStore(where, -1))
        try:
            store = dist.TCPStore(where, port, is_master=serve, wait_for_workers=False, timeout=limit)
        except (RuntimeError, OSError) as e:
            doing = "serve the job's board on" if serve else "reach the job's board at"
            raise ClockfabricError(f"cannot {doing} {where}:{port}: {str(e).splitlines()[0][:160]}"
                                   + ("" if serve else "; is `clockfabric train coordinator` running there?")) from None
        served = f"tcp://{where}:{store.port}"
        return cls(store, served, answer_s=answer_s, reopen=lambda: dist.TCPStore(
            where, store.port, is_master=False, wait_for_workers=False, timeout=limit))

    def again(self) -> Board:
        """A second connection to the same board, for another thread (a heartbeat's)."""
        return Board.open(self.url, answer_s=self.answer_s)

    # ---- store operations, each bounded ----------------------------------------------------
    def _ask(self, operation: Callable[[Any], Any], *, retry: bool = True) -> Any:
        """operation(store)'s answer; BoardGone, one line, if the board does not answer. `retry`:
        the operation may run twice (a read, an overwrite), so a fresh connection is tried."""
        try:
            try:
                return _bounded(lambda: operation(self.store), self.answer_s)
            except TimeoutError:
                if not retry or self._reopen is None:
                    raise
                self.store = _bounded(self._reopen, self.answer_s)  # the old one stays with its thread
                return _bounded(lambda: operation(self.store), self.answer_s)
        except (RuntimeError, OSError) as e:  # c10d's DistNetworkError and DistStoreError are RuntimeErrors
            raise BoardGone(f"the job's board at {self.url} does not answer ({str(e).splitlines()[0][:120]}): "
                            "is its coordinator still running?") from None

    def _get(self, key: str) -> dict[str, Any] | None:
        text = self.text(key)
        return json.loads(text) if text is not None else None

    def _set(self, key: str, value: dict[str, Any]) -> None:
        self.write_text(key, json.dumps(value))

    def text(self, key: str) -> str | None:
        """The value under `key` as written, None if none is."""
        value = self._ask(lambda store: store.get(KEY + key) if store.check([KEY + key]) else None)
        return value.decode() if value is not None else None

    def write_text(self, key: str, value: str) -> None:
        self._ask(lambda store: store.set(KEY + key, value))

    # ---- the generation --------------------------------------------------------------------
    def write_generation(self, gen: Generation) -> None:
        self._set("generation", asdict(gen))

    def generation(self) -> Generation | None:
        data = self._get("generation")
        return Generation(**data) if data else None

    def wait_generation(self, after: int, timeout_s: float, poll_s: float = 0.02) -> Generation:
        """The first running generation numbered above `after` (a paused one is waited through)."""
        deadline = time.monotonic() + timeout_s
        while time.monotonic() < deadline:
            gen = self.generation()
            if gen is not None and gen.number > after and gen.state != PAUSED:
                return gen
            time.sleep(poll_s)
        raise TimeoutError(f"no new generation of the job within {timeout_s:.0f} s (no spare came)")

    def superseded(self, number: int) -> bool:
        """Whether a generation numbered above `number` was issued (paused or not): generation
        `number`'s group is over, whatever it is still doing."""
        gen = self.generation()
        return gen is not None and gen.number > number

    def group_store(self, number: int) -> Any:
        """The store generation `number`'s group rendezvouses in: its own prefix, never reused."""
        import torch.distributed as dist

        return dist.PrefixStore(f"{KEY}group/{number}", self.store)

    # ---- members ---------------------------------------------------------------------------
    def register(self, name: str, rank: int | None, torch: str = "") -> None:
        """A member is here: `rank` its first rank (None for a spare), `torch` its torch's
        version. Once per process."""
        self._append("member", {"name": name, "rank": rank, "torch": torch, "time": time.time()})

    def members(self, since: int = 0) -> list[dict[str, Any]]:
        """The members registered after the first `since`, in order."""
        return self._read("member", since)

    def write_report(self, name: str, report: dict[str, Any]) -> None:
        self._set(f"beat/{name}", report)

    def report(self, name: str) -> dict[str, Any] | None:
        return self._get(f"beat/{name}")

    # ---- forming a generation --------------------------------------------------------------
    def mark_ready(self, number: int, rank: int) -> None:
        self.write_text(f"ready/{number}/{rank}", "1")

    def all_ready(self, gen: Generation) -> bool:
        keys = [f"{KEY}ready/{gen.number}/{r}" for r in range(gen.world)]
        return bool(self._ask(lambda store: store.check(keys)))

    def wait_ready(self, gen: Generation, timeout_s: float, poll_s: float = 0.02) -> Generation | None:
        """None once every member of gen marked itself ready; a newer generation if one came first
        (a member was lost before the group formed: the rendezvous would wait for it in vain)."""
        deadline = time.monotonic() + timeout_s
        while time.monotonic() < deadline:
            if self.all_ready(gen):
                return None
            newer = self.generation()
            if newer is not None and newer.number > gen.number and newer.state != PAUSED:
                return newer
            time.sleep(poll_s)
        raise TimeoutError(f"generation {gen.number}'s members did not all arrive within {timeout_s:.0f} s")

    def mark_failed(self, number: int, rank: int, **detail: Any) -> None:
        """Rank's step of generation `number` failed (its all-reduce, its group): the coordinator
        issues the generation again if, its detection time later, no member is lost."""
        self.post({"event": "step failed", "generation": number, "rank": rank, "time": time.time(), **detail})

    def failed_steps(self, number: int) -> list[dict[str, Any]]:
        """The marks of generation `number`'s failed steps, first first."""
        marks = [r for r in self.records() if r.get("event") == "step failed" and r.get("generation") == number]
        return sorted(marks, key=lambda m: m["time"])

    # ---- records ---------------------------------------------------------------------------
    def post(self, record: dict[str, Any]) -> None:
        """What the coordinator must know of a member's progress: joined, a failed rendezvous
        or step, the job stopped."""
        self._append("record", record)

    def records(self) -> list[dict[str, Any]]:
        """Every record posted so far, in order (read once each)."""
        self._records += self._read("record", len(self._records))
        return self._records

    # ---- append-only lists: a counter, then the entry under its number ----------------------
    def _append(self, name: str, value: dict[str, Any]) -> None:
        index = self._ask(lambda store: store.add(f"{KEY}{name}s", 1), retry=False)  # twice would leave a hole
        self._set(f"{name}/{index}", value)

    def _read(self, name: str, since: int) -> list[dict[str, Any]]:
        """The entries after the first `since`, up to the first counted but not yet written."""
        out = []
        count = self._ask(lambda store: store.add(f"{KEY}{name}s", 0))
        for i in range(since + 1, count + 1):
            if (entry := self._get(f"{name}/{i}")) is None:
                break
            out.append(entry)
        return out
