"""The coordinator: a job's ranks and its spares on lab hosts, failure detection, replacement.

Rank i runs on hosts[i]; each spare host runs the same script as a spare, which imports torch
and waits, so taking a rank costs no start-up. Every `tick` the coordinator judges each rank:

- its process exited non-zero (killed, crashed): lost at once;
- its heartbeat report is older than `detect_s` (the process is frozen, SIGSTOP or a hang);
- most of its peers have not heard its heartbeats for `detect_s` (its host is cut off).

A step that failed with no rank lost `detect_s` later (it ran into the all-reduce's bound,
train.bound: a slow step) gets a new generation of the same members, and is redone.

Every rank lost in one tick goes in one new generation (two failures at once: two spares).
A lost rank's process is killed (fenced: it never comes back into the job), and a new
generation is written: the spare's host at the lost rank's index, the same world size, a new
store, the lost host's address for the survivors to shut their sockets to. A spare lost while
it joins is a lost rank like any other: the next spare takes its place. With no spare left
the generation is `paused`: the survivors wait, and `add_spare` resumes the job; or, where
the job allows it (`min_ranks`) and enough survive, the job goes on shrunk: a generation of
the survivors alone, their ranks renumbered in order (rank 2 of 3 becomes rank 1 of 2 when
rank 1 is lost), each drawing the batches of its new rank, the gradients averaged over the
smaller world, a sharded optimizer (ZeRO-1) partitioned again (see docs/spares.md, "Shrinking").
Once spares are ready again (added, or drained hosts back from their audit) a shrunk job grows
back: a generation with them at the next indices, up to its first size.

A rank whose GPU reports a critical fault (`gpu_fault(host)`: a critical XID from NVML, say)
is replaced before it crashes: a spare is put at its index in a new generation, every member
joins it at its next step boundary, the faulty rank is drained (it waits) and fenced once the
new generation has formed. With no spare left it runs on until it fails.
Every replaced rank's host is drained: given no work until it passes an audit (train.readmit).
"""

from __future__ import annotations

import importlib.util
import json
import os
import shutil
import signal
import subprocess
import sys
import threading
import time
from collections.abc import Callable
from dataclasses import dataclass, replace
from pathlib import Path
from typing import Any

from clockfabric.errors import ClockfabricError
from clockfabric.lab import process
from clockfabric.lab.exec import command
from clockfabric.lab.job import free_port
from clockfabric.lab.state import Lab
from clockfabric.train import control, report
from clockfabric.train.detect import DETECT_S, slow_step, verdict
from clockfabric.train.heartbeat import stopped
from clockfabric.train.readmit import INTERVAL_S, HostAudit, Readmission

# A generation not joined by every member is issued again, with a new store, once a member
# says its rendezvous failed (every member alive), or by this many seconds after it was written.
REISSUE_S = 15.0


@dataclass
class Member:
    host: str
    beat: str
    proc: subprocess.Popen
    log: Path


class TrainJob:
    def __init__(self, lab: Lab, hosts: list[str], spares: list[str], argv: list[str], folder: Path | str, *,
                 detect_s: float = DETECT_S, on_event: Callable[[dict[str, Any]], None] | None = None,
                 gpu_fault: Callable[[str], str | None] | None = None, min_ranks: int | None = None,
                 audit: HostAudit | None = None, readmit_s: float = INTERVAL_S):
        check(lab, hosts, spares, argv)
        if min_ranks is not None and not 1 <= min_ranks <= len(hosts):
            raise ClockfabricError(f"--min-ranks {min_ranks}: give 1 to {len(hosts)} (the job's ranks)")
        self.min_ranks = min_ranks  # the fewest ranks the job may go on with, no spare left; None: pause
        self.lab, self.argv, self.folder = lab, list(argv), Path(folder)
        self.detect_s, self.on_event, self.gpu_fault = detect_s, on_event, gpu_fault
        self.draining: list[Member] = []  # replaced on a GPU fault, fenced once their successor joined
        self.initial_hosts, self.initial_spares = list(hosts), list(spares)
        self.ranks: list[Member] = []
        self.spares: list[Member] = []
        self.retired: list[Member] = []
        self.vacant: list[int] = []  # ranks lost with no spare to take them: the job is paused
        self.events: list[dict[str, Any]] = []
        self.lock = threading.RLock()  # events are told under it, from the tick and the readmission thread
        self.stopping = threading.Event()
        # drained hosts (None: no audit, they stay drained), audited against the ranks' hosts
        self.readmission = Readmission(audit, self._return, self.event, lambda: [m.host for m in self.ranks],
                                       interval_s=readmit_s)
        self.watcher = threading.Thread(target=self._watch, name="train coordinator", daemon=True)
        self.port = 0
        self.awaiting: int | None = None  # a generation whose members have not all joined yet
        self.issued = 0.0  # when the awaited generation was written
        self.stopped: str | None = None  # why the ranks stopped (a lost ZeRO-1 shard, no checkpoint)

    # ---- starting ----------------------------------------------------------------------------
    def start(self) -> TrainJob:
        (self.folder / "beat").mkdir(parents=True, exist_ok=True)
        for old in [*self.folder.glob("*.jsonl"), *self.folder.glob("beat/*"), *self.folder.glob("store.*")]:
            old.unlink()
        for old in [*self.folder.glob("ready.*"), *self.folder.glob("failed.*")]:
            shutil.rmtree(old)
        self.port = free_port(self.lab, self.initial_hosts[0])
        try:
            self.ranks = [self._spawn(h, rank) for rank, h in enumerate(self.initial_hosts)]
            self.gen = control.Generation(0, control.RUNNING, list(self.initial_hosts),
                                          [m.beat for m in self.ranks], str(self.folder / "store.0"))
            control.write_generation(self.folder, self.gen)
            self.spares = [self._spawn(h, None) for h in self.initial_spares]
        except BaseException:
            self.stop()
            raise
        self.event("started", hosts=self.initial_hosts, spares=self.initial_spares)
        self.watcher.start()
        if self.readmission.audit is not None:
            self.readmission.start()
        return self

    def _spawn(self, host: str, rank: int | None) -> Member:
        address = str(self.lab.topology.hosts[host].address)
        beat = f"{address}:{self.port}"
        log = self.folder / (f"rank{rank}.jsonl" if rank is not None else f"spare-{host}.jsonl")
        argv = [sys.executable, "-m", "clockfabric.lab.job", "--lab", self.lab.name, "--hostname", address,
                "--", *self.argv, "--log", str(log)]
        env = os.environ | {control.FOLDER_ENV: str(self.folder), control.HOST_ENV: host, control.BEAT_ENV: beat,
                            "PYTHONUNBUFFERED": "1"}
        env.pop("GLOO_SOCKET_IFNAME", None)  # gloo binds to the hostname, the host's stable address
        env |= {"RANK": str(rank)} if rank is not None else {control.SPARE_ENV: "1"}
        proc = process.spawn(command(self.lab, host, argv), log=log.with_suffix(".out"), env=env,
                             new_session=True, stdin=subprocess.DEVNULL)
        deadline = time.monotonic() + 10
        while proc.poll() is None and not _runs_rank(proc.pid) and time.monotonic() < deadline:
            time.sleep(0.005)  # registered once exec'd, as lab.job does: the lab knows it by its command line
        self.lab.register(proc.pid, f"train {'rank ' + str(rank) if rank is not None else 'spare'} on {host}")
        return Member(host, beat, proc, log)

    def add_spare(self, host: str) -> None:
        """A host joins the spare pool at run time (a paused job resumes once it is ready)."""
        if why := self.readmission.why(host):
            raise ClockfabricError(f"{host} is drained ({why}): it rejoins the spares once `clockfabric audit` passes")
        check(self.lab, [], [host], self.argv, taken=[m.host for m in self.members()])
        with self.lock:
            self.spares.append(self._spawn(host, None))
        self.event("spare added", host=host)

    # ---- watching ----------------------------------------------------------------------------
    def _watch(self) -> None:
        while not self.stopping.wait(0.05):
            with self.lock:
                self.tick()

    def tick(self) -> None:
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
                and (slow := slow_step(self.folder, self.gen.number, now, self.detect_s)):
            self.event("slow step", generation=self.gen.number, why=slow)
            self._fill()  # the same members: each redoes its failed step from its own state or the most advanced
        elif self.awaiting is None and len(self.ranks) < len(self.initial_hosts) and self._ready_spares():
            self._grow()
        elif self.gpu_fault and self.awaiting is None:
            self._replace_faulty(now)

    def lost(self, rank: int, member: Member, now: float) -> str | None:
        peers = [control.read_json(control.beat_path(self.folder, m.host))
                 for i, m in enumerate(self.ranks) if i != rank and i not in self.vacant]
        return verdict(rank, member.proc.poll(), control.read_json(control.beat_path(self.folder, member.host)),
                       [p for p in peers if p], member.beat, now, self.detect_s, stopped=stopped(member.proc.pid))

    def _replace(self, lost: list[tuple[int, str]], now: float) -> None:
        beats = []
        for rank, why in lost:
            member = self.ranks[rank]
            self.event("detected", rank=rank, host=member.host, why=why, time=now)
            _kill(member.proc)  # fenced: a frozen or cut-off rank never rejoins the old group
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
            control.write_generation(self.folder, self.gen)
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
        failed = next((r for r in report.records(self.folder)
                       if r.get("event") == "join failed" and r.get("generation") == self.awaiting), None)
        if failed:
            return f"rank {failed.get('rank')}'s rendezvous failed: {failed.get('error', '')[:120]}"
        if now - self.issued > REISSUE_S:
            return f"not every member joined within {REISSUE_S:.0f} s"
        return None

    def _ready_spares(self) -> list[Member]:
        return [s for s in self.spares
                if s.proc.poll() is None and control.read_json(control.beat_path(self.folder, s.host))]

    def _fill(self) -> None:
        """A spare for every vacant rank, in a new generation; none taken unless all can be."""
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
        keep = [rank for rank in range(len(self.ranks)) if rank not in self.vacant]
        self.ranks = [self.ranks[rank] for rank in keep]
        hosts, beats = [self.gen.hosts[r] for r in keep], [self.gen.beats[r] for r in keep]
        self.event("shrunk", ranks=sorted(self.vacant), world=len(keep), hosts=hosts,
                   why="no spare left: the job goes on with the survivors")
        self.vacant = []
        self._issue(hosts, beats)

    def _grow(self) -> None:
        """A shrunk job and ready spares (added, or drained hosts back from their audit): a
        generation with them at the next indices, up to the job's first size; the members join
        it at their next step boundary."""
        joining = self._ready_spares()[:len(self.initial_hosts) - len(self.ranks)]
        for spare in joining:
            self.spares.remove(spare)
            self.ranks.append(spare)
        hosts, beats = [*self.gen.hosts, *(s.host for s in joining)], [*self.gen.beats, *(s.beat for s in joining)]
        self.event("grown", hosts=[s.host for s in joining], world=len(hosts),
                   why="spares ready for a shrunk job: it grows back")
        self._issue(hosts, beats)

    def _issue(self, hosts: list[str], beats: list[str]) -> None:
        """A new running generation, awaited until every member joined it."""
        number = self.gen.number + 1  # self.gen is the last written: running, paused or not joined by all
        self.gen = replace(self.gen, number=number, state=control.RUNNING, hosts=hosts, beats=beats,
                           store=str(self.folder / f"store.{number}"))
        control.write_generation(self.folder, self.gen)
        self.event("generation", number=number, hosts=hosts)
        self.awaiting, self.issued = number, time.time()

    def _joined(self) -> None:
        """Once every member joined the awaited generation: what was carried, and from which step."""
        recs = report.records(self.folder)
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
            _kill(member.proc)  # fenced: its successor holds the rank now
            self._drain(member.host, "its GPU reported a critical fault")
        self.retired += self.draining
        self.draining = []

    # ---- drained hosts -----------------------------------------------------------------------
    def _drain(self, host: str, why: str) -> None:
        self.readmission.drain(host, why)
        self.event("drained", host=host, why=why)

    def _return(self, host: str) -> None:
        """host passed the audit: a spare again, with nothing of its lost process left to mislead."""
        with self.lock:
            if self.stopping.is_set():
                return  # the job is ending: no process is started that stop() would not see
            control.beat_path(self.folder, host).unlink(missing_ok=True)  # the lost process's last report
            beat = f"{self.lab.topology.hosts[host].address}:{self.port}"
            # the next generation written does not fence it: it may join again (the survivors fenced it once)
            self.gen = replace(self.gen, lost=[b for b in self.gen.lost if b != beat])
            self.spares.append(self._spawn(host, None))
            self.event("returned to spare pool", host=host)

    # ---- ending ------------------------------------------------------------------------------
    def members(self) -> list[Member]:
        return [*self.ranks, *self.spares, *self.retired, *self.draining]

    def finished(self) -> bool:
        return not self.vacant and all(m.proc.poll() == 0 for m in self.ranks)

    def wait(self, timeout_s: float) -> bool:
        """Whether every rank completed within timeout_s (spares are then stopped); False at once
        if the ranks stopped (`stopped` says why)."""
        deadline = time.monotonic() + timeout_s
        while time.monotonic() < deadline and not self.stopped:
            if self.finished():
                self.event("completed")
                return True
            time.sleep(0.1)
        return False

    def stop(self) -> None:
        self.stopping.set()
        self.readmission.stop()
        if self.watcher.is_alive():
            self.watcher.join(5)
        with self.lock:  # a host returning now is a member, or sees the job stopping
            members = self.members()
        for m in members:
            if m.proc.poll() is None:
                _kill(m.proc)
        process.stop([m.proc for m in members], grace_s=1)

    def event(self, kind: str, **fields: Any) -> None:
        record = {"event": kind, "time": time.time(), **fields}
        with self.lock:
            self.events.append(record)
            with open(self.folder / "events.jsonl", "a") as f:
                f.write(json.dumps(record) + "\n")
            if self.on_event:
                self.on_event(record)


def _kill(proc: subprocess.Popen) -> None:
    try:
        os.killpg(proc.pid, signal.SIGKILL)  # a stopped process dies of SIGKILL too
    except (ProcessLookupError, PermissionError):
        pass


def _runs_rank(pid: int) -> bool:
    try:
        argv = Path(f"/proc/{pid}/cmdline").read_bytes().split(b"\0")
    except OSError:
        return False
    return argv[1:3] == [b"-m", b"clockfabric.lab.job"]


def check(lab: Lab, hosts: list[str], spares: list[str], argv: list[str], taken: list[str] | None = None) -> None:
    """One clear line for a job that cannot start as given (taken: hosts the job has used, lost ones too)."""
    named = [*hosts, *spares]
    for h in named:
        if h not in lab.topology.hosts:
            raise ClockfabricError(f"{h!r} is not a host of lab {lab.name}; `clockfabric lab status` lists them")
    if len(set(named)) != len(named) or set(named) & set(taken or []):
        raise ClockfabricError("each host runs one rank or one spare: a host is named twice, or was lost (drained)")
    if taken is None and len(hosts) < 2:
        raise ClockfabricError("an elastic job needs at least two ranks: a lost rank's state comes from a peer")
    if not argv or not Path(argv[0]).is_file():
        raise ClockfabricError(f"no script {argv[0] if argv else ''!r}: give a Python script and its arguments")
    if importlib.util.find_spec("torch") is None:
        raise ClockfabricError("torch is not installed; run make setup")
