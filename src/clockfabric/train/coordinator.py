"""The coordinator: a job's members judged from the board, a lost rank replaced by a spare.

The members register on the board (control.Board) with their first rank, or as spares; once
every rank is there, generation 0 is written. Every `tick` each rank is judged:

- its process ended: exited non-zero (where the coordinator started it) or its connection to
  the coordinator closed (where a launcher did: train.presence);
- its heartbeat report is older than `detect_s` (the process is frozen, SIGSTOP or a hang);
- most of its peers have not heard its heartbeats for `detect_s` (its host is cut off).

A step that failed with no rank lost `detect_s` later (it ran into the all-reduce's bound,
train.bound: a slow step) gets a new generation of the same members, and is redone.

Every rank lost in one tick goes in one new generation (two failures at once: two spares).
A lost member is fenced (it never comes back into the job: killed where the coordinator holds
its process, and it ends itself once it reads that it was lost), and a new generation is
written: the spare at the lost rank's index, the same world size, the lost member's heartbeat
address for the survivors to shut their sockets to. A spare lost while it joins is a lost rank
like any other: the next spare takes its place. With no spare left the generation is `paused`:
the survivors wait, and a spare that registers resumes the job; or, where the job allows it
(`min_ranks`) and enough survive, the job goes on shrunk: a generation of the survivors alone,
their ranks renumbered in order, a sharded optimizer (ZeRO-1) partitioned again (see
docs/spares.md, "Shrinking"). Once spares are ready again (added, or drained hosts back from
their audit) a shrunk job grows back: a generation with them at the next indices, up to its
first size.

A rank whose GPU reports a critical fault (`gpu_fault(host)`: a critical XID from NVML, say)
is replaced before it crashes: a spare is put at its index in a new generation, every member
joins it at its next step boundary, the faulty rank is drained (it waits) and fenced once the
new generation has formed. With no spare left it runs on until it fails. Every replaced
rank's host is drained: given no work until it passes an audit (train.readmit), and `on_drain`
/ `on_return` tell the launcher (Slurm drains and resumes the node).
"""

from __future__ import annotations

import json
import signal
import threading
import time
from collections.abc import Callable
from dataclasses import dataclass, replace
from pathlib import Path
from typing import Any

from clockfabric.errors import ClockfabricError
from clockfabric.hosts import Proc
from clockfabric.train import control
from clockfabric.train.detect import DETECT_S, slow_step, verdict
from clockfabric.train.heartbeat import stopped
from clockfabric.train.presence import Presence
from clockfabric.train.readmit import INTERVAL_S, HostAudit, Readmission

# A generation not joined by every member is issued again, with a new prefix, once a member
# says its rendezvous failed (every member alive), or by this many seconds after it was written.
REISSUE_S = 15.0


@dataclass
class Member:
    host: str  # its name on the board
    beat: str = ""  # its heartbeat address:port, from its first report
    proc: Proc | None = None  # where the coordinator started it
    log: Path | None = None  # its log, where the coordinator started it
    local: bool = False  # its process runs on this machine (a lab's): /proc says if it is stopped

    def ended(self) -> int | None:
        return self.proc.poll() if self.proc is not None else None


class Coordinator:
    def __init__(self, board: control.Board, ranks: int, folder: Path | str, *, detect_s: float = DETECT_S,
                 on_event: Callable[[dict[str, Any]], None] | None = None,
                 gpu_fault: Callable[[str], str | None] | None = None, min_ranks: int | None = None,
                 audit: HostAudit | None = None, readmit_s: float = INTERVAL_S, presence: Presence | None = None):
        if ranks < 2:
            raise ClockfabricError("an elastic job needs at least two ranks: a lost rank's state comes from a peer")
        if min_ranks is not None and not 1 <= min_ranks <= ranks:
            raise ClockfabricError(f"--min-ranks {min_ranks}: give 1 to {ranks} (the job's ranks)")
        self.board, self.size, self.folder = board, ranks, Path(folder)
        self.min_ranks = min_ranks  # the fewest ranks the job may go on with, no spare left; None: pause
        self.detect_s, self.on_event, self.gpu_fault, self.presence = detect_s, on_event, gpu_fault, presence
        self.on_drain: Callable[[str, str], None] | None = None
        self.on_return: Callable[[str], None] | None = None
        self.known: dict[str, Member] = {}  # started by us, before they register
        self.preferred: list[str] = []  # the spares in the order they are to be taken
        self.first: dict[int, Member] = {}  # generation 0's ranks, as they register
        self.registered = 0
        self.torch: str | None = None  # the job's torch version
        self.draining: list[Member] = []  # replaced on a GPU fault, fenced once their successor joined
        self.ranks: list[Member] = []
        self.spares: list[Member] = []
        self.retired: list[Member] = []
        self.vacant: list[int] = []  # ranks lost with no spare to take them: the job is paused
        self.events: list[dict[str, Any]] = []
        self.lock = threading.RLock()  # events are told under it, from the tick and the readmission thread
        self.stopping = threading.Event()
        self.readmission = Readmission(audit, self._return, self.event, lambda: [m.host for m in self.ranks],
                                       interval_s=readmit_s)
        self.watcher = threading.Thread(target=self._watch, name="train coordinator", daemon=True)
        self.gen: control.Generation | None = None
        self.awaiting: int | None = None  # a generation whose members have not all joined yet
        self.issued = 0.0  # when the awaited generation was written
        self.stopped: str | None = None  # why the ranks stopped (a lost ZeRO-1 shard, no checkpoint)

    def start(self) -> Coordinator:
        self.folder.mkdir(parents=True, exist_ok=True)
        self.watcher.start()
        if self.readmission.audit is not None:
            self.readmission.start()
        return self

    # ---- members arriving --------------------------------------------------------------------
    def _admit(self) -> None:
        """New registrations: generation 0's ranks until all are there, spares after."""
        for entry in self.board.members(self.registered):
            self.registered += 1
            name, rank, torch = str(entry["name"]), entry.get("rank"), str(entry.get("torch", ""))
            member = self.known.pop(name, None) or Member(name)
            if self.torch is None:
                self.torch = torch  # the version the job runs: the first member's
            if rank is not None and self.gen is None and 0 <= rank < self.size and rank not in self.first:
                self.first[rank] = member
            elif why := self.readmission.why(name):  # a launcher started it there: it gets no work
                self.event("spare refused", host=name, why=f"{name} is drained ({why}) until its audit passes")
                fence(member)
            elif torch != self.torch:  # its state would not load, or its collectives not match
                self.event("spare refused", host=name, why=f"{name} runs torch {torch or '(unknown)'}, the job "
                           f"torch {self.torch}: install the job's version there")
                fence(member)
            else:
                self.spares.append(member)
                if self.gen is not None:
                    self.event("spare added", host=name)
        for member in [*self.first.values(), *self.spares]:
            if not member.beat and (report := self.board.report(member.host)):
                member.beat = report["beat"]
        if self.gen is None and len(self.first) == self.size and all(m.beat for m in self.first.values()):
            self.ranks = [self.first[r] for r in range(self.size)]
            self.gen = control.Generation(0, control.RUNNING, [m.host for m in self.ranks],
                                          [m.beat for m in self.ranks])
            self.board.write_generation(self.gen)
            self.event("started", hosts=self.gen.hosts, spares=[m.host for m in self.spares])

    # ---- watching ----------------------------------------------------------------------------
    def _watch(self) -> None:
        while not self.stopping.wait(0.05):
            with self.lock:
                try:
                    self.tick()
                except control.BoardGone as e:  # nothing more can be told to the members or heard
                    self.stopped = str(e)
                    self.event("board gone", why=str(e))
                    return

    def tick(self) -> None:
        self._admit()
        if self.gen is None:
            return
        now = time.time()
        if self.awaiting is not None:
            self._joined()
        if self.stopped:
            return  # the ranks exit on their own: nothing to replace
        judged = [(rank, self.lost(rank, member, now)) for rank, member in enumerate(self.ranks)
                  if rank not in self.vacant]
        lost = [(rank, why) for rank, why in judged if why]
        if lost:
            self._replace(lost, now)
            return  # the next losses are judged on the new generation
        failed = self._rendezvous_failed(now) if self.awaiting is not None and not self.vacant else None
        if failed:
            self.event("not joined", generation=self.gen.number, why=failed)
            self._fill()
        elif self.vacant and len(self._ready_spares()) >= len(self.vacant):
            self._fill()
        elif self.awaiting is None and not self.vacant \
                and (slow := slow_step(self.board, self.gen.number, now, self.detect_s)):
            self.event("slow step", generation=self.gen.number, why=slow)
            self._fill()  # the same members: each redoes its failed step from its own state or the most advanced
        elif self.awaiting is None and len(self.ranks) < self.size and self._ready_spares():
            self._grow()
        elif self.gpu_fault and self.awaiting is None:
            self._replace_faulty(now)

    def lost(self, rank: int, member: Member, now: float) -> str | None:
        peers = [self.board.report(m.host) for i, m in enumerate(self.ranks) if i != rank and i not in self.vacant]
        gone = self.presence is not None and member.proc is None and self.presence.gone(member.host)
        return verdict(rank, member.ended(), self.board.report(member.host), [p for p in peers if p], member.beat,
                       now, self.detect_s, gone=gone,
                       stopped=member.local and member.proc is not None and stopped(member.proc.pid))

    def _replace(self, lost: list[tuple[int, str]], now: float) -> None:
        assert self.gen is not None
        beats = []
        for rank, why in lost:
            member = self.ranks[rank]
            self.event("detected", rank=rank, host=member.host, why=why, time=now)
            fence(member)
            self.retired.append(member)
            self._drain(member.host, why)
            beats.append(member.beat)
            self.vacant.append(rank)
        self.gen = replace(self.gen, lost=[*self.gen.lost, *beats])
        self._fill()
        if self.vacant and self.min_ranks is not None and len(self.ranks) - len(self.vacant) >= self.min_ranks:
            self._shrink()
        if self.vacant:
            self.gen = replace(self.gen, number=self.gen.number + 1, state=control.PAUSED)
            self.awaiting = None  # nothing to join until a spare comes
            self.board.write_generation(self.gen)
            self.event("paused", ranks=list(self.vacant),
                       why="no spare left: the survivors wait until a spare is added")

    def _replace_faulty(self, now: float) -> None:
        """A rank whose GPU reported a critical fault: a spare at its index, joined at the next step boundary."""
        assert self.gpu_fault is not None
        for rank, member in enumerate(self.ranks):
            fault = self.gpu_fault(member.host)
            if fault is None:
                continue
            self.event("detected", rank=rank, host=member.host, why=f"{fault}: replaced at the next step boundary",
                       time=now)
            if not self._ready_spares():
                self.event("no spare", rank=rank, why="no spare left: the rank runs on until it fails")
                continue
            self.draining.append(member)
            self.vacant.append(rank)
            self._fill()
            return  # one at a time: the next is judged once this generation has formed

    def _rendezvous_failed(self, now: float) -> str | None:
        """Why the awaited generation will not form with every member alive (None while it may)."""
        failed = next((r for r in self.board.records()
                       if r.get("event") == "join failed" and r.get("generation") == self.awaiting), None)
        if failed:
            return f"rank {failed.get('rank')}'s rendezvous failed: {failed.get('error', '')[:120]}"
        if now - self.issued > REISSUE_S:
            return f"not every member joined within {REISSUE_S:.0f} s"
        return None

    def _ready_spares(self) -> list[Member]:
        """In the order the launcher named them (`preferred`), then as they registered."""
        ready = [s for s in self.spares if s.beat and s.ended() is None
                 and not (self.presence and s.proc is None and self.presence.gone(s.host))]
        rank = {h: i for i, h in enumerate(self.preferred)}
        return sorted(ready, key=lambda s: rank.get(s.host, len(rank)))

    def ready_spares(self) -> list[str]:
        with self.lock:
            return [s.host for s in self._ready_spares()]

    def _fill(self) -> None:
        """A spare for every vacant rank, in a new generation; none taken unless all can be."""
        assert self.gen is not None
        ready = self._ready_spares()
        if len(ready) < len(self.vacant):
            return
        hosts, beats = list(self.gen.hosts), list(self.gen.beats)
        for rank, spare in zip(sorted(self.vacant), ready, strict=False):
            self.spares.remove(spare)
            self.ranks[rank] = spare
            hosts[rank], beats[rank] = spare.host, spare.beat
            self.event("spare chosen", rank=rank, host=spare.host)
        self.vacant = []
        self._issue(hosts, beats)

    def _shrink(self) -> None:
        """No spare for the vacant ranks: a generation of the survivors, renumbered in rank order."""
        assert self.gen is not None
        keep = [rank for rank in range(len(self.ranks)) if rank not in self.vacant]
        self.ranks = [self.ranks[rank] for rank in keep]
        hosts, beats = [self.gen.hosts[r] for r in keep], [self.gen.beats[r] for r in keep]
        self.event("shrunk", ranks=sorted(self.vacant), world=len(keep), hosts=hosts,
                   why="no spare left: the job goes on with the survivors")
        self.vacant = []
        self._issue(hosts, beats)

    def _grow(self) -> None:
        """A shrunk job and ready spares: a generation with them at the next indices, up to the
        job's first size; the members join it at their next step boundary."""
        assert self.gen is not None
        joining = self._ready_spares()[:self.size - len(self.ranks)]
        for spare in joining:
            self.spares.remove(spare)
            self.ranks.append(spare)
        hosts, beats = [*self.gen.hosts, *(s.host for s in joining)], [*self.gen.beats, *(s.beat for s in joining)]
        self.event("grown", hosts=[s.host for s in joining], world=len(hosts),
                   why="spares ready for a shrunk job: it grows back")
        self._issue(hosts, beats)

    def _issue(self, hosts: list[str], beats: list[str]) -> None:
        """A new running generation, awaited until every member joined it."""
        assert self.gen is not None
        number = self.gen.number + 1  # self.gen is the last written: running, paused or not joined by all
        self.gen = replace(self.gen, number=number, state=control.RUNNING, hosts=hosts, beats=beats)
        self.board.write_generation(self.gen)
        self.event("generation", number=number, hosts=hosts)
        self.awaiting, self.issued = number, time.time()

    def _joined(self) -> None:
        """Once every member joined the awaited generation: what was carried, and from which step."""
        assert self.gen is not None
        recs = self.board.records()
        stop = next((r for r in recs if r.get("event") == "stopped"), None)
        if stop and not self.stopped:
            self.stopped = stop["why"]
            self.event("stopped", generation=self.awaiting, why=stop["why"])
            return
        joins = [r for r in recs if r.get("event") == "joined" and r.get("generation") == self.awaiting]
        if {r["rank"] for r in joins} != set(range(self.gen.world)):
            return
        self.awaiting = None
        self.event("state transferred", generation=self.gen.number, bytes=max(r["bytes"] for r in joins),
                   seconds=round(max(r["transfer_s"] for r in joins), 4))
        self.event("resumed", generation=self.gen.number, step=max(r["step"] for r in joins))
        restored = next((r for r in joins if "checkpoint_step" in r), None)
        if restored:  # no member's memory held the state: the steps since the checkpoint are redone
            self.event("resumed from checkpoint", generation=self.gen.number, step=restored["checkpoint_step"],
                       redone=restored["redone"], why=restored["why"])
        for member in self.draining:
            fence(member)  # its successor holds the rank now
            self._drain(member.host, "its GPU reported a critical fault")
        self.retired += self.draining
        self.draining = []

    # ---- drained hosts -----------------------------------------------------------------------
    def _drain(self, host: str, why: str) -> None:
        self.readmission.drain(host, why)
        self.event("drained", host=host, why=why)
        if self.on_drain:
            self.on_drain(host, why)

    def _return(self, host: str) -> None:
        """host passed the audit: it may hold a spare again (the launcher starts one there)."""
        with self.lock:
            if self.stopping.is_set() or self.gen is None:
                return
            lost = {m.beat for m in self.retired if m.host == host}
            # the next generation written does not fence it: it may join again (the survivors fenced it once)
            self.gen = replace(self.gen, lost=[b for b in self.gen.lost if b not in lost])
            self.event("returned to spare pool", host=host)
            if self.on_return:
                self.on_return(host)

    # ---- ending ------------------------------------------------------------------------------
    def members(self) -> list[Member]:
        return [*self.ranks, *self.spares, *self.retired, *self.draining, *self.first.values(), *self.known.values()]

    def finished(self) -> bool:
        return self.gen is not None and not self.vacant and all(
            (r := self.board.report(m.host)) is not None and r.get("done") for m in self.ranks)

    def wait(self, timeout_s: float) -> bool:
        """Whether every rank completed within timeout_s; False at once if the ranks stopped
        (`stopped` says why)."""
        deadline = time.monotonic() + timeout_s
        while time.monotonic() < deadline and not self.stopped:
            with self.lock:
                done = self.finished()
            if done:
                self.event("completed")
                return True
            time.sleep(0.1)
        return False

    def stop(self) -> None:
        self.stopping.set()
        self.readmission.stop()
        if self.watcher.is_alive():
            self.watcher.join(5)
        if self.presence is not None:
            self.presence.stop()

    def event(self, kind: str, **fields: Any) -> None:
        record = {"event": kind, "time": time.time(), **fields}
        with self.lock:
            self.events.append(record)
            with open(self.folder / "events.jsonl", "a") as f:
                f.write(json.dumps(record) + "\n")
            if self.on_event:
                self.on_event(record)


def fence(member: Member) -> None:
    """A lost member never comes back into the job: its process killed where we hold it (one
    we do not ends itself once it reads that it was lost: train.heartbeat)."""
    if member.proc is not None:
        member.proc.signal(signal.SIGKILL)  # a stopped process dies of SIGKILL too
