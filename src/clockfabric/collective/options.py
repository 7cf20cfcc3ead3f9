"""Every knob of a collective run and its transport, in one frozen value checked once.

    options = CollectiveOptions(collective="alltoall", subflows=4, scheduler="owd", rcvbuf=32 << 10)
    run_collective(fleet, hosts, options, sizes=[64 << 20])

A bad knob is one ClockfabricError line naming it (as its CLI flag) and what it takes, raised
where the options are made: the CLI, the launcher and the workers all take the options as
they are. to_json()/from_json() carry them to the worker processes.

What depends on the fleet (the hosts, the planes they share, sizes rounded to the ranks) is
checked by the launcher, which knows it (run.py).
"""

from __future__ import annotations

import json
from dataclasses import asdict, dataclass, fields
from typing import Any

from clockfabric.collective import alltoall, ring
from clockfabric.collective.results import COLLECTIVES
from clockfabric.collective.schedulers import SCHEDULERS
from clockfabric.collective.tcpinfo import MIN_RCVBUF
from clockfabric.errors import ClockfabricError

ALGORITHMS_OF = {"allreduce": tuple(ring.ALGORITHMS), "alltoall": tuple(alltoall.ALGORITHMS)}  # first: default
PLACEMENTS = ("hashed", "learned")  # source ports: the kernel's (ECMP hashes them) or learned per spine
MAX_SUBFLOWS = 64


@dataclass(frozen=True)
class CollectiveOptions:
    """collective: "allreduce" or "alltoall". algorithm: one of ALGORITHMS_OF[collective]
    ("" or None: its first). subflows: TCP connections per peer pair, subflow j on
    planes[j % len(planes)] (None: every plane all hosts share). scheduler: which subflow
    carries each chunk (a name in schedulers.SCHEDULERS). placement: "hashed" (kernel source
    ports, ECMP hashes them) or "learned" (ports learned per spine); "" or None: the scheduler's own
    (learned for owd, hashed otherwise). rcvbuf: each subflow's receive window, bytes, fixed
    (None or 0: the kernel's autotuning). rcvbuf_budget: with learned placement and the hosts'
    agents running, the window bytes the subflows on one spine from under a leaf share
    (worker.share_windows; None or 0: none, they keep rcvbuf). standby: with learned placement,
    a standby beside each subflow on a spine (collective/standby.py); with hashed ports there
    is no spine to stand by on, and it is off. iters, warmup: timed and untimed iterations per
    size. timeout_s bounds every wait: peers connecting, and any transfer that makes no
    progress. port_base: rank r listens on port_base + r (None: the launcher reserves a range)."""

    collective: str = "allreduce"
    algorithm: str = ""
    subflows: int = 1
    planes: tuple[int, ...] | None = None
    scheduler: str = "ecmp"
    placement: str = ""
    rcvbuf: int | None = None
    rcvbuf_budget: int | None = None
    standby: bool = False
    iters: int = 5
    warmup: int = 1
    timeout_s: float = 60.0
    port_base: int | None = None

    def __post_init__(self) -> None:
        if self.collective not in ALGORITHMS_OF:
            raise ClockfabricError(f"--collective {self.collective!r} is unknown; use {' or '.join(ALGORITHMS_OF)}")
        algorithms = ALGORITHMS_OF[self.collective]
        if not self.algorithm:
            self._set("algorithm", algorithms[0])
        elif self.algorithm not in algorithms:
            raise ClockfabricError(f"--algorithm {self.algorithm!r} is not an {COLLECTIVES[self.collective]} "
                                   f"algorithm; use {' or '.join(algorithms)}")
        if not 1 <= self.subflows <= MAX_SUBFLOWS:
            raise ClockfabricError(f"--subflows must be 1 to {MAX_SUBFLOWS}; got {self.subflows}")
        if self.planes is not None:
            self._set("planes", tuple(dict.fromkeys(self.planes)))
            if not self.planes:
                raise ClockfabricError("--planes is empty; give at least one plane, like 0,1")
        placement = SCHEDULERS.get(self.scheduler).factory.placement  # an unknown scheduler: one line naming them
        if not self.placement:
            self._set("placement", placement)
        elif self.placement not in PLACEMENTS:
            raise ClockfabricError(f"--placement {self.placement!r} is unknown; use {' or '.join(PLACEMENTS)}")
        for name, zero in (("rcvbuf", "the kernel's autotuning"), ("rcvbuf_budget", "none")):
            size = getattr(self, name) or None
            self._set(name, size)
            if size is not None and size < MIN_RCVBUF:
                raise ClockfabricError(f"--{name.replace('_', '-')} must be 0 ({zero}) or at least {MIN_RCVBUF} "
                                       f"bytes; got {size}")
        self._set("standby", bool(self.standby) and self.placement == "learned")
        if self.iters < 1 or self.warmup < 0:
            raise ClockfabricError(f"--iters must be at least 1 and --warmup at least 0; got {self.iters} "
                                   f"and {self.warmup}")
        if not self.timeout_s > 0:
            raise ClockfabricError(f"--timeout must be above 0 seconds; got {self.timeout_s:g}")
        if self.port_base is not None and not 0 < self.port_base < 65536:
            raise ClockfabricError(f"--port-base must be a port, 1 to 65535; got {self.port_base}")

    def _set(self, name: str, value: Any) -> None:
        object.__setattr__(self, name, value)  # frozen: normalised here, once, as it is made

    def to_json(self) -> str:
        return json.dumps(asdict(self), separators=(",", ":"))

    @classmethod
    def from_json(cls, text: str) -> CollectiveOptions:
        """The options to_json() wrote; anything else is one ClockfabricError line."""
        try:
            given = json.loads(text)
        except json.JSONDecodeError as e:
            raise ClockfabricError(f"collective options are not JSON: {e}") from None
        if not isinstance(given, dict):
            raise ClockfabricError("collective options must be a JSON object")
        known = {f.name for f in fields(cls)}
        if unknown := sorted(set(given) - known):
            raise ClockfabricError(f"collective options have no {unknown[0]!r}; they are {', '.join(sorted(known))}")
        if isinstance(given.get("planes"), list):
            given["planes"] = tuple(given["planes"])
        try:
            return cls(**given)
        except TypeError as e:  # a value of the wrong type, compared above
            raise ClockfabricError(f"collective options do not parse: {e}") from None
