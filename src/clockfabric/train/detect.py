"""Whether a rank is lost: its exit, its own heartbeat report, its peers' reports of it, and
whether its process is stopped (frozen)."""

from __future__ import annotations

from typing import Any

DETECT_S = 2.0
# A silent report alone is a loss only after this many detection times: a running process whose
# heartbeat thread waits for Python's lock (a garbage collection, DDP's wrap, on a loaded
# machine) was silent for over 2 s. A stopped one (SIGSTOP: frozen) is lost after detect_s.
HUNG_WAITS = 3


def verdict(rank: int, exit_code: int | None, report: dict[str, Any] | None, peers: list[dict[str, Any]],
            beat: str, now: float, detect_s: float, stopped: bool = False) -> str | None:
    """Why the rank is lost (None if it is not): its exit, its own report, its peers' reports,
    and whether its process is stopped."""
    if exit_code is not None:
        return None if exit_code == 0 else f"its process exited with status {exit_code}"
    if report is None or report.get("rank") != rank or report.get("done"):
        return None  # still starting, or through its loop and exiting
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
