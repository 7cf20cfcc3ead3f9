"""The failures the spares benchmark injects, the same for every way of running the job.

- `killed`: the rank's process gets SIGKILL once every rank completed the step (a GPU fallen
  off the bus takes its process with it), so the kill lands between steps or early in one;
- `killed mid-step`: SIGKILL half a median step after the rank's last step ended, while its
  step is in its forward or backward and its peers wait in the gradient all-reduce for it;
- `isolated`: every link of the rank's host down (both NICs), the process left running;
- `frozen`: SIGSTOP (a hung GPU or kernel): the process holds its sockets and says nothing.

`heal` undoes what outlives the run on the shared lab (links back up; a stopped process is
killed with the job).
"""

from __future__ import annotations

import os
import signal
import statistics
import time
from collections.abc import Callable
from pathlib import Path
from typing import Any

from clockfabric.errors import ClockfabricError
from clockfabric.lab import impair
from clockfabric.lab.state import Lab
from clockfabric.train import report
from clockfabric.train.report import read_log

KILLED, MID_STEP, ISOLATED, FROZEN = "killed", "killed mid-step", "isolated", "frozen"
KINDS = (KILLED, MID_STEP, ISOLATED, FROZEN)
HUNG = (FROZEN,)  # the targets: <= 10 s for a hung rank, <= 5 s for the others


def wait_for_step(records: Callable[[], list[dict[str, Any]]], ranks: int, step: int, *,
                  timeout_s: float = 120, alive: Callable[[], bool] = lambda: True) -> list[dict[str, Any]]:
    """Poll until each of `ranks` ranks completed `step`; the records then."""
    deadline = time.monotonic() + timeout_s
    while True:
        recs = records()
        done = report.steps_by_rank(recs)
        if len(done) >= ranks and min(max(s) for s in done.values()) >= step:
            return recs
        if time.monotonic() > deadline or not alive():
            raise ClockfabricError(f"the job never reached step {step} to fail it at")
        time.sleep(0.01)


def inject(lab: Lab, kind: str, host: str, pid: int, log: Path) -> float:
    """Fail the rank on host (process pid, its step records in log); when the failure began."""
    if kind == MID_STEP:
        own = [r for r in read_log(log) if "duration_s" in r]
        if own:
            last = own[-1]
            half = statistics.median(r["duration_s"] for r in own) / 2
            time.sleep(max(0.0, last["start"] + last["duration_s"] + half - time.time()))
    if kind in (KILLED, MID_STEP):
        at = time.time()
        os.kill(pid, signal.SIGKILL)
        return at
    if kind == FROZEN:
        at = time.time()
        os.kill(pid, signal.SIGSTOP)
        return at
    if kind == ISOLATED:
        changed = [impair.set_link(lab, link, False) for link in host_links(lab, host)]
        return min(changed) / 1e9
    raise ClockfabricError(f"no failure kind {kind!r}; the kinds are {', '.join(KINDS)}")


def heal(lab: Lab, kind: str, host: str) -> None:
    if kind == ISOLATED:
        for link in host_links(lab, host):
            impair.set_link(lab, link, True)


def host_links(lab: Lab, host: str) -> list:
    return [link for link in lab.topology.links if host in (link.a.node, link.b.node)]
