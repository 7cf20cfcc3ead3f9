"""A workload view as the agent hands it on: samples for the controller's push, and the
state the agent publishes (which its /metrics reads).

Samples, each labelled with `jobid` (never `job`: Prometheus owns that label):
  job_processes           how many processes of the job run here, per (rank, run, source, visible)
  job_start_seconds       the earliest start (s since the epoch) of those processes, same labels
                          (no pid label: a label that grows with each process would make series
                          without bound; the pids are in the push's info, `processes`)
  job_flow_<stat>         one per flow and stat (FLOW_STATS); label flow: "local:port->remote:port"
  other_flow_<stat>       tx_bps and rtt_us of each flow of no job that sends (monitor.BUSY_BPS); label flow
  job_flow_owd_<dir>_<s>  its one-way delay out (local to remote) and in, over the last window
                          (OWD_FIELDS: min/p50/p99 in ns, samples, fallback: 1 where it is RTT/2)
  job_flow_path           where the flow goes (value 1): labels via (the switch it was traced
  other_flow_path         through, "" if not) and dscp (what its socket marks, "" if unknown)
A flow's rates appear from its second reading on.
"""

from __future__ import annotations

from collections.abc import Callable

from clockfabric.traffic.steer_decide import FlowKey
from clockfabric.workload.flows import FlowRates, flow_label
from clockfabric.workload.jobs import JobProcess
from clockfabric.workload.monitor import JobFlow, WorkloadView
from clockfabric.workload.owd import FALLBACK, OwdStats

# name -> how to read it from a flow; None values are left out
FLOW_STATS = {
    "tx_bps": lambda f: f.rates.tx_bps,
    "rx_bps": lambda f: f.rates.rx_bps,
    "rtt_us": lambda f: f.rates.reading.rtt_us,
    "retransmits_total": lambda f: f.rates.reading.retransmits,
    "cwnd": lambda f: f.rates.reading.cwnd,
    "delivery_bps": lambda f: f.rates.reading.delivery_rate_bps,
}

PROCESSES, START = "job_processes", "job_start_seconds"
DIRECTIONS = ("out", "in")  # from the flow's local end to its remote one, and back
OWD_FIELDS = ("min_ns", "p50_ns", "p99_ns", "samples", "fallback")
OWD_SAMPLES = [f"job_flow_owd_{d}_{f}" for d in DIRECTIONS for f in OWD_FIELDS]
FlowOwd = dict[str, dict[str, OwdStats | None]]  # flow label -> direction -> its last window
Via = Callable[[FlowKey], str | None]  # a flow's traced switch, None where not known


def path_labels(r: FlowRates, via: Via | None) -> dict[str, str] | None:
    """A flow's path sample labels; None when neither its switch nor its DSCP is known."""
    switch, dscp = via(r.key) if via else None, r.reading.dscp
    if switch is None and dscp is None:
        return None
    return {"flow": flow_label(r.key), "via": switch or "", "dscp": "" if dscp is None else str(dscp)}


def process_labels(jobid: str, source: str, p: JobProcess) -> tuple[tuple[str, str], ...]:
    return (("jobid", jobid), ("rank", "" if p.tag.rank is None else str(p.tag.rank)), ("source", source),
            ("run", p.tag.run), ("visible", "1" if p.visible else "0"))


def process_groups(view: WorkloadView) -> dict[tuple[tuple[str, str], ...], tuple[int, float]]:
    """Each job's processes by (rank, run, source, visible): how many, and the earliest start."""
    groups: dict[tuple[tuple[str, str], ...], tuple[int, float]] = {}
    for job in view.jobs.values():
        for p in job.processes:
            key = process_labels(job.jobid, job.source, p)
            count, start = groups.get(key, (0, p.start_s))
            groups[key] = (count + 1, min(start, p.start_s))
    return groups


def owd_values(stats: OwdStats) -> dict[str, float]:
    return {"min_ns": stats.min_ns, "p50_ns": stats.p50_ns, "p99_ns": stats.p99_ns, "samples": stats.samples,
            "fallback": float(stats.source == FALLBACK)}


def push_samples(view: WorkloadView, owd: FlowOwd | None = None, via: Via | None = None) -> list[dict]:
    out = []
    for group, (count, start_s) in process_groups(view).items():
        out.append({"name": PROCESSES, "value": float(count), "labels": dict(group)})
        out.append({"name": START, "value": start_s, "labels": dict(group)})
    for f in view.flows:
        labels = {"jobid": f.jobid, "flow": flow_label(f.rates.key)}
        for stat, read in FLOW_STATS.items():
            if (value := read(f)) is not None:
                out.append({"name": f"job_flow_{stat}", "value": float(value), "labels": labels})
        for direction, stats in (owd or {}).get(labels["flow"], {}).items():
            for name, value in (owd_values(stats) if stats else {}).items():
                out.append({"name": f"job_flow_owd_{direction}_{name}", "value": float(value), "labels": labels})
        if path := path_labels(f.rates, via):
            out.append({"name": "job_flow_path", "value": 1.0, "labels": {"jobid": f.jobid, **path}})
    for r in view.busy_others:
        if path := path_labels(r, via):
            out.append({"name": "other_flow_path", "value": 1.0, "labels": path})
        for stat, value in (("tx_bps", r.tx_bps), ("rtt_us", r.reading.rtt_us)):
            if value is not None:
                out.append({"name": f"other_flow_{stat}", "value": float(value), "labels": {"flow": flow_label(r.key)}})
    return out


def flow_state(f: JobFlow, owd: FlowOwd) -> dict:
    r = f.rates.reading
    found = owd.get(flow_label(r.key), {})
    return {"jobid": f.jobid, "pid": f.pid, "flow": flow_label(r.key), "tx_bps": f.rates.tx_bps,
            "rx_bps": f.rates.rx_bps, "bytes_acked": r.bytes_acked, "bytes_received": r.bytes_received,
            "retransmits": r.retransmits, "rtt_us": r.rtt_us, "cwnd": r.cwnd, "delivery_bps": r.delivery_rate_bps,
            "owd": {d: s.as_dict() if (s := found.get(d)) else None for d in DIRECTIONS}}


def state(view: WorkloadView, owd: FlowOwd | None = None) -> dict:
    """The view as published state (JSON), with each flow's one-way delays where known."""
    return {
        "jobs": [{"jobid": j.jobid, "source": j.source, "ranks": j.ranks, "runs": j.runs, "start_s": j.start_s,
                  "pids": [p.pid for p in j.processes], "hidden_processes": j.hidden} for j in view.jobs.values()],
        "flows": [flow_state(f, owd or {}) for f in view.flows],
        "ended_flows": [flow_label(k) for k in view.ended],
        "other_flows": view.other_flows,
        "flows_readable": view.flows_readable,
    }


def summary(view: WorkloadView) -> dict:
    """A push's agent info: counts, what could not be seen, and each job process with its pid
    (bounded by what runs on the host, and replaced each push: never a series label)."""
    return {"jobs": len(view.jobs), "job_flows": len(view.flows), "other_flows": view.other_flows,
            "flows_readable": view.flows_readable,
            "hidden_processes": sum(j.hidden for j in view.jobs.values()),
            "processes": [{**dict(process_labels(j.jobid, j.source, p)), "pid": p.pid, "start_s": p.start_s}
                          for j in view.jobs.values() for p in j.processes]}
