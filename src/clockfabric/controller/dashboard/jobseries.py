"""A job's time series as the jobs view charts them: its sent throughput and each sending flow's
rate and delay, per second on one time axis, from the workload samples the controller stores
(`job_flow_tx_bps`, `job_flow_rtt_us`, `job_flow_owd_out_p50_ns` and its `_fallback` flag). Pure:
samples in, a dict out.

A flow's delay is its in-band one-way delay where its agent measured one (not flagged as a
fallback), else RTT/2 (as the root cause judges it). A socket that never sent in the window is a
receiving end: its direction is charted at its sender.
"""

from __future__ import annotations

import statistics
from collections.abc import Iterable

from clockfabric.controller.series.sample import Sample

STATS = {"job_flow_tx_bps": "tx_bps", "job_flow_rtt_us": "rtt_us", "job_flow_owd_out_p50_ns": "owd_ns",
         "job_flow_owd_out_fallback": "fallback"}
BUCKET_NS = 10**9
SENDING_BPS = 1e6  # a flow that never sent this fast in the window is a receiving end


def job_series(jobid: str, samples: Iterable[Sample], since_ns: int, now_ns: int,
               bucket_ns: int = BUCKET_NS) -> dict:
    """{jobid, since_ns, now_ns, t_ns: [bucket starts], throughput_bps: [...], flows: [{host, flow,
    delay_source, tx_bps: [...], delay_us: [...]}]}: every list on the t_ns axis, null where no reading."""
    readings: dict[tuple[str, str], dict[str, dict[int, list[float]]]] = {}
    for s in samples:
        stat = STATS.get(s.name)
        if stat is None or s.labels.get("jobid") != jobid or not since_ns <= s.t_ns < now_ns:
            continue
        per_stat = readings.setdefault((s.host, s.labels.get("flow", "")), {})
        per_stat.setdefault(stat, {}).setdefault(s.t_ns // bucket_ns, []).append(s.value)
    senders = {key: r for key, r in readings.items()
               if any(v >= SENDING_BPS for vs in r.get("tx_bps", {}).values() for v in vs)}
    buckets = sorted({b for r in senders.values() for per in r.values() for b in per})
    flows = [_flow(host, flow, r, buckets) for (host, flow), r in sorted(senders.items())]
    throughput = [sum(f["tx_bps"][i] or 0.0 for f in flows) if any(f["tx_bps"][i] is not None for f in flows)
                  else None for i in range(len(buckets))]
    return {"jobid": jobid, "since_ns": since_ns, "now_ns": now_ns, "t_ns": [b * bucket_ns for b in buckets],
            "throughput_bps": throughput, "flows": flows}


def _flow(host: str, flow: str, readings: dict[str, dict[int, list[float]]], buckets: list[int]) -> dict:
    def mean(stat: str, scale: float = 1.0) -> list[float | None]:
        per = readings.get(stat, {})
        return [statistics.fmean(per[b]) * scale if b in per else None for b in buckets]

    # in-band once its agent measured one: an OWD pushed with no fallback flag, or the flag at 0
    flags = [v for vs in readings.get("fallback", {}).values() for v in vs]
    inband = "owd_ns" in readings and (not flags or min(flags) == 0.0)
    return {"host": host, "flow": flow, "delay_source": "inband" if inband else "rtt/2", "tx_bps": mean("tx_bps"),
            "delay_us": mean("owd_ns", 1e-3) if inband else mean("rtt_us", 0.5)}
