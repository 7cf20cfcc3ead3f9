"""The job folder: how the coordinator and the ranks tell each other things.

The folder is on the machine's filesystem, which every lab namespace shares, so it works the
same for every rank whatever happens to the network. The coordinator writes the generation
(`generation.json`: who holds each rank, the store to rendezvous in, which hosts were lost);
each rank and spare writes its heartbeat report (`beat/NAME.json`: when, and when it last
heard each peer over the network) and, when it enters a generation, a mark
(`ready.N/RANK`): the members form the group only once every mark is there, so a member lost
before that never leaves the others blocked in the group's rendezvous. Files are replaced
atomically, so a reader never sees half.
"""

from __future__ import annotations

import json
import os
import time
from dataclasses import asdict, dataclass, field
from pathlib import Path
from typing import Any

FOLDER_ENV = "CLOCKFABRIC_TRAIN_DIR"
HOST_ENV = "CLOCKFABRIC_TRAIN_HOST"  # the lab host a rank or spare runs on
BEAT_ENV = "CLOCKFABRIC_TRAIN_BEAT"  # address:port its heartbeats are sent from and to
SPARE_ENV = "CLOCKFABRIC_TRAIN_SPARE"  # set on a spare: it waits to be given a rank
RUNNING, PAUSED, DONE = "running", "paused", "done"


@dataclass
class Generation:
    number: int
    state: str  # running | paused (a rank is lost and no spare is left) | done
    hosts: list[str]  # rank i runs on hosts[i]
    beats: list[str]  # rank i's heartbeat address:port
    store: str  # the FileStore path this generation rendezvouses in
    lost: list[str] = field(default_factory=list)  # heartbeat addresses of every host lost so far

    @property
    def world(self) -> int:
        return len(self.hosts)


def write_json(path: Path, data: dict[str, Any]) -> None:
    tmp = path.with_name(f".{path.name}.{os.getpid()}")
    tmp.write_text(json.dumps(data))
    os.replace(tmp, path)


def read_json(path: Path) -> dict[str, Any] | None:
    try:
        return json.loads(path.read_text())
    except (FileNotFoundError, json.JSONDecodeError):
        return None


def write_generation(folder: Path, gen: Generation) -> None:
    write_json(folder / "generation.json", asdict(gen))


def read_generation(folder: Path) -> Generation | None:
    data = read_json(folder / "generation.json")
    return Generation(**data) if data else None


def wait_generation(folder: Path, after: int, timeout_s: float, poll_s: float = 0.02) -> Generation:
    """The first running generation numbered above `after` (a paused one is waited through)."""
    deadline = time.monotonic() + timeout_s
    while time.monotonic() < deadline:
        gen = read_generation(folder)
        if gen is not None and gen.number > after and gen.state != PAUSED:
            return gen
        time.sleep(poll_s)
    raise TimeoutError(f"no new generation of the job within {timeout_s:.0f} s (no spare came)")


def superseded(folder: Path, number: int) -> bool:
    """Whether a generation numbered above `number` was issued (paused or not): generation
    `number`'s group is over, whatever it is still doing."""
    gen = read_generation(folder)
    return gen is not None and gen.number > number


def beat_path(folder: Path, name: str) -> Path:
    return folder / "beat" / f"{name}.json"


def mark_ready(folder: Path, number: int, rank: int) -> None:
    ready = folder / f"ready.{number}"
    ready.mkdir(exist_ok=True)
    (ready / str(rank)).touch()


def mark_failed(folder: Path, number: int, rank: int, **detail: Any) -> None:
    """Rank's step of generation `number` failed (its all-reduce, its group): the coordinator
    issues the generation again if, its detection time later, no member is lost."""
    failed = folder / f"failed.{number}"
    failed.mkdir(exist_ok=True)
    write_json(failed / f"{rank}.json", {"rank": rank, "time": time.time(), **detail})


def failed_steps(folder: Path, number: int) -> list[dict[str, Any]]:
    """The marks of generation `number`'s failed steps, first first (none: a single stat)."""
    failed = folder / f"failed.{number}"
    if not failed.is_dir():
        return []
    marks = [read_json(path) for path in failed.glob("*.json")]
    return sorted((m for m in marks if m), key=lambda m: m["time"])


def wait_ready(folder: Path, gen: Generation, timeout_s: float, poll_s: float = 0.02) -> Generation | None:
    """None once every member of gen marked itself ready; a newer generation if one came first
    (a member was lost before the group formed: the rendezvous would wait for it in vain)."""
    deadline = time.monotonic() + timeout_s
    ready = folder / f"ready.{gen.number}"
    while time.monotonic() < deadline:
        if all((ready / str(rank)).exists() for rank in range(gen.world)):
            return None
        newer = read_generation(folder)
        if newer is not None and newer.number > gen.number and newer.state != PAUSED:
            return newer
        time.sleep(poll_s)
    raise TimeoutError(f"generation {gen.number}'s members did not all arrive within {timeout_s:.0f} s")
