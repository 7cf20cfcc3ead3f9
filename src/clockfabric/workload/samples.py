"""A workload view as the agent hands it on: samples for the controller's push, and the
state the agent publishes (which its /metrics reads).

Samples, each labelled with `jobid` (never `job`: Prometheus owns that label):
  job_processes           how many processes of the job run here, per (rank, run, source, visible)
  job_start_seconds       the earliest start (s since the epoch) of those processes, same labels
                          (no pid label: a label that grows with each process would make series
                          without bound; the pids are in the push's info, `processes`)
  job_flow_<stat>         one per flow group and stat (FLOW_STATS): the job's flows summed by
                          flowgroups (label flow: "local->remote", addresses, never a port)
  other_flow_<stat>       tx_bps and rtt_us of the flows of no job that send (monitor.BUSY_BPS), by group
  job_flow_owd_<dir>_<s>  the group's one-way delay out (local to remote) and in, over the last window
                          (OWD_FIELDS: min/p50/p99 in ns, samples, fallback: 1 where it is RTT/2)
  job_flow_path           where the group's flows go (value: how many): labels via (the switch
  other_flow_path         traced through, "" if not) and dscp (what the socket marks, "" if unknown)
  nic_egress_queue_ns     each fabric NIC's own egress queue (qos.backlog: its root qdisc's backlog
                          at the rate it drains at, the median of the update's readings at random
                          instants), label device: the part of every path from here
                          that the in-band delays, timed after it, do not see; where the root qdisc
                          sorts packets into classes by DSCP, also each class's, labels device and
                          dscp: what a packet of that DSCP waits
  nic_bps                 each fabric NIC's bits a second, labels device and direction (tx, rx):
                          the load on the host's own links, every packet's, its flow reported or not
Each flow's 5-tuple, pid and readings are in the push's info (`flows`) and the published state.
A flow's rates appear from its second reading on.
"""

from __future__ import annotations

from collections import Counter
from collections.abc import Callable

from clockfabric.traffic.steer_decide import FlowKey
from clockfabric.workload import flowgroups
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
    "send_queue_bytes": lambda f: f.rates.reading.send_queue_bytes,
}

PROCESSES, START = "job_processes", "job_start_seconds"
EGRESS = "nic_egress_queue_ns"
NIC_BPS = "nic_bps"  # labels device, direction (tx, rx): what crossed the host's own links
INFO_FLOWS = 1_000  # a push names at most this many flows: its size stays bounded too
DIRECTIONS = ("out", "in")  # from the flow's local end to its remote one, and back
OWD_FIELDS = ("min_ns", "p50_ns", "p99_ns", "samples", "fallback")
OWD_SAMPLES = [f"job_flow_owd_{d}_{f}" for d in DIRECTIONS for f in OWD_FIELDS]
FlowOwd = dict[str, dict[str, OwdStats | None]]  # flow label -> direction -> its last window
Via = Callable[[FlowKey], str | None]  # a flow's traced switch, None where not known


def path_samples(name: str, labels: dict[str, str], flows: list[FlowRates], via: Via | None) -> list[dict]:
    """A group's path samples: one per switch (via, "" where not traced) and DSCP ("" where unknown)
    its flows go through, the value how many of them; none for a flow where neither is known. The
    DSCP is a sending socket's only: a group holds a job's receiving ends too (the peer's flow
    back to this host), whose marks say nothing of the class the job's data rides in."""
    counts: Counter[tuple[str, str]] = Counter()
    for r in flows:
        switch = via(r.key) if via else None
        dscp = r.reading.dscp if r.reading.bytes_acked > 0 else None
        if switch is not None or dscp is not None:
            counts[switch or "", "" if dscp is None else str(dscp)] += 1
    return [{"name": name, "value": float(n), "labels": {**labels, "via": switch, "dscp": dscp}}
            for (switch, dscp), n in sorted(counts.items())]


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
    owd = owd or {}
    for (jobid, pair), flows in flowgroups.by_pair(view.flows, lambda f: (f.jobid, f.rates.key)).items():
        labels = {"jobid": str(jobid), "flow": pair}
        for stat, read in FLOW_STATS.items():
            if (value := flowgroups.combine(stat, [float(v) for f in flows if (v := read(f)) is not None])) is not None:
                out.append({"name": f"job_flow_{stat}", "value": value, "labels": labels})
        for direction in DIRECTIONS:
            found = [d for f in flows if (d := owd.get(flow_label(f.rates.key), {}).get(direction))]
            for name, v in (owd_values(stats) if (stats := flowgroups.combine_owd(found)) else {}).items():
                out.append({"name": f"job_flow_owd_{direction}_{name}", "value": float(v), "labels": labels})
        out += path_samples("job_flow_path", labels, [f.rates for f in flows], via)
    for (_, pair), rates in flowgroups.by_pair(view.busy_others, lambda r: (None, r.key)).items():
        out += path_samples("other_flow_path", {"flow": pair}, rates, via)
        for stat, values in (("tx_bps", [r.tx_bps for r in rates if r.tx_bps is not None]),
                             ("rtt_us", [float(r.reading.rtt_us) for r in rates if r.reading.rtt_us is not None])):
            if (value := flowgroups.combine(stat, values)) is not None:
                out.append({"name": f"other_flow_{stat}", "value": value, "labels": {"flow": pair}})
    return out


def egress_samples(queues_s: dict[str, float], by_dscp: dict[str, dict[int, float]] | None = None) -> list[dict]:
    """Each NIC's whole egress queue, and each DSCP's where the NIC sorts packets into classes."""
    def sample(s: float, **labels: str) -> dict:
        return {"name": EGRESS, "value": round(s * 1e9), "labels": labels}
    return [sample(s, device=nic) for nic, s in sorted(queues_s.items())] + [
        sample(s, device=nic, dscp=str(dscp))
        for nic, waits in sorted((by_dscp or {}).items()) for dscp, s in sorted(waits.items())]


def nic_samples(rates_bps: dict[str, tuple[float, float]], read_ns: int) -> list[dict]:
    """Each NIC's rate each way: the load on the host's own links, flows reported or not. Stamped
    when read, not when sent: a push late behind a slow link still says which span it counts."""
    return [{"name": NIC_BPS, "value": round(bps), "labels": {"device": nic, "direction": way}, "t_ns": read_ns}
            for nic, both in sorted(rates_bps.items()) for way, bps in zip(("tx", "rx"), both, strict=True)]


def flow_state(f: JobFlow, owd: FlowOwd) -> dict:
    r = f.rates.reading
    found = owd.get(flow_label(r.key), {})
    return {"jobid": f.jobid, "pid": f.pid, "flow": flow_label(r.key), "group": flowgroups.pair_label(r.key),
            "tx_bps": f.rates.tx_bps,
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
    """A push's agent info: counts, what could not be seen, each job process with its pid, and each
    job flow with its 5-tuple (the busiest INFO_FLOWS): what the series leave out, replaced each push."""
    busiest = sorted(view.flows, key=lambda f: -((f.rates.tx_bps or 0.0) + (f.rates.rx_bps or 0.0)))
    return {"jobs": len(view.jobs), "job_flows": len(view.flows), "other_flows": view.other_flows,
            "flows_readable": view.flows_readable,
            "hidden_processes": sum(j.hidden for j in view.jobs.values()),
            "processes": [{**dict(process_labels(j.jobid, j.source, p)), "pid": p.pid, "start_s": p.start_s}
                          for j in view.jobs.values() for p in j.processes],
            "flows": [{"jobid": f.jobid, "flow": flow_label(f.rates.key), "group": flowgroups.pair_label(f.rates.key),
                       "pid": f.pid, "tx_bps": f.rates.tx_bps, "rx_bps": f.rates.rx_bps,
                       "rtt_us": f.rates.reading.rtt_us} for f in busiest[:INFO_FLOWS]],
            "flows_left_out": max(0, len(busiest) - INFO_FLOWS)}
