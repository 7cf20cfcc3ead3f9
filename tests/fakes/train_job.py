"""A training job's coordinator over sleeping processes standing in for its ranks and spares:
no lab, no torch in the members. Host N of `hosts` (from 0) has the address 10.0.0.N+1; every
member's beat address is its host's, port PORT. The board is a FileStore in the test's folder."""

from __future__ import annotations

import sys
import time
from pathlib import Path

import pytest

from clockfabric.hosts.local import LocalHost
from clockfabric.train import control
from clockfabric.train.coordinator import Coordinator, Member

PORT = 9


def file_board(folder: Path) -> control.Board:
    """A board on a FileStore in `folder`; the calling test is skipped where torch is absent (the
    board is a torch.distributed store)."""
    pytest.importorskip("torch", reason="torch is not installed (make setup installs the job extra)")
    return control.Board.open(f"file://{folder / 'board'}")


def coordinator(folder: Path, hosts: list[str], ranks: list[str], spares: list[str], **options) -> Coordinator:
    """The coordinator once generation 0 is written, running `ranks` with `spares` waiting; a
    spare started later (a host returned to the pool) is a stand-in too. `options` go to Coordinator."""
    board = file_board(folder)
    job = Coordinator(board, len(ranks), folder / "job", **options)
    job.folder.mkdir(parents=True)
    job.addresses = {h: f"10.0.0.{i + 1}" for i, h in enumerate(hosts)}  # type: ignore[attr-defined]
    job.on_return = lambda host: stand_in(job, host, None)
    for rank, h in enumerate(ranks):
        stand_in(job, h, rank)
    for h in spares:
        stand_in(job, h, None)
    job.tick()
    assert job.gen is not None and job.gen.number == 0 and [e["event"] for e in job.events] == ["started"]
    job.events.clear()  # the tests follow what happens from generation 0 on
    return job


def stand_in(job: Coordinator, host: str, rank: int | None, torch: str = "") -> Member:
    """A sleeping process as `host`'s member, registered with its first report written: it is
    admitted at the coordinator's next tick."""
    address = job.addresses[host]  # type: ignore[attr-defined]
    proc = LocalHost(host, address).spawn([sys.executable, "-c", "import time; time.sleep(60)"])
    member = Member(host, proc=proc, local=True)
    job.known[host] = member
    job.board.write_report(host, {"name": host, "beat": f"{address}:{PORT}", "time": time.time(), "rank": rank,
                                  "done": False, "heard": {}})
    job.board.register(host, rank, torch)
    return member


def lose(member: Member) -> None:
    assert member.proc is not None
    member.proc.signal(9)
    member.proc.wait(5)


def kinds(job: Coordinator) -> list[str]:
    return [e["event"] for e in job.events]
