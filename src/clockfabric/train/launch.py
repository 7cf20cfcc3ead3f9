"""A job whose members the coordinator starts itself, on hosts reached through the hosts seam.

Rank i starts on ranks[i]; each spare host runs the same script as a spare, which imports
torch and waits, so taking a rank costs no start-up. The hosts may be local, lab hosts or
real ones over ssh (`clockfabric train run --fleet`): the coordinator only spawns, signals and
judges them (train.coordinator). Under a launcher that starts the members itself (torchrun,
srun) the coordinator runs alone instead (`clockfabric train coordinator`).

The board is a FileStore in the job's folder where every host shares this machine's
filesystem (a lab), else a TCPStore this process serves on `serve_on` (an address every host
reaches).
"""

from __future__ import annotations

import importlib.util
import sys
from collections.abc import Callable, Mapping
from pathlib import Path
from typing import Any

from clockfabric.errors import ClockfabricError
from clockfabric.hosts import Host
from clockfabric.train import control
from clockfabric.train.coordinator import Coordinator, Member


class TrainJob(Coordinator):
    def __init__(self, hosts: Mapping[str, Host], ranks: list[str], spares: list[str], argv: list[str],
                 folder: Path | str, *, serve_on: str | None = None,
                 runner: Callable[[str], list[str]] = lambda host: [sys.executable],
                 env: dict[str, str] | None = None, local: bool = True, **options: Any):
        check(hosts, ranks, spares, argv)
        folder = Path(folder)
        url = f"tcp://{serve_on}:0" if serve_on else f"file://{folder / 'board'}"
        if not serve_on and (folder / "board").exists():
            (folder / "board").unlink()  # a FileStore keeps what an earlier run left in it
        super().__init__(control.Board.open(url, serve=bool(serve_on)), len(ranks), folder, **options)
        self.hosts, self.argv, self.runner, self.local = hosts, list(argv), runner, local
        self.env = dict(env or {})
        self.initial_hosts, self.initial_spares = list(ranks), list(spares)
        self.preferred = list(spares)
        self.on_return = self._respawn

    def start(self) -> TrainJob:
        self.folder.mkdir(parents=True, exist_ok=True)
        for old in [*self.folder.glob("*.jsonl"), *self.folder.glob("*.out")]:
            old.unlink()
        try:
            for rank, host in enumerate(self.initial_hosts):
                self._spawn(host, rank)
            for host in self.initial_spares:
                self._spawn(host, None)
        except BaseException:
            self.stop()
            raise
        super().start()
        return self

    def _spawn(self, host: str, rank: int | None) -> Member:
        log = self.folder / (f"rank{rank}.jsonl" if rank is not None else f"spare-{host}.jsonl")
        env = self.env | {control.STORE_ENV: self.board.url, control.NAME_ENV: host,
                          control.BEAT_ENV: self.hosts[host].address, "PYTHONUNBUFFERED": "1"}
        env |= {"RANK": str(rank)} if rank is not None else {control.SPARE_ENV: "1"}
        proc = self.hosts[host].spawn([*self.runner(host), *self.argv, "--log", str(log)], env=env,
                                      log=log.with_suffix(".out"))
        member = Member(host, proc=proc, log=log, local=self.local)
        with self.lock:
            self.known[host] = member
        return member

    def add_spare(self, host: str) -> None:
        """A host joins the spare pool at run time (a paused job resumes once it is ready)."""
        if why := self.readmission.why(host):
            raise ClockfabricError(f"{host} is drained ({why}): it rejoins the spares once `clockfabric audit` passes")
        check(self.hosts, [], [host], self.argv, taken=[m.host for m in self.members()])
        self._spawn(host, None)

    def _respawn(self, host: str) -> None:
        """A drained host passed its audit: a spare there again."""
        self._spawn(host, None)

    def stop(self) -> None:
        super().stop()
        with self.lock:  # a host returning now is a member, or sees the job stopping
            procs = [m.proc for m in self.members() if m.proc is not None]
        for proc in procs:
            proc.signal(9)
        for proc in procs:
            proc.wait(5)


def check(hosts: Mapping[str, Host], ranks: list[str], spares: list[str], argv: list[str],
          taken: list[str] | None = None) -> None:
    """One clear line for a job that cannot start as given (taken: hosts the job has used, lost ones too)."""
    named = [*ranks, *spares]
    for h in named:
        if h not in hosts:
            raise ClockfabricError(f"{h!r} is not a host of the fleet; known: {', '.join(sorted(hosts)) or 'none'}")
    if len(set(named)) != len(named) or set(named) & set(taken or []):
        raise ClockfabricError("each host runs one rank or one spare: a host is named twice, or was lost (drained)")
    if taken is None and len(ranks) < 2:
        raise ClockfabricError("an elastic job needs at least two ranks: a lost rank's state comes from a peer")
    if not argv or not Path(argv[0]).is_file():
        raise ClockfabricError(f"no script {argv[0] if argv else ''!r}: give a Python script and its arguments")
    if importlib.util.find_spec("torch") is None:
        raise ClockfabricError("torch is not installed; run make setup")

