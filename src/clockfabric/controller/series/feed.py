"""The detectors' samples, read from the engine once a tick: every sample, each fed once.

Every sample, not each series' newest: a detector counts windows in a row (congestion's two bad
windows), and where two of a series' samples come between two reads, the older is a window too.
The engine makes a sample searchable a second or so after it took it, so each read looks back
OVERLAP_NS behind the last one and skips, per series, what is not newer than what it has fed. A
new series (a flow that just started) takes about ten seconds, longer than the overlap, so each
read first asks the embedded engine to flush (`Series.fresh`, at most once a second).

What a read costs the engine and the controller is the series it touches, not how far back it
reaches, and the fleet writes each series once a cadence (learnt from the samples: the typical
spacing of a series' writes). So a read longer than CHEAP_S is followed by the next only half a
cadence after it began, when most series have a new sample to give: each sample is still fed
within a cadence of its write (half of it waiting, the rest for the read and the engine's lag),
at a fraction of the cost of reading each tick. Such a read is not a route's: its budget is that
half cadence where it is longer than the reader's. One longer than half a cadence (an engine or
a controller short of CPU) is followed by the next no sooner than 1/SHARE times its length after
it began: the detectors fall behind, and the pushes beside them are still answered. A cheap read
(a lab, a small fleet) is made each tick.

A read the engine does not answer within its budget is read again at a later tick (the monitor
pauses after each refusal, longer for each in a row), but reaches no further back than FIRST_NS,
as a restarted controller's first read does: a feed that fell behind does not ask for more and
more, each read larger than the last one refused."""

from __future__ import annotations

import statistics

from clockfabric.controller.series.read import Series
from clockfabric.controller.series.sample import Sample

OVERLAP_NS = 5 * 10**9
FIRST_NS = 300 * 10**9  # the first read: the recent past, as a restarted controller replays its events
CHEAP_S = 0.1  # a read this short is made each tick: reading again costs less than there is to save
SHARE = 0.5  # of the time, the most that reads take: back to back, they starve the pushes beside them
GAPS = 1001  # series followed for the cadence (the median of their spacings): plenty for a fleet's


class SampleFeed:
    def __init__(self, series: Series, names: tuple[str, ...], *, since_ns: int | None = None) -> None:
        """`names`: what the detectors read (DetectorSet.reads); `since_ns`: where the last read
        ended, as if one had (a steady tick's first read); None: the first read replays the
        recent past (FIRST_NS)."""
        self.series = series
        self.names = names
        self._since = since_ns
        self._fed: dict[str, int] = {}  # a series (Exported.key) -> the newest time fed, ms
        self.cadence_s: float | None = None  # how often the fleet writes a series (None: not seen yet)
        # GAPS series followed from write to write, for the cadence: `_fed` forgets a series once
        # it is older than the read's window, which a cadence longer than the window outlasts
        self._watched: dict[str, int] = {}  # a series -> its newest time seen, ms

    @property
    def budget_s(self) -> float:
        """A read's budget: the reader's, or half a cadence where that is longer (no route waits on it)."""
        return max(self.series.budget_s, (self.cadence_s or 0.0) / 2)

    def spacing_s(self, took_s: float) -> float:
        """How long after a read began, which took `took_s`, the next is due: half a cadence for
        a read that is not cheap (and never sooner than SHARE allows), none for one that is or
        while the cadence is not known."""
        return 0.0 if took_s <= CHEAP_S or self.cadence_s is None else max(self.cadence_s / 2, took_s / SHARE)

    def new(self, now_ns: int) -> list[Sample]:
        """The samples written since the last call that have not been fed; SeriesError if the
        engine does not answer (the next call reads the same window again, FIRST_NS at most). A
        series at a time: most of a read's series were fed by the one before (the overlap), and
        only those with a newer sample are parsed and built."""
        self.series.fresh()
        since = now_ns - FIRST_NS if self._since is None else max(self._since - OVERLAP_NS, now_ns - FIRST_NS)
        # judged against what was fed before this read: a series may come in several lines
        before, fed, out = self._fed, dict(self._fed), []
        gaps: list[int] = []  # ms between a series' writes
        for s in self.series.export(self.names, since_ns=since, until_ns=now_ns, fed=before, budget_s=self.budget_s):
            key = s.key
            last = before.get(key, -1)
            if s.timestamps_ms[-1] <= last:
                continue
            fed[key] = max(fed.get(key, -1), s.timestamps_ms[-1])
            unfed = [t for t in s.timestamps_ms if t > last]
            if (seen := self._watched.get(key)) is not None:
                gaps.append(unfed[0] - seen)
            if seen is not None or len(self._watched) < GAPS:
                self._watched[key] = unfed[-1]
            if len(gaps) < GAPS:  # and its spacings within the read (a first read's reach back)
                gaps += [b - a for a, b in zip(unfed, unfed[1:], strict=False)]
            out += [Sample(s.host, t_ms * 1_000_000, s.name, float(v), s.labels)
                    for t_ms, v in zip(s.timestamps_ms, s.values, strict=True) if t_ms > last]
        # a series older than this read's window cannot be fed twice by the next: forget it
        since_ms = since // 1_000_000
        self._fed = {k: t for k, t in fed.items() if t >= since_ms}
        self._since = now_ns
        self._watched = {k: t for k, t in self._watched.items() if t >= (now_ns - FIRST_NS) // 1_000_000}
        if gaps:
            self.cadence_s = statistics.median_low(gaps) / 1e3
        out.sort(key=lambda s: s.t_ns)
        return out
