"""A host's local -> global time mapping, as the solver hands it out and the agent serves it.

Host clock model: c = g + offset + drift * (g - t0), with g global time (the reference
host's clock). Inverted: g = t0 + (c - t0 - offset) / (1 + drift). Epoch nanoseconds do
not fit a float exactly, so the arithmetic keeps t0 as an integer and floats the rest.
"""

from __future__ import annotations

from dataclasses import dataclass


@dataclass(frozen=True)
class Mapping:
    t0_ns: int
    offset_ns: float
    drift: float
    uncertainty_ns: float
    synced: bool = True  # tied to the reference (not in a part of the graph cut off from it)

    def global_ns(self, local_ns: int) -> int:
        return self.t0_ns + round((local_ns - self.t0_ns - self.offset_ns) / (1 + self.drift))

    def as_dict(self) -> dict:
        return {"t0_ns": self.t0_ns, "offset_ns": self.offset_ns, "drift": self.drift,
                "uncertainty_ns": self.uncertainty_ns, "synced": self.synced}

    @classmethod
    def from_dict(cls, d: dict) -> Mapping:
        return cls(int(d["t0_ns"]), float(d["offset_ns"]), float(d["drift"]), float(d["uncertainty_ns"]),
                   bool(d.get("synced", True)))
