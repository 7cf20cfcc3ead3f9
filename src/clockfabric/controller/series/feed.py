"""The detectors' samples, read from the engine once a tick: every sample, each fed once.

Every sample, not each series' newest: a detector counts windows in a row (congestion's two bad
windows), and where two of a series' samples come between two reads, the older is a window too.
The engine makes a sample searchable a second or so after it took it, so each read looks back
OVERLAP_NS behind the last one and skips, per series, what is not newer than what it has fed."""

from __future__ import annotations

from clockfabric.controller.series.read import Series
from clockfabric.controller.series.sample import Sample

# what the detectors read (detectors/*.py's on_samples, detector_set's LLDP neighbours): link states,
# LLDP neighbours, probe delays (floor and p50, min where congestion is set to it; no detector reads
# p99, a quarter of every host's series), job flows' readings
DETECTOR_SAMPLES = ("link_up", "lldp_neighbour", "owd_floor_ns", "owd_min_ns", "owd_p50_ns",
                    "job_flow_tx_bps", "job_flow_rtt_us", "job_flow_owd_out_p50_ns", "job_flow_owd_out_fallback")
OVERLAP_NS = 5 * 10**9
FIRST_NS = 300 * 10**9  # the first read: the recent past, as a restarted controller replays its events


class SampleFeed:
    def __init__(self, series: Series, names: tuple[str, ...] = DETECTOR_SAMPLES, *,
                 since_ns: int | None = None) -> None:
        """`since_ns`: where the last read ended, as if one had (a steady tick's first read);
        None: the first read replays the recent past (FIRST_NS)."""
        self.series = series
        self.names = names
        self._since = since_ns
        self._fed: dict[tuple, int] = {}  # (name, host, labels) -> the newest time fed

    def new(self, now_ns: int) -> list[Sample]:
        """The samples written since the last call that have not been fed; SeriesError if the
        engine does not answer (the next call reads the same window again)."""
        since = now_ns - FIRST_NS if self._since is None else self._since - OVERLAP_NS
        out = []
        for s in sorted(self.series.samples(self.names, since_ns=since, until_ns=now_ns), key=lambda s: s.t_ns):
            key = (s.name, s.host, tuple(sorted(s.labels.items())))
            if s.t_ns > self._fed.get(key, -1):
                self._fed[key] = s.t_ns
                out.append(s)
        # a series older than this read's window cannot be fed twice by the next: forget it
        self._fed = {k: t for k, t in self._fed.items() if t >= since}
        self._since = now_ns
        return out
