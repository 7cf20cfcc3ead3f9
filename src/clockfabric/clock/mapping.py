"""A host's local -> global time mapping, as the solver hands it out and the agent serves it.

Host clock model: c = g + offset + drift * (g - t0), with g global time (the reference
host's clock). Inverted: g = t0 + (c - t0 - offset) / (1 + drift). Epoch nanoseconds do
not fit a float exactly, so the arithmetic keeps t0 as an integer and floats the rest.

The bound: at t0 the offset is within `uncertainty_ns` of the truth, and the drift within
`drift_bound`, but for the rare sample (clock.network derives both from the loops' residuals,
or from the pairs' bands where those say less); away from t0 the drift's
error adds to the offset's, so `bound_at` grows with the time since t0, which is what a
mapping held over through a loaded stretch needs.
"""

from __future__ import annotations

from dataclasses import dataclass

# The drift allowance of a mapping that carries none of its own (a sender from before drift
# bounds): a pair's drift comes from up to 32 windows of software timestamps (~10 ppb when idle).
DRIFT_BOUND = 500e-9
SYNCED, HOLDOVER, UNSYNCED = "synced", "holdover", "unsynced"


@dataclass(frozen=True)
class Mapping:
    t0_ns: int
    offset_ns: float
    drift: float
    uncertainty_ns: float  # the bound at t0 (clock.network); inf where none is known
    synced: bool = True  # tied to the reference (not in a part of the graph cut off from it)
    state: str = SYNCED  # SYNCED, HOLDOVER (an older mapping kept) or UNSYNCED
    reason: str = ""  # why not SYNCED
    drift_bound: float = DRIFT_BOUND  # how far `drift` can be from the truth

    def global_ns(self, local_ns: int) -> int:
        return self.t0_ns + round((local_ns - self.t0_ns - self.offset_ns) / (1 + self.drift))

    def bound_at(self, local_ns: int) -> float:
        """How far `global_ns(local_ns)` can be from the truth."""
        return self.uncertainty_ns + self.drift_bound * abs(local_ns - self.t0_ns)

    def as_dict(self) -> dict:
        return {"t0_ns": self.t0_ns, "offset_ns": self.offset_ns, "drift": self.drift,
                "uncertainty_ns": self.uncertainty_ns, "synced": self.synced, "state": self.state,
                "reason": self.reason, "drift_bound": self.drift_bound}

    @classmethod
    def from_dict(cls, d: dict) -> Mapping:
        synced = bool(d.get("synced", True))
        return cls(int(d["t0_ns"]), float(d["offset_ns"]), float(d["drift"]), float(d["uncertainty_ns"]),
                   synced, str(d.get("state", SYNCED if synced else UNSYNCED)), str(d.get("reason", "")),
                   float(d.get("drift_bound", DRIFT_BOUND)))
