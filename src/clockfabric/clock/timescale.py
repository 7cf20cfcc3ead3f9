"""Global time: which host's clock anchors the solve, and how global time reads on it.

Global time starts as the reference host's clock. When the reference cannot anchor a solve
(queued on every path, or silent), a host the last solve placed takes over, and global time
goes on as that host's clock read through its last mapping (offset and drift, extrapolated):
no step. When the reference comes back it takes the anchor back the same way, once a solve
has placed it, so global time stays continuous but is then the reference's clock read through
its own mapping, no longer the raw clock. A reference unusable from the first solve leaves
nothing to carry: global time then starts as the clock of the best-placed host (the most
trusted pure points), and the reference joins it later.

A Frame is that definition: the anchor host and the affine map from its clock to global
time. Bounds are relative to global time as the frame defines it: the anchor's own bound is
zero, and a handover adds nothing to them (what hosts must agree on is one time, not which
physical clock it once was).
"""

from __future__ import annotations

from dataclasses import dataclass, replace

import numpy as np

from clockfabric.clock.mapping import Mapping
from clockfabric.clock.network import Solution


@dataclass(frozen=True)
class Frame:
    anchor: str
    t0_ns: int
    offset_ns: float = 0.0  # the anchor's clock minus global time at t0
    drift: float = 0.0

    def at(self, t0_ns: int) -> tuple[float, float]:
        """The anchor's offset and drift at another epoch."""
        return self.offset_ns + self.drift * (t0_ns - self.t0_ns), self.drift

    def global_ns(self, anchor_local_ns: int) -> int:
        """Global time when the anchor's clock reads anchor_local_ns."""
        return Mapping(self.t0_ns, self.offset_ns, self.drift, 0.0).global_ns(anchor_local_ns)

    def as_dict(self) -> dict:
        return {"anchor": self.anchor, "t0_ns": self.t0_ns, "offset_ns": self.offset_ns, "drift": self.drift}

    @classmethod
    def from_dict(cls, d: object) -> Frame | None:
        """The frame a map message names; None if it names none or a malformed one."""
        try:
            assert isinstance(d, dict) and isinstance(d["anchor"], str)
            frame = cls(d["anchor"], int(d["t0_ns"]), float(d["offset_ns"]), float(d["drift"]))
        except (AssertionError, KeyError, TypeError, ValueError, OverflowError):
            return None
        return frame if np.isfinite([frame.offset_ns, frame.drift]).all() else None


def next_frame(frame: Frame | None, reference: str, solvable: dict[str, float], last: Solution | None,
               index: dict[str, int], t0_ns: int) -> Frame:
    """The frame this solve is anchored in. `solvable`: the hosts with edges in it, with the
    weight of those edges.

    The reference keeps or takes back the anchor whenever it can without a step; else the
    anchor stays; else the host the last solve placed best takes it, carrying its mapping.
    Only when no solvable host was placed (the first solve, or every placed host gone) does a
    frame start afresh, on the reference or else the host with the most weight."""
    placed = {h: float(last.bound_ns[index[h]]) for h in solvable
              if last is not None and last.synced()[index[h]]}
    if frame is not None:
        if frame.anchor in solvable and frame.anchor == reference:
            return frame
        if reference in placed:
            return _carried(reference, last, index)
        if frame.anchor in solvable:
            return frame
        if placed:
            return _carried(min(placed, key=lambda h: (placed[h], h)), last, index)
    if reference in solvable:
        return Frame(reference, t0_ns)
    return Frame(max(solvable, key=lambda h: (solvable[h], h)), t0_ns)


def _carried(host: str, last: Solution | None, index: dict[str, int]) -> Frame:
    """A frame on `host` that reads as the last solve's global time."""
    assert last is not None
    i = index[host]
    return Frame(host, last.t0_ns, float(last.offset_ns[i]), float(last.drift[i]))


def restate(sol: Solution, a: int, frame: Frame) -> Solution:
    """A solve anchored at host a (x_a = y_a = 0) in the frame's global time, where a's offset
    and drift are the frame's: c_i = c_a + x'_i + y'_i (c_a - t0) gives
    x_i = x_a + x'_i + y'_i x_a and 1 + y_i = (1 + y_a)(1 + y'_i)."""
    x_a, y_a = frame.at(sol.t0_ns)
    if x_a == 0.0 and y_a == 0.0:
        return sol  # global time is the anchor's own clock: nothing to move, exactly
    return replace(sol, offset_ns=x_a + sol.offset_ns + sol.drift * x_a, drift=(1 + y_a) * (1 + sol.drift) - 1)
