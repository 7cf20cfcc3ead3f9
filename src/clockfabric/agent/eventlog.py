"""An agent's events until the controller has them: a bounded log on disk, so that an agent
killed (kill -9, a crash, a power cut) sends what it held once it runs again, under the boot and
sequence numbers they were given.

Durability. Events are appended as JSON lines and synced (fdatasync) once per push, before the
push is sent: the controller never has an event the disk does not. A link's change is put on
disk at once, from the link watcher's thread (Pusher.hold), even while a push hangs on the
network the change took down. The window of risk is what another service has seen but the pusher
has not yet taken: at most one push interval (1 s), in memory.
The controller's acknowledgements are appended without a sync: lost, their events are sent
again, and the controller stores each (host, boot, seq) once.

Bounds. At most `capacity` events are held; past it the oldest go, counted against their boot.
The file is rewritten (a new file, synced, renamed over the old) at open and whenever it holds
more than 4 x capacity records, so it stays within a few times capacity events.

Boots. Each agent run is a boot, remembered until the controller has taken the statement of its
end: its last seq, how many of its events were delivered, how many were not (dropped or
refused). A boot's end is stated once none of its events is held any more.
"""

from __future__ import annotations

import json
import logging
import os
from collections import deque
from collections.abc import Iterable, Sequence
from dataclasses import asdict, dataclass
from pathlib import Path
from typing import IO

log = logging.getLogger(__name__)
CAPACITY = 10_000
COMPACT_FACTOR = 4  # records per held event before the file is rewritten
MAX_BOOTS = 1_000  # boots remembered: an agent crash-looping while the controller is away forgets the oldest


@dataclass
class Boot:
    boot: str
    last_seq: int = 0  # the last seq numbered in this boot
    delivered: int = 0  # taken by the controller
    undelivered: int = 0  # dropped (log full) or refused by the controller
    held: int = 0  # still in the log

    def statement(self) -> dict:
        return {"boot": self.boot, "last_seq": self.last_seq, "delivered": self.delivered,
                "undelivered": self.undelivered}


class EventLog:
    def __init__(self, path: Path | None, capacity: int = CAPACITY, *, sync: bool = True):
        """`path` None: held in memory only (what a restart loses, the controller is told it cannot know).
        `sync` False: never fsync (measured against in the benchmark; not for use)."""
        self.path = path
        self.capacity = capacity
        self.sync = sync
        self.pending: deque[dict] = deque()  # oldest first; each with its "boot" and "seq"
        self.boots: dict[str, Boot] = {}  # in the order they started; the last is the current one
        self.dropped = 0  # events dropped because the log was full, over this process's life
        self._file: IO[str] | None = None
        self._records = 0
        self._dirty = False
        if path is not None:
            self._load(path)
            self._rewrite()

    @property
    def current(self) -> Boot:
        return self.boots[next(reversed(self.boots))]

    def start_boot(self, boot: str) -> None:
        for old in [b for b in self.boots.values() if b.held == 0][:max(0, len(self.boots) + 1 - MAX_BOOTS)]:
            del self.boots[old.boot]
            self._append({"reported": old.boot})
        self.boots[boot] = Boot(boot)
        self._append({"boot": boot})

    def add(self, events: Iterable[dict]) -> int:
        """Number the events in the current boot and hold them; returns how many older ones were dropped."""
        cur, dropped = self.current, 0
        for e in events:
            cur.last_seq += 1
            cur.held += 1
            item = {**e, "boot": cur.boot, "seq": cur.last_seq}
            self.pending.append(item)
            self._append({"ev": item})
            if len(self.pending) > self.capacity:
                dropped += 1
                self._gone([self.pending.popleft()], delivered=False)
        self.dropped += dropped
        return dropped

    def taken(self, batch: Sequence[dict], keep: Sequence[dict] = (), *, delivered: bool) -> None:
        """`batch` (the oldest held, as sent) leaves the log, but for `keep`: delivered, or refused."""
        for _ in batch:
            self.pending.popleft()
        self.pending.extendleft(reversed(keep))
        kept = {(e["boot"], e["seq"]) for e in keep}
        self._gone([e for e in batch if (e["boot"], e["seq"]) not in kept], delivered=delivered)

    def ended(self, *, final: bool = False) -> list[dict]:
        """Statements of the boots that ended with nothing held (the current one too if `final`)."""
        cur = self.current.boot
        return [b.statement() for b in self.boots.values() if b.held == 0 and (final or b.boot != cur)]

    def reported(self, boots: Iterable[str]) -> None:
        """The controller has these boots' end statements: forget them (never the current one)."""
        for boot in boots:
            if boot != self.current.boot and self.boots.pop(boot, None) is not None:
                self._append({"reported": boot})

    def commit(self) -> None:
        """What was appended, on disk (one sync however many events: the cost per push is bounded)."""
        if self._file is None or not self._dirty:
            return
        self._file.flush()
        if self.sync:
            os.fdatasync(self._file.fileno())
        self._dirty = False
        if self._records > COMPACT_FACTOR * max(self.capacity, 64):
            self._rewrite()

    def close(self) -> None:
        if self._file is not None:
            self.commit()
            self._file.close()
            self._file = None

    def _gone(self, events: list[dict], *, delivered: bool) -> None:
        by_boot: dict[str, list[int]] = {}
        for e in events:
            by_boot.setdefault(e["boot"], []).append(e["seq"])
        for boot, seqs in by_boot.items():
            self._count_gone(boot, len(seqs), delivered)
            self._append({"gone": boot, "seqs": seqs, "delivered": delivered})

    def _count_gone(self, boot: str, n: int, delivered: bool) -> None:
        b = self.boots.setdefault(boot, Boot(boot))
        b.held -= n
        if delivered:
            b.delivered += n
        else:
            b.undelivered += n

    def _append(self, record: dict) -> None:
        if self._file is None:
            return
        self._file.write(json.dumps(record, separators=(",", ":")) + "\n")
        self._records += 1
        self._dirty = True

    def _load(self, path: Path) -> None:
        """Replay the file. A line that does not parse (a write cut short by the crash) is skipped."""
        try:
            text = path.read_text(errors="replace")
        except FileNotFoundError:
            return
        except OSError as e:
            log.warning("cannot read the event log %s (%s): starting without it", path, e.strerror)
            return
        held: dict[tuple[str, int], dict] = {}
        bad = 0
        for line in text.splitlines():
            try:
                self._replay(json.loads(line), held)
            except (ValueError, TypeError, KeyError, AttributeError, RecursionError):
                bad += 1
        if bad:
            log.warning("event log %s: %d record(s) unreadable, skipped (a write cut short)", path, bad)
        self.pending.extend(held.values())
        for b in self.boots.values():
            b.held = 0
        for item in self.pending:
            self.boots[item["boot"]].held += 1

    def _replay(self, r: dict, held: dict[tuple[str, int], dict]) -> None:
        if "ev" in r:
            e = r["ev"]
            b = self.boots.setdefault(e["boot"], Boot(e["boot"]))
            b.last_seq = max(b.last_seq, int(e["seq"]))
            held[e["boot"], int(e["seq"])] = e
        elif "gone" in r:
            for seq in r["seqs"]:
                if held.pop((r["gone"], seq), None) is not None:
                    self._count_gone(r["gone"], 1, bool(r["delivered"]))
        elif "reported" in r:
            self.boots.pop(r["reported"], None)
        elif "boot" in r:
            b = self.boots.pop(r["boot"]) if r["boot"] in self.boots else Boot(r["boot"])
            for name in ("last_seq", "delivered", "undelivered"):
                setattr(b, name, max(getattr(b, name), int(r.get(name, 0))))
            self.boots[b.boot] = b  # moved to the end: the order they started in
        while len(held) > self.capacity:  # a file written with a larger capacity: the oldest go
            key = next(iter(held))
            del held[key]
            self._count_gone(key[0], 1, False)

    def _rewrite(self) -> None:
        """The log as it stands, to a new file, synced, renamed over the old one."""
        assert self.path is not None
        if self._file is not None:
            self._file.close()
        tmp = self.path.with_name(self.path.name + ".new")
        self.path.parent.mkdir(parents=True, exist_ok=True)
        with open(tmp, "w") as f:
            for b in self.boots.values():
                f.write(json.dumps({k: v for k, v in asdict(b).items() if k != "held"}, separators=(",", ":")) + "\n")
            for e in self.pending:
                f.write(json.dumps({"ev": e}, separators=(",", ":")) + "\n")
            f.flush()
            if self.sync:
                os.fsync(f.fileno())
        os.replace(tmp, self.path)
        if self.sync:
            dir_fd = os.open(self.path.parent, os.O_RDONLY)
            try:
                os.fsync(dir_fd)  # the rename itself survives a power cut
            finally:
                os.close(dir_fd)
        self._file = open(self.path, "a")  # noqa: SIM115 - held open for appends until close()
        self._records = len(self.boots) + len(self.pending)
        self._dirty = False
