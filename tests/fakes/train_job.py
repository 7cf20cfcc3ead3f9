"""A training job's coordinator (TrainJob) over sleeping processes standing in for its ranks and
spares: no lab, no torch. Host N of `hosts` (from 0) has the address 10.0.0.N+1; every member's
beat address is its host's, port PORT."""

from __future__ import annotations

import subprocess
import sys
import time
from pathlib import Path
from types import SimpleNamespace

from clockfabric.train import control
from clockfabric.train.launch import Member, TrainJob

PORT = 9


def coordinator(folder: Path, hosts: list[str], ranks: list[str], spares: list[str], **options) -> TrainJob:
    """The coordinator of generation 0, running `ranks` with `spares` waiting; a spare it starts
    later (a host returned to the pool) is a stand-in too. `options` go to TrainJob."""
    script = folder / "train.py"
    script.write_text("")
    addresses = {h: SimpleNamespace(address=f"10.0.0.{i + 1}") for i, h in enumerate(hosts)}
    lab = SimpleNamespace(name="t", topology=SimpleNamespace(hosts=addresses))
    job = TrainJob(lab, ranks, spares, [str(script)], folder / "job", **options)  # type: ignore[arg-type]
    job.port = PORT
    (job.folder / "beat").mkdir(parents=True)
    job._spawn = lambda host, rank: stand_in(job, host, rank)  # type: ignore[method-assign]  # no lab
    job.ranks = [stand_in(job, h, rank) for rank, h in enumerate(ranks)]
    job.spares = [stand_in(job, h, None) for h in spares]
    job.gen = control.Generation(0, control.RUNNING, list(ranks), [m.beat for m in job.ranks], "store.0")
    control.write_generation(job.folder, job.gen)
    return job


def stand_in(job: TrainJob, host: str, rank: int | None) -> Member:
    """A sleeping process as `host`'s member, its first beat written."""
    proc = subprocess.Popen([sys.executable, "-c", "import time; time.sleep(60)"], start_new_session=True)
    member = Member(host, f"{job.lab.topology.hosts[host].address}:{PORT}", proc, job.folder / f"{host}.jsonl")
    control.write_json(control.beat_path(job.folder, host),
                       {"name": host, "time": time.time(), "rank": rank, "done": False, "heard": {}})
    return member


def lose(member: Member) -> None:
    member.proc.kill()
    member.proc.wait()


def kinds(job: TrainJob) -> list[str]:
    return [e["event"] for e in job.events]
