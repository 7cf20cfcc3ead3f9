"""The detectors' samples, read from the engine once a tick: every sample, each fed once.

Every sample, not each series' newest: a detector counts windows in a row (congestion's two bad
windows), and where two of a series' samples come between two reads, the older is a window too.
The engine makes a sample searchable a second or so after it took it, so each read looks back
OVERLAP_NS behind the last one and skips, per series, what is not newer than what it has fed. A
new series (a flow that just started) takes about ten seconds, longer than the overlap, so each
read first asks the embedded engine to flush (`Series.fresh`, at most once a second).

A read the engine does not answer within its budget is read again at a later tick (the monitor
pauses after each refusal, longer for each in a row), but reaches no further back than FIRST_NS,
as a restarted controller's first read does: a feed that fell behind does not ask for more and
more, each read larger than the last one refused."""

from __future__ import annotations

from clockfabric.controller.series.read import Series
from clockfabric.controller.series.sample import Sample

OVERLAP_NS = 5 * 10**9
FIRST_NS = 300 * 10**9  # the first read: the recent past, as a restarted controller replays its events


class SampleFeed:
    def __init__(self, series: Series, names: tuple[str, ...], *, since_ns: int | None = None) -> None:
        """`names`: what the detectors read (DetectorSet.reads); `since_ns`: where the last read
        ended, as if one had (a steady tick's first read); None: the first read replays the
        recent past (FIRST_NS)."""
        self.series = series
        self.names = names
        self._since = since_ns
        self._fed: dict[str, int] = {}  # a series (Exported.key) -> the newest time fed, ms

    def new(self, now_ns: int) -> list[Sample]:
        """The samples written since the last call that have not been fed; SeriesError if the
        engine does not answer (the next call reads the same window again, FIRST_NS at most). A
        series at a time: most of a read's series were fed by the one before (the overlap), and
        only those with a newer sample are parsed and built."""
        self.series.fresh()
        since = now_ns - FIRST_NS if self._since is None else max(self._since - OVERLAP_NS, now_ns - FIRST_NS)
        # judged against what was fed before this read: a series may come in several lines
        before, fed, out = self._fed, dict(self._fed), []
        for s in self.series.export(self.names, since_ns=since, until_ns=now_ns, fed=before):
            key = s.key
            last = before.get(key, -1)
            if s.timestamps_ms[-1] <= last:
                continue
            fed[key] = max(fed.get(key, -1), s.timestamps_ms[-1])
            out += [Sample(s.host, t_ms * 1_000_000, s.name, float(v), s.labels)
                    for t_ms, v in zip(s.timestamps_ms, s.values, strict=True) if t_ms > last]
        # a series older than this read's window cannot be fed twice by the next: forget it
        since_ms = since // 1_000_000
        self._fed = {k: t for k, t in fed.items() if t >= since_ms}
        self._since = now_ns
        out.sort(key=lambda s: s.t_ns)
        return out
