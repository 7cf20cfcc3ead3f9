"""What a job's logs say: the steps each rank completed, the groups formed, recovery times."""

from __future__ import annotations

import json
from pathlib import Path
from typing import Any


def read_log(path: Path) -> list[dict]:
    """A member's JSON lines; a torn last line (the process was killed mid-write) is skipped."""
    out: list[dict] = []
    try:
        text = Path(path).read_text()
    except FileNotFoundError:
        return out
    for line in text.splitlines():
        try:
            rec = json.loads(line)
        except json.JSONDecodeError:
            continue
        if isinstance(rec, dict):
            out.append(rec)
    return out


def records(folder: Path) -> list[dict[str, Any]]:
    """Every rank's and spare's JSON lines, in time order (a torn last line is skipped)."""
    out = [rec for path in sorted(Path(folder).glob("*.jsonl")) if path.name != "events.jsonl"
           for rec in read_log(path)]
    return sorted(out, key=lambda r: r.get("start", r.get("time", 0.0)))


def steps_by_rank(recs: list[dict[str, Any]]) -> dict[int, list[int]]:
    """rank -> the steps it completed, in order, whichever host held the rank."""
    out: dict[int, list[int]] = {}
    for r in recs:
        if "step" in r and "duration_s" in r:
            out.setdefault(r["rank"], []).append(r["step"])
    return out


def job_steps(recs: list[dict[str, Any]]) -> list[int]:
    """The steps the job completed: each completed by some rank, its state then carried to all."""
    return sorted({s for steps in steps_by_rank(recs).values() for s in steps})


def digests(recs: list[dict[str, Any]]) -> dict[int, str]:
    return {r["rank"]: r["params_sha256"] for r in recs if r.get("outcome") == "completed"}


def recovery_s(recs: list[dict[str, Any]], failed_at: float) -> float | None:
    """Failure -> next completed step: from failed_at to when every rank has completed a step
    that started after it (None if the job took none)."""
    ends: dict[int, float] = {}
    for r in recs:
        if "duration_s" in r and r["start"] > failed_at and r["rank"] not in ends:
            ends[r["rank"]] = r["start"] + r["duration_s"]
    ranks = {r["rank"] for r in recs if "duration_s" in r}
    return max(ends.values()) - failed_at if ends and set(ends) == ranks else None


def failed_s(recs: list[dict[str, Any]], failed_at: float) -> list[float]:
    """Failure -> each survivor's failed step, sorted: when each learned of it. Gloo does not fail
    a send already in flight when its connection fails: a survivor caught sending to the lost
    rank waits out the collective timeout, however soon the others learned (docs/spares.md)."""
    return sorted(r["time"] - failed_at for r in recs if r.get("event") == "step failed" and r["time"] > failed_at)
