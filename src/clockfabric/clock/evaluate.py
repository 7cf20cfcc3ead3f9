"""Judge clock sync against the truth only an emulator knows: every host's virtual clock
(a lab's, handed in as a Truth).

Agents run on every host and publish their mappings; at each
sample instant (one real time for all hosts) a host's error is what its mapping says global time is, minus what
global time really is: the weighted mean of the ensemble's members' clocks, each read through the
mapping the frame the solver names gives it (clock.timescale). The NTP-style baseline (min-RTT/2 from the same
probes, composed hop by hop down a stratum tree from the reference, as NTP servers chain)
is judged at each of its samples' own instants: no extrapolation error is charged to it.
"""

from __future__ import annotations

import json
import time
from collections import deque
from pathlib import Path
from typing import Protocol

import numpy as np

from clockfabric.clock.mapping import Mapping
from clockfabric.clock.timescale import Frame
from clockfabric.clock.vclock import VirtualClock


class Truth(Protocol):
    def clocks(self) -> dict[str, VirtualClock]:
        """Every host's clock model now (re-read: a clock may have been stepped)."""
        ...


def read_states(state_dir: Path) -> dict[str, dict]:
    """Every agent's last published state, by host."""
    states = {}
    for f in state_dir.glob("*.json"):
        try:
            states[f.stem] = json.loads(f.read_text())
        except (OSError, ValueError):
            pass  # mid-replace: the next sample will have it
    return states


def real_time_of(clock: VirtualClock, local_ns: int) -> int:
    """The real instant at which a virtual clock read local_ns (its inverse, by iteration)."""
    real = local_ns
    for _ in range(4):
        real -= clock.local_ns(real) - local_ns
    return real


def heard_frame(states: dict[str, dict]) -> Frame | None:
    """The newest frame any agent heard from the solver (None: no solve yet)."""
    frames = [f for st in states.values() if (f := Frame.from_dict(st.get("frame")))]
    return max(frames, key=lambda f: f.t0_ns, default=None)


def frame_of(states: dict[str, dict], reference: str) -> Frame:
    """What global time is (clock.timescale): the newest frame any agent heard, else the
    reference's own clock."""
    return heard_frame(states) or Frame.single(reference, 0)


def frame_line(report: dict | None) -> str:
    """One line for a person: Sampler.frame_report's ensemble, since when, and its changes."""
    if report is None:
        return "global time: no frame yet (no solve reached the agents)"
    shares = sorted(report["members"].items(), key=lambda m: (-m[1], m[0]))
    who = ", ".join(f"{h} {s:.0%}" for h, s in shares)
    utc = "" if report.get("utc_ns") is None else f"; {report['utc_ns']:+,.0f} ns from UTC"
    moves = [f"{'+' + ' +'.join(c['joined']) if c['joined'] else ''}{' ' if c['joined'] and c['left'] else ''}"
             f"{'-' + ' -'.join(c['left']) if c['left'] else ''} at {c['at_s']:.1f} s" for c in report["changes"]]
    return (f"global time: ensemble of {len(shares)} ({who}), since {report['since_s']:.1f} s{utc}; "
            f"{'changes: ' + ', '.join(moves) if moves else 'no member change'}")


def global_truth(states: dict[str, dict], clocks: dict[str, VirtualClock], reference: str, real_ns: int) -> int:
    """What global time really is at one real instant: the frame's members' clocks, read through it."""
    frame = frame_of(states, reference)
    known = {h for h, _, _, _ in frame.members if h in clocks}
    if known != set(frame.shares()):  # a member the lab does not know: judge by the others
        kept = [m for m in frame.members if m[0] in known] or [(reference, 1.0, 0.0, 0.0)]
        total = sum(w for _, w, _, _ in kept)
        frame = Frame(frame.t0_ns, tuple((h, w / total, x, y) for h, w, x, y in kept))
    return frame.global_ns({h: clocks[h].local_ns(real_ns) for h in frame.shares()})


def ours_errors(states: dict[str, dict], clocks: dict[str, VirtualClock], reference: str,
                real_ns: int) -> dict[str, float | None]:
    """Each host's error at one real instant (None: no synced mapping yet): what its mapping
    says global time is, minus global time as the frame's members' clocks really read it."""
    truth = global_truth(states, clocks, reference, real_ns)
    out: dict[str, float | None] = {}
    for h, clock in clocks.items():
        m = (states.get(h) or {}).get("mapping")
        if not m or not m.get("synced"):
            out[h] = None
            continue
        out[h] = float(Mapping.from_dict(m).global_ns(clock.local_ns(real_ns)) - truth)
    return out


def ours_bounds(states: dict[str, dict], clocks: dict[str, VirtualClock], real_ns: int) -> dict[str, float]:
    """Each synced host's published bound at one real instant (mapping.bound_at)."""
    out = {}
    for h, clock in clocks.items():
        m = (states.get(h) or {}).get("mapping")
        if m and m.get("synced"):
            out[h] = Mapping.from_dict(m).bound_at(clock.local_ns(real_ns))
    return out


def unsynced_reasons(states: dict[str, dict]) -> dict[str, str]:
    """Hosts whose agent says it is not synced (or holds over), with the reason it gives."""
    return {h: f"{m.get('state')}: {m.get('reason', '')}" for h, st in states.items()
            if (m := st.get("mapping")) and m.get("state", "synced") != "synced"}


def coverage(judged: list[tuple[float, str, float, float]]) -> dict:
    """Of (seconds, host, error, bound) samples: the share with |error| <= bound, and the bound's
    median and p99."""
    if not judged:
        return {"coverage": None, "bound_p50_ns": None, "bound_p99_ns": None, "samples": 0}
    errors = np.abs(np.array([e for _, _, e, _ in judged]))
    bounds = np.array([b for _, _, _, b in judged])
    return {"coverage": float(np.mean(errors <= bounds)), "bound_p50_ns": float(np.percentile(bounds, 50)),
            "bound_p99_ns": float(np.percentile(bounds, 99)), "samples": len(judged)}


def ntp_errors(states: dict[str, dict], clocks: dict[str, VirtualClock], reference: str) -> dict[str, float | None]:
    """NTP-style errors: each edge's min-RTT/2 error at its own instant, summed down a
    breadth-first (stratum) tree from the reference."""
    edge_error: dict[tuple[str, str], float] = {}
    for h, st in states.items():
        for peer, pair in st.get("pairs", {}).items():
            ntp = pair.get("ntp")
            if not ntp or peer not in clocks or h not in clocks:
                continue
            real = real_time_of(clocks[h], ntp["at_ns"])
            true = clocks[peer].local_ns(real) - clocks[h].local_ns(real)
            e = ntp["offset_ns"] - true
            edge_error[(h, peer)] = e
            edge_error.setdefault((peer, h), -e)
    out: dict[str, float | None] = {h: None for h in clocks}
    out[reference] = 0.0
    queue = deque([(reference, 0.0)])  # a host placed, with its error
    while queue:
        h, at = queue.popleft()
        for (a, b), e in sorted(edge_error.items()):
            if a == h and out[b] is None:
                out[b] = at + e
                queue.append((b, at + e))
    return out


def since(series: list[tuple[float, str, float]], t0: float) -> list[float]:
    """The errors of a (seconds, host, error) series from t0 on."""
    return [e for t, _, e in series if t >= t0]


def summary(errors: list[float]) -> dict:
    if not errors:
        return {"p50_ns": None, "p99_ns": None, "max_ns": None, "samples": 0}
    a = np.abs(np.array(errors))
    return {"p50_ns": float(np.percentile(a, 50)), "p99_ns": float(np.percentile(a, 99)),
            "max_ns": float(a.max()), "samples": len(a)}


class Sampler:
    """Collects every host's error over time for ours and the NTP-style baseline."""

    def __init__(self, truth: Truth, state_dir: Path, reference: str, *, bound_ns: float = 1_000.0):
        self.truth, self.state_dir, self.reference, self.bound_ns = truth, state_dir, reference, bound_ns
        self.start = time.monotonic()
        self.ours: list[tuple[float, str, float]] = []  # (seconds since start, host, error)
        self.ntp: list[tuple[float, str, float]] = []
        self.judged: list[tuple[float, str, float, float]] = []  # (seconds, host, error, its bound)
        self.named: dict[str, tuple[float, str]] = {}  # host not synced now -> (since when, why)
        self.converged_s: float | None = None
        self.last_states: dict[str, dict] = {}
        self.frame: Frame | None = None  # global time's newest definition
        self.frames: list[tuple[float, frozenset[str]]] = []  # (seconds when first heard, the ensemble's members)

    def sample(self) -> dict[str, float | None]:
        clocks = self.truth.clocks()  # re-read: `lab clock step` may have changed one
        states = read_states(self.state_dir)
        self.last_states = states
        t = time.monotonic() - self.start
        if (frame := heard_frame(states)) is not None:
            self.frame = frame
            if not self.frames or self.frames[-1][1] != set(frame.shares()):
                self.frames.append((t, frozenset(frame.shares())))
        real = time.time_ns()
        errors = ours_errors(states, clocks, self.reference, real)
        bounds = ours_bounds(states, clocks, real)
        others = {h: e for h, e in errors.items() if h != self.reference}
        for h, e in others.items():
            if e is not None:
                self.ours.append((t, h, e))
                self.judged.append((t, h, e, bounds[h]))
        reasons = unsynced_reasons(states)
        for h in set(self.named) - set(reasons):
            del self.named[h]  # synced again: named only while it stays out
        for h, reason in reasons.items():
            self.named.setdefault(h, (t, reason))
        for h, e in ntp_errors(states, clocks, self.reference).items():
            if h != self.reference and e is not None:
                self.ntp.append((t, h, e))
        if (self.converged_s is None and others
                and all(e is not None and abs(e) <= self.bound_ns for e in others.values())):
            self.converged_s = t
        return errors

    def frame_report(self) -> dict | None:
        """Global time's frame at the last sample (None: no solve named one): the ensemble's
        members and their shares, since when it has had them (seconds into the run), and each
        change of membership before (hosts joined and left)."""
        if self.frame is None:
            return None
        changes = [{"at_s": t, "joined": sorted(b - a), "left": sorted(a - b)}
                   for (_, a), (t, b) in zip(self.frames, self.frames[1:], strict=False)]
        return {"kind": "ensemble", "members": self.frame.shares(), "anchor": self.frame.anchor,
                "t0_ns": self.frame.t0_ns, "utc_ns": self.frame.utc_ns, "since_s": self.frames[-1][0],
                "changes": changes}

    def timeline(self) -> list[dict]:
        """Per whole second: p99 and max |error| of ours across hosts."""
        by_second: dict[int, list[float]] = {}
        for t, _, e in self.ours:
            by_second.setdefault(int(t), []).append(e)
        return [{"second": s, **{k: v for k, v in summary(v).items() if k != "samples"}}
                for s, v in sorted(by_second.items())]
