"""Which hosts the solve must not trust, and how a host holds over without a fresh mapping.

A host whose every path is queued in one direction (a saturated downlink) sees every pair's
minimum delay one-sided: each pair's offset is off by half that queue, and since every edge
of the host is off alike, no loop of the probe graph shows it. What does show is the band: a
pure pair's band half-width is the mean of the two minimum delays, so the host's narrowest
band stands out against the fleet's. Such a host is left out of the solve (its edges would
bend its neighbours too) and named, and it holds over on its last good mapping, whose bound
grows with the time since (mapping.bound_at), until HOLDOVER_MAX_NS.

Until the band stands out that far, the host's bound grows with it (BandBaseline): a queue adds
q_f and q_r (both >= 0) to a pair's two minimum delays, which widens its band's half-width by
(q_f + q_r) / 2 and moves its middle line by (q_f - q_r) / 2, no more. Loops see a host's edges
that disagree; where every edge of a host widened alike, they cannot, and the median widening of
its edges past their usual bands is added to its bound. The median, not the least: as a queue
takes a host's last pure pairs, their fits go stale one by one, each as narrow as before. The
usual band, not the narrowest: an idle band's own jitter past its narrowest doubled idle bounds.
So a host whose queue is still building is named within bounds that hold, and holds over on a
mapping whose bound held when it was made.
"""

from __future__ import annotations

import math
import statistics
from dataclasses import replace

from clockfabric.clock.mapping import HOLDOVER, SYNCED, UNSYNCED, Mapping

# A host's narrowest band beyond twice the fleet's typical narrowest plus this is queued on
# every path: tens of us of standing queue, where hop counts change a band by a few us.
ASYMMETRY_NS = 10_000.0
# ... or beyond it plus this for SUSTAINED_S on end: a standing queue stays, a busy moment passes
SUSTAINED_NS, SUSTAINED_S = 5_000.0, 3.0
HOLDOVER_MAX_NS = 60_000_000_000  # past this a held-over mapping's drift term says little
# a pair's usual band follows a band narrower than it within seconds (a start-up's wide bands, a
# queue that drained) and a wider one over minutes, so a queue building for seconds stands out
# from it and a path that moved for good stops widening its host's bound within minutes
NARROWER_TAU_S, WIDER_TAU_S = 5.0, 120.0
NO_PURE = "no pure probe pair on any path"


def asymmetric_hosts(margins: dict[str, list[float]], slack_ns: float = ASYMMETRY_NS) -> dict[str, str]:
    """Host -> why it cannot be synced, from the band half-widths of each host's edges (both
    the ones it reports and the ones its peers report with it)."""
    narrowest = {h: min(m) for h, m in margins.items() if m}
    if len(narrowest) < 3:
        return {}  # two hosts share every path: nothing to tell one's queue from the other's
    typical = statistics.median(narrowest.values())
    limit = 2 * typical + slack_ns
    return {h: f"asymmetric: every path queued (narrowest band {m / 1e3:.0f} us, fleet {typical / 1e3:.0f} us)"
            for h, m in narrowest.items() if m > limit}


class BandBaseline:
    """Each pair's usual band half-width, and how far a host's pairs widened past theirs."""

    def __init__(self) -> None:
        self._usual: dict[tuple[str, str], tuple[float, float]] = {}  # pair -> (when, its usual band)
        self._pruned = 0.0

    def widened(self, bands: dict[tuple[str, str], float], now: float) -> dict[str, float]:
        """Host -> how much wider than usual its pairs' bands (each (host, peer) as reported)
        are, the median of its pairs (each 0 where narrower): 0 for a host most of whose pairs
        are as usual."""
        wider: dict[str, list[float]] = {}
        for pair, band in bands.items():
            at, usual = self._usual.get(pair, (now, band))
            tau = NARROWER_TAU_S if band < usual else WIDER_TAU_S
            self._usual[pair] = (now, usual + (band - usual) * -math.expm1(-(now - at) / tau))
            for host in pair:
                wider.setdefault(host, []).append(max(0.0, band - usual))
        if now - self._pruned >= WIDER_TAU_S:  # pairs no longer reported (a peer changed, a host left)
            self._usual = {pair: u for pair, u in self._usual.items() if now - u[0] < WIDER_TAU_S}
            self._pruned = now
        return {host: statistics.median(w) for host, w in wider.items()}


def hold_over(last: Mapping | None, new: Mapping | None, now_ns: int) -> Mapping | None:
    """The mapping a host serves: the new one if synced; else its last good one, held over
    (with the new one's reason) while young enough; else the new one, unsynced.

    A held-over mapping is bounded by its limits, not by the loops' statistics: the queue that
    got its host named was building while that mapping was solved, and it moved every pair of
    the host alike, offsets and slopes, which no loop shows. A slope off by tens of ppm is
    nothing over the second a mapping is served, and milliseconds over the minute one is held."""
    if new is None or new.state == SYNCED:
        return new
    base = last if last is not None and last.state in (SYNCED, HOLDOVER) else None
    if base is not None and now_ns - base.t0_ns <= HOLDOVER_MAX_NS:
        return replace(base, state=HOLDOVER, reason=new.reason or base.reason,
                       uncertainty_ns=max(base.uncertainty_ns, base.limit_ns or 0.0),
                       drift_bound=max(base.drift_bound, base.drift_limit or 0.0))
    return replace(new, synced=False, state=UNSYNCED)
