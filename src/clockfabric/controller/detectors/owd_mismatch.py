"""In-band vs probe mismatch: a job's flow whose own packets see far more delay than the probes
on the same pair of hosts: the job is likely misconfigured (a wrong DSCP class puts it behind
bulk traffic the probes skip, or it left on the wrong interface or plane). A misconfiguration
is usually the whole job's, so every flow of a job may alert at once; `job why` gives the verdict.

Fed the jobs' in-band delays (`job_flow_owd_out_p50_ns`; a reading marked `owd_out_fallback` is
the RTT/2 stand-in and is no in-band delay) and, beside each, what the host's probes to the flow's
far host see (agent.digest: the lowest floor of those paths, and the most any of them sees now,
its p50 or its floor). The delay is judged against them with the rule `job why` uses
(controller.rootcause: settled, far_above). Where a probe path of the pair itself queues, the
probes see the congestion too: no mismatch. A flow mismatched in `windows` judgements in a row
opens its alert; as many fine ones close it.
"""

from __future__ import annotations

from collections.abc import Iterable
from dataclasses import dataclass
from typing import ClassVar

from clockfabric.agent.digest import PROBE_FLOOR, PROBE_LEVEL
from clockfabric.controller.detectors.base import (
    DETECTORS,
    Detector,
    DetectorContext,
    Finding,
    Streak,
    format_ns,
    keep_recent,
)
from clockfabric.controller.detectors.config import DetectorConfig, Keys, S, duration_ns, positive_int
from clockfabric.controller.rootcause import FALLBACK, Thresholds, far_above, point, reading, settled
from clockfabric.controller.series.sample import Sample

FlowId = tuple[str, str, str]  # (jobid, host, flow label)
INBAND = "owd_out_p50_ns"
PROBES = {PROBE_FLOOR: "floor", PROBE_LEVEL: "level"}


@dataclass(frozen=True)
class Judged:
    """One flow's delay against its pair's probes."""

    delay_us: float
    floor_us: float  # the lowest floor of the pair's probe paths
    probes_us: float  # the most any of the pair's probe paths sees now (its p50, or its floor)
    mismatched: bool


@dataclass(frozen=True)
class OwdMismatchConfig(DetectorConfig):
    windows: int = 3  # judgements (one a tick) in a row that open or close a flow's alert
    recent_ns: int = 10 * S  # each judgement reads this much of the flows' latest in-band readings

    KEYS: ClassVar[Keys] = {"windows": ("windows", positive_int), "recent": ("recent_ns", duration_ns)}


@DETECTORS.register("owd_mismatch", help="A job's flow far above its pair's probe delays, k judgements in a row")
class OwdMismatch(Detector[OwdMismatchConfig]):
    config_type = OwdMismatchConfig

    def __init__(self, config: OwdMismatchConfig, ctx: DetectorContext):
        super().__init__(config, ctx)
        self.stale_after_ns = ctx.stale_after_ns
        self.limits = Thresholds(recent_ns=config.recent_ns)
        self.probes: dict[FlowId, dict[str, tuple[int, float]]] = {}  # "floor", "level" -> (t_ns, µs): the latest
        self.readings: dict[FlowId, dict[int, dict[str, float]]] = {}  # by t_ns
        self.streaks: dict[FlowId, Streak] = {}
        self.last: dict[FlowId, Judged] = {}  # the latest mismatched judgement: the alert's figures

    def reads(self) -> frozenset[str]:
        return frozenset({*PROBES, f"job_flow_{INBAND}", f"job_flow_{FALLBACK}"})

    def on_samples(self, samples: Iterable[Sample], now_ns: int) -> None:
        for s in samples:
            if not ((jobid := s.labels.get("jobid")) and "flow" in s.labels):
                continue
            flow_id = (jobid, s.host, s.labels["flow"])
            if (stat := PROBES.get(s.name)) is not None:
                probes = self.probes.setdefault(flow_id, {})
                if s.t_ns >= probes.get(stat, (0, 0.0))[0]:
                    probes[stat] = (s.t_ns, s.value / 1e3)
            elif (stat := s.name.removeprefix("job_flow_")) in (INBAND, FALLBACK):
                reading(self.readings.setdefault(flow_id, {}).setdefault(s.t_ns, {}), stat, s.value)

    def findings(self, now_ns: int) -> list[Finding]:
        self._forget(now_ns)
        for key, by_t in self.readings.items():
            mine = self._judge(key, by_t)
            bad = mine is not None and mine.mismatched
            if mine is not None and bad:
                self.last[key] = mine
            if bad or key in self.streaks:
                self.streaks.setdefault(key, Streak(self.config.windows)).add(now_ns, bad)
        return [self._finding(key) for key, streak in sorted(self.streaks.items()) if streak.open]

    def _forget(self, now_ns: int) -> None:
        for key in keep_recent(self.readings, now_ns - self.config.recent_ns):
            self.streaks.pop(key, None)
            self.last.pop(key, None)
        stale = now_ns - self.stale_after_ns
        self.probes = {key: fresh for key, probes in self.probes.items()
                       if (fresh := {k: v for k, v in probes.items() if v[0] >= stale})}

    def _judge(self, key: FlowId, by_t: dict[int, dict[str, float]]) -> Judged | None:
        """The flow's in-band delay against its pair's probes; None with no in-band reading or no probes."""
        probes = self.probes.get(key, {})
        if "floor" not in probes:
            return None
        delay = settled([point(t, v).owd_us for t, v in sorted(by_t.items())], self.limits.newest)
        if delay is None:
            return None
        floor = probes["floor"][1]
        level = max(floor, probes.get("level", (0, 0.0))[1])
        margin = self.limits.inband_margin_us
        mismatched = far_above(delay, floor, margin, self.limits) and far_above(delay, level, margin, self.limits)
        return Judged(delay, floor, level, mismatched)

    def _finding(self, key: FlowId) -> Finding:
        jobid, host, label = key
        j = self.last.get(key)
        figures = (f" sees {format_ns(j.delay_us * 1e3)} in-band while the probes of its path see "
                   f"{format_ns(j.floor_us * 1e3)} at their floor") if j else " sees far more delay than the probes"
        return Finding(key=f"owd_mismatch:{jobid}:{host}:{label}", kind="owd_mismatch", severity=self.config.severity,
                       message=(f"job {jobid}: flow {label} from {host}{figures}; likely misconfigured: a "
                                f"wrong DSCP class or the wrong interface or plane; `clockfabric job why {jobid}` "
                                "says which"),
                       detail={"jobid": jobid, "host": host, "flow": label,
                               "inband_us": j.delay_us if j else None, "probe_floor_us": j.floor_us if j else None,
                               "probe_us": j.probes_us if j else None})
