"""Slow flow: a job's flow whose delay stands far above its siblings' over the last readings.

Fed the workload pushes (`job_flow_tx_bps`, `job_flow_rtt_us`, and the in-band
`job_flow_owd_out_p50_ns` where agents measure it in-band), the detector keeps each flow's readings of the
last `recent` and judges each job's flows against each other as `job why` does
(controller.rootcause). A flow slow in `windows` judgements in a row opens its alert; as many
fine ones close it. `clockfabric job why` names the link and what else is on it.
"""

from __future__ import annotations

from collections.abc import Iterable
from dataclasses import dataclass
from typing import ClassVar

from clockfabric.controller.detectors.base import DETECTORS, Detector, DetectorContext, Finding, Streak, keep_recent
from clockfabric.controller.detectors.config import DetectorConfig, Keys, S, duration_ns, positive_int
from clockfabric.controller.rootcause import FALLBACK, READINGS, Flow, Thresholds, job_flows, point, reading
from clockfabric.controller.series.sample import Sample

FlowId = tuple[str, str, str]  # (jobid, host, flow label)


@dataclass(frozen=True)
class SlowFlowConfig(DetectorConfig):
    windows: int = 3  # judgements (one a tick) in a row that open or close a flow's alert
    recent_ns: int = 10 * S  # each judgement reads this much of the flows' latest readings

    KEYS: ClassVar[Keys] = {"windows": ("windows", positive_int), "recent": ("recent_ns", duration_ns)}


@DETECTORS.register("slow_flow", help="A job's flow far slower than its siblings, k judgements in a row")
class SlowFlow(Detector[SlowFlowConfig]):
    config_type = SlowFlowConfig

    def __init__(self, config: SlowFlowConfig, ctx: DetectorContext):
        super().__init__(config, ctx)
        self.limits = Thresholds(recent_ns=config.recent_ns)
        self.readings: dict[FlowId, dict[int, dict[str, float]]] = {}  # by t_ns
        # each flow's readings as the judgement takes them, built again only when they change
        self.flows: dict[FlowId, Flow] = {}
        self.streaks: dict[FlowId, Streak] = {}
        self.why: dict[FlowId, list[str]] = {}

    def reads(self) -> frozenset[str]:
        return frozenset({*(f"job_flow_{stat}" for stat in READINGS), f"job_flow_{FALLBACK}"})

    def on_samples(self, samples: Iterable[Sample], now_ns: int) -> None:
        for s in samples:
            stat = s.name.removeprefix("job_flow_")
            if stat != s.name and (stat in READINGS or stat == FALLBACK) and (jobid := s.labels.get("jobid")) \
                    and "flow" in s.labels:
                key = (jobid, s.host, s.labels["flow"])
                reading(self.readings.setdefault(key, {}).setdefault(s.t_ns, {}), stat, s.value)
                self.flows.pop(key, None)

    def findings(self, now_ns: int) -> list[Finding]:
        since = now_ns - self.config.recent_ns
        for key in keep_recent(self.readings, since):
            self.streaks.pop(key, None)
            self.flows.pop(key, None)
        by_job: dict[str, list[Flow]] = {}
        for key, by_t in self.readings.items():
            flow = self.flows.get(key)
            if flow is None or len(flow.points) != len(by_t):  # new readings, or old ones gone
                jobid, host, label = key
                flow = self.flows[key] = Flow(host, label, jobid,
                                              points=tuple(point(t, v) for t, v in sorted(by_t.items())))
            by_job.setdefault(key[0], []).append(flow)
        for jobid, flows in by_job.items():
            for stats in job_flows(flows, jobid, since, since, self.limits, []):
                key = (jobid, stats.flow.host, stats.flow.flow)
                self.streaks.setdefault(key, Streak(self.config.windows)).add(now_ns, stats.network_slow)
                if stats.network_slow:
                    self.why[key] = stats.why
        return [self._finding(key) for key, streak in sorted(self.streaks.items()) if streak.open]

    def _finding(self, key: FlowId) -> Finding:
        jobid, host, label = key
        return Finding(key=f"slow_flow:{jobid}:{host}:{label}", kind="slow_flow", severity=self.config.severity,
                       message=(f"job {jobid}: flow {label} from {host} is slow ({'; '.join(self.why.get(key, []))}); "
                                f"`clockfabric job why {jobid}` names the link"),
                       detail={"jobid": jobid, "host": host, "flow": label, "why": self.why.get(key, [])})
