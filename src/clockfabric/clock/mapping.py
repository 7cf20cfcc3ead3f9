"""A host's local -> global time mapping, as the solver hands it out and the agent serves it.

Host clock model: c = g + offset + drift * (g - t0), with g global time (the reference
host's clock). Inverted: g = t0 + (c - t0 - offset) / (1 + drift). Epoch nanoseconds do
not fit a float exactly, so the arithmetic keeps t0 as an integer and floats the rest.

The bound: at t0 the offset is within `uncertainty_ns` of the truth, and the drift within
`drift_bound`, but for the rare sample (clock.network derives both from the loops' residuals,
or from the pairs' bands where those say less); away from t0 the drift's
error adds to the offset's, so `bound_at` grows with the time since t0, which is what a
mapping held over through a loaded stretch needs.

Those two are statistical where the loops have spoken (a host's errors judged from its pairs'
disagreement), and no loop sees a queue that moved every pair of one host alike. `limit_ns`
and `drift_limit` hold whatever the loops say: the cheapest path of bands and feasible slopes
from the ensemble (clock.network._bounds). A mapping held over serves those (health.hold_over).
"""

from __future__ import annotations

import math
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
    limit_ns: float | None = None  # the bound at t0 that holds whatever the loops say (None: uncertainty_ns)
    drift_limit: float | None = None  # likewise for the drift (None: drift_bound)

    def global_ns(self, local_ns: int) -> int:
        return self.t0_ns + round((local_ns - self.t0_ns - self.offset_ns) / (1 + self.drift))

    def bound_at(self, local_ns: int) -> float:
        """How far `global_ns(local_ns)` can be from the truth."""
        return self.uncertainty_ns + self.drift_bound * abs(local_ns - self.t0_ns)

    def as_dict(self) -> dict:
        """The mapping as the wire carries it, to what its figures are worth (a map message holds
        a dozen, and every byte past a datagram's MTU is another IP fragment to lose): the offset
        to a thousandth of a ns, the drift to 1e-15 (a thousandth of a ns over a minute), each
        bound rounded up to 4 significant digits, still a bound."""
        return {"t0_ns": self.t0_ns, "offset_ns": round(self.offset_ns, 3), "drift": round(self.drift, 15),
                "uncertainty_ns": _up(self.uncertainty_ns), "synced": self.synced, "state": self.state,
                "reason": self.reason, "drift_bound": _up(self.drift_bound),
                **({} if self.limit_ns is None else {"limit_ns": _up(self.limit_ns)}),
                **({} if self.drift_limit is None else {"drift_limit": _up(self.drift_limit)})}

    @classmethod
    def from_dict(cls, d: dict) -> Mapping:
        synced = bool(d.get("synced", True))
        return cls(int(d["t0_ns"]), float(d["offset_ns"]), float(d["drift"]), float(d["uncertainty_ns"]),
                   synced, str(d.get("state", SYNCED if synced else UNSYNCED)), str(d.get("reason", "")),
                   float(d.get("drift_bound", DRIFT_BOUND)), _optional(d.get("limit_ns")),
                   _optional(d.get("drift_limit")))


def _up(bound: float) -> float:
    """`bound` rounded up to 4 significant digits."""
    if not (bound > 0 and math.isfinite(bound)):
        return bound
    text = f"{bound:.3e}"
    if (value := float(text)) >= bound:
        return value
    mantissa, exponent = text.split("e")
    return float(f"{float(mantissa) + 0.001:.3f}e{exponent}")


def _optional(v: object) -> float | None:
    return None if v is None else float(v)  # type: ignore[arg-type]
