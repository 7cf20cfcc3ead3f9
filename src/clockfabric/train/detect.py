"""Whether a rank is lost: its exit, its own heartbeat report, its peers' reports of it, and
whether its process is stopped (frozen); and whether a failed step was only slow (`slow_step`)."""

from __future__ import annotations

from typing import Any

from clockfabric.train import control

DETECT_S = 2.0
# A silent report alone is a loss only after this many detection times: a running process whose
# heartbeat thread waits for Python's lock (a garbage collection, DDP's wrap, on a loaded
# machine) was silent for over 2 s. A stopped one (SIGSTOP: frozen) is lost after detect_s.
HUNG_WAITS = 3


def verdict(rank: int, exit_code: int | None, report: dict[str, Any] | None, peers: list[dict[str, Any]],
            beat: str, now: float, detect_s: float, stopped: bool = False, gone: bool = False) -> str | None:
    """Why the rank is lost (None if it is not): its exit (gone: its connection to the
    coordinator closed, for a process the coordinator did not start), its own report, its
    peers' reports, and whether its process is stopped."""
    if exit_code is not None:
        return None if exit_code == 0 else f"its process exited with status {exit_code}"
    if report is not None and report.get("done"):
        return None  # through its loop and exiting
    if gone:
        return "its process ended: its connection to the coordinator closed"
    if report is None or report.get("rank") != rank:
        return None  # still starting
    silent = now - report["time"]
    if silent > detect_s and stopped:
        return f"no heartbeat report for {silent:.1f} s, its process stopped (frozen)"
    if silent > HUNG_WAITS * detect_s:
        return f"no heartbeat report for {silent:.1f} s (hung)"
    fresh = [p for p in peers if now - p["time"] <= detect_s]  # a frozen peer's view is no evidence
    deaf = [p for p in fresh if p["heard"].get(beat, 0.0) > detect_s]
    if fresh and len(deaf) > len(fresh) / 2:
        return f"{len(deaf)} of {len(fresh)} peers have not heard it for {detect_s:.1f} s (cut off)"
    return None


def slow_step(board: control.Board, number: int, now: float, detect_s: float) -> str | None:
    """Why generation `number` must be issued again with the same members (None if not): a
    member's step failed, and `detect_s` later no member was judged lost. A lost rank is judged
    within detect_s of its loss (a cut-off one too: its step fails only once it is fenced, or
    by the bound, which is above detect_s), so a step failed with nobody lost was slow: it ran
    into the all-reduce's bound (train.bound), and its members wait for a generation."""
    marks = board.failed_steps(number)
    if not marks or now - marks[0]["time"] < detect_s:
        return None
    fired = [m for m in marks if m.get("bound_s") is not None]
    if fired:
        bound = max(m["bound_s"] for m in fired)
        return (f"rank {fired[0]['rank']}'s step ran into the all-reduce's bound ({bound:.1f} s) and no member "
                "was lost: a slow step, redone in a new group of the same members")
    return f"rank {marks[0]['rank']}'s step failed and no member was lost: redone in a new group of the same members"
