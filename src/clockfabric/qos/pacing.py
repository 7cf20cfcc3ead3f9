"""The rate law for the lower classes on one link: pure, one step per control period.

On a fabric whose switch ports have one FIFO, a higher class is protected only by the hosts
slowing the lower classes that share its links. Per directed link, each period T the controller
reads the queueing delay the higher class's packets met there (q: their one-way delay less the
path's floor, on the synced clocks) and the higher class's rate through the link (a), and sets
the lower classes' total rate on it:

    r = C - a - kappa * C * (q - q*) / T,    clamped to [floor * C, C]; r = C is no limit at all

where C is the link's capacity and q* the queueing the higher class tolerates. The lower classes
get what the higher class leaves, less a term that drains the excess queue (or, below the
target, more: up to q* of queue is allowed, so the link stays full).

Why it is stable. While the FIFO holds a queue it grows by the excess arrival rate:
q[k+1] = q[k] + T * (a + r[k] - C) / C. Put the law in, with e = q - q*:

    e[k+1] = e[k] - kappa * e[k] = (1 - kappa) * e[k]

so the excess shrinks geometrically for 0 < kappa < 2, without overshoot for kappa <= 1.
If the queue reading is a period late (the rate acts on q[k-1]), e[k+1] = e[k] - kappa * e[k-1]:
the roots of z^2 - z + kappa have |z| = sqrt(kappa) < 1 for 0 < kappa < 1, still stable, now
with a damped ring. So GAINS_OK is 0 < kappa < 1. An error d in the estimate of a shifts the
equilibrium to e = -T * d / (kappa * C) and changes nothing else. With kappa = 0.5 and
T = 0.1 s, 20 targets' worth of queue is under target in about 5 periods (0.5 s), 9 with the
late reading.

Why it is work-conserving: with the higher class idle (a = 0) and no queue, r >= C: no limit.
`release_periods` of an idle higher class remove the limit outright (a training job's compute
phase hands the whole link to the scavenger), and `floor` keeps a lower class from starving.

What the higher class wants. The term C - a assumes the higher class sends what it wants. An
elastic one (TCP, a collective paced by its slowest hop) sends what contention leaves it, so its
rate is the lower classes' doing, and any split is a fixed point of C - a. So a is its demand
(qos.pace_loop): its rate, or where one of its flows had data waiting on the network a share b
of the time (the kernel's busy time less what the receiver's window held), b * C: while it
waits it would take the whole link. A collective that waits on its links all its step leaves
the lower classes their floor; one that computes half its step leaves them half the link.

What the higher class wants at its busiest. A paced lower class sends at its rate through every
burst of the higher class; it cannot time its packets into the gaps between them. So a is the
highest demand read over the last `demand_hold_s` (two of the workload's windows): one window
that caught the higher class between bursts (a step's compute, a collective's sync) does not
hand its bursts' share to the lower classes for the next window. An idle higher class still
releases the link after `release_periods`, and its hold starts afresh.

A standing queue is unmet demand too, where the waiting is not read (a kernel without the
counters): only the queue term moves the split then, by kappa * C * e / T a period, which is a
fraction of a Mbit/s where the queue is read once a 2 s window. So where the queue stands well
over target (e > q*) and is not falling, the lower classes' rate is cut by `backoff` a period,
below whatever the law allows; under target it climbs back by `rise` * C a period, never above the law. The law stays
the ceiling, so against a higher class that does send what it wants the loop ends where the
law's does; the cut only takes the lower classes below it while the queue stands, and a falling
queue (the law draining it) is left to the law, so the cut does not ring at the law's own
equilibrium.
"""

from __future__ import annotations

from collections import deque
from dataclasses import dataclass, field


@dataclass(frozen=True)
class Gains:
    period_s: float = 0.1  # T: how often the law runs
    target_s: float = 200e-6  # q*: the higher class's tolerated queueing on the link
    kappa: float = 0.5  # the share of the excess queue drained per period
    floor: float = 0.02  # the lower classes keep at least this share of the link
    release_periods: int = 3  # the higher class idle this long: the limit goes
    backoff: float = 0.5  # a standing queue over target cuts the lower classes by this a period
    rise: float = 0.2  # under target they climb back by this share of the link a period
    demand_hold_s: float = 2.0  # the higher class's demand is its highest over this long

    def __post_init__(self) -> None:
        if not 0 < self.kappa < 1:
            raise ValueError(f"kappa {self.kappa} is outside 0 < kappa < 1, where the loop is stable "
                             "with a reading a period late")
        if self.period_s <= 0 or self.target_s <= 0 or not 0 <= self.floor < 1:
            raise ValueError("the period and target must be positive and the floor in [0, 1)")
        if not 0 < self.backoff < 1 or not 0 < self.rise <= 1:
            raise ValueError(f"backoff {self.backoff} must be in (0, 1) and rise {self.rise} in (0, 1]")
        if self.demand_hold_s < 0:
            raise ValueError(f"demand_hold_s {self.demand_hold_s} must be 0 or more")

    @property
    def hold_periods(self) -> int:
        """How many periods' demand readings the law takes the highest of (at least this one)."""
        return max(1, round(self.demand_hold_s / self.period_s))


@dataclass
class LinkPacer:
    """The lower classes' total rate on one directed link; None: not limited."""

    capacity_bps: float
    gains: Gains = Gains()
    rate_bps: float | None = None
    idle_periods: int = 0
    last_queue_s: float | None = None  # the reading before: a queue not falling is a standing one
    demands: deque[float] = field(init=False)  # the higher class's demand, the last hold_periods

    def __post_init__(self) -> None:
        self.demands = deque(maxlen=self.gains.hold_periods)

    def step(self, high_bps: float, queue_s: float | None) -> float | None:
        """One period: the higher class's rate through the link and the queueing its packets met
        (None: no reading this period, the rate holds). Returns the new limit (None: none)."""
        g, c = self.gains, self.capacity_bps
        if high_bps <= 0:
            self.idle_periods += 1
            if self.idle_periods >= g.release_periods:
                self.rate_bps = None
                self.demands.clear()
            return self.rate_bps
        self.idle_periods = 0
        self.demands.append(high_bps)
        if queue_s is None:
            return self.rate_bps
        excess = queue_s - g.target_s
        law = c - max(self.demands) - g.kappa * c * excess / g.period_s
        now = c if self.rate_bps is None else self.rate_bps
        standing = excess > g.target_s and self.last_queue_s is not None and queue_s >= self.last_queue_s
        self.last_queue_s = queue_s
        r = min(law, g.backoff * now if standing else now + g.rise * c)
        self.rate_bps = None if r >= c else max(g.floor * c, r)
        return self.rate_bps


def shares(rate_bps: float | None, weights: dict[str, int]) -> dict[str, float | None]:
    """A link's lower-class rate split among the lower classes' flows by weight."""
    total = sum(weights.values())
    return {k: None if rate_bps is None else rate_bps * w / total for k, w in weights.items()}
