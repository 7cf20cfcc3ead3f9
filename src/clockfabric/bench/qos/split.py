"""Where on h0's link the DDP job left capacity: inside its steps (the gaps between its bursts,
most shorter than a control period) and outside them (its start-up, its end), and what the bulk
job took of each. A thread reads h0's NIC byte counter (and, where the bulk job runs from the
start, the bulk job's wire bytes) a few times a second; the DDP job's first step's start and
last step's end cut the run in two, each counter read at the cut by interpolation."""

from __future__ import annotations

import threading
import time
from bisect import bisect_left
from collections.abc import Callable

SAMPLE_S = 0.25  # between readings: a quarter of a step, so a cut is off by a fraction of one


class LinkSampler:
    """(time, h0's NIC tx bytes, the bulk job's wire bytes) every SAMPLE_S, in a thread."""

    def __init__(self, tx: Callable[[], int], bulk: Callable[[], int] | None):
        self.tx, self.bulk = tx, bulk
        self.samples: list[tuple[float, int, int]] = []
        self._stop = threading.Event()
        self._thread = threading.Thread(target=self._run, name="qos-link-sampler", daemon=True)

    def __enter__(self) -> LinkSampler:
        self._read()
        self._thread.start()
        return self

    def __exit__(self, *exc: object) -> None:
        self._stop.set()
        self._thread.join()
        self._read()

    def _read(self) -> None:
        self.samples.append((time.time(), self.tx(), self.bulk() if self.bulk else 0))

    def _run(self) -> None:
        while not self._stop.wait(SAMPLE_S):
            self._read()


def _at(samples: list[tuple[float, int, int]], t: float) -> tuple[float, float]:
    """The two counters at time t, interpolated between the readings around it."""
    i = min(max(bisect_left([s[0] for s in samples], t), 1), len(samples) - 1)
    (t0, a0, b0), (t1, a1, b1) = samples[i - 1], samples[i]
    f = min(max((t - t0) / (t1 - t0), 0.0), 1.0) if t1 > t0 else 1.0
    return a0 + f * (a1 - a0), b0 + f * (b1 - b0)


def split(samples: list[tuple[float, int, int]], steps: list[tuple[float, float]], rate_bps: int) -> dict | None:
    """Inside and outside the steps' span: its seconds, the share of the link's capacity the rest
    of h0's traffic (the DDP job, the agents) left, and the bulk job's share of what was left.
    None where the samples do not cover the span."""
    if len(samples) < 2 or not steps:
        return None
    first, last = steps[0][0], steps[-1][0] + steps[-1][1]
    if not samples[0][0] <= first < last <= samples[-1][0]:
        return None
    (tx0, bulk0), (tx1, bulk1) = _at(samples, first), _at(samples, last)
    whole_s = samples[-1][0] - samples[0][0]
    parts = {"inside": (last - first, tx1 - tx0, bulk1 - bulk0),
             "outside": (whole_s - (last - first), samples[-1][1] - samples[0][1] - (tx1 - tx0),
                         samples[-1][2] - samples[0][2] - (bulk1 - bulk0))}
    out = {}
    for name, (seconds, tx, bulk) in parts.items():
        capacity = rate_bps / 8 * seconds
        left = capacity - (tx - bulk)
        out[name] = {"seconds": round(seconds, 2), "left": round(left / capacity, 4) if capacity > 0 else None,
                     "bulk_share": round(bulk / left, 4) if left > 0 else None}
    return out


def split_note(parts: dict | None) -> str:
    """Inside and outside the DDP job's steps: what h0's link had left, and the bulk job's share of it."""
    if not parts:
        return ""
    said = []
    for name, where in (("inside", "inside the DDP job's steps"), ("outside", "outside them (start-up, end)")):
        p = parts[name]
        if p["left"] is not None and p["bulk_share"] is not None:
            said.append(f"{where} ({p['seconds']:.0f} s) the rest of h0's traffic left {p['left']:.0%} of the "
                        f"link and the bulk job took {p['bulk_share']:.0%} of that")
    return "; " + "; ".join(said) if said else ""
