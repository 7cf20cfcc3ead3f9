"""The agent's Prometheus /metrics: hardware telemetry read at scrape time (as node_exporter
does), clock sync and one-way delays from the agent's last update.

Every sample carries a `host` label. Names follow the design's conventions: the
`clockfabric_` prefix, `_total` counters, units in names; known names (node_network_*,
DCGM_FI_*) are kept as their own exporters spell them, so existing dashboards work.
"""

from __future__ import annotations

from collections.abc import Callable, Iterator

from prometheus_client import CollectorRegistry, start_http_server
from prometheus_client.core import CounterMetricFamily, GaugeMetricFamily
from prometheus_client.core import Metric as Family

from clockfabric.telemetry.base import Collectors, Metric
from clockfabric.workload.flowgroups import combine_owd_dicts
from clockfabric.workload.samples import DIRECTIONS

NS = 1e-9
PUSH_HELP = {"quarantined": "Events the controller refused as invalid: dropped, so that the ones after them go on",
             "failures": "Pushes the controller could not take then (sent again)"}


def clock_metrics(state: dict) -> list[Metric]:
    """Clock sync as metrics, from the state the agent publishes each update."""
    out = []
    if m := state.get("mapping"):
        out += [Metric("clockfabric_clock_offset_seconds", m["offset_ns"] * NS,
                       help="This host's clock minus global time, at the mapping's epoch"),
                Metric("clockfabric_clock_drift_ratio", m["drift"],
                       help="Rate of this clock against global time, minus 1"),
                Metric("clockfabric_clock_uncertainty_seconds", m["uncertainty_ns"] * NS,
                       help="Bound on this clock's offset from global time, at the mapping's epoch"),
                Metric("clockfabric_clock_synced", float(m["synced"]), help="1 if tied to the reference clock")]
    out.append(Metric("clockfabric_clock_graph_parts", float(state.get("parts", 0)),
                      help="Parts the probe graph is split into (1 when whole)"))
    for peer, p in state.get("pairs", {}).items():
        labels = {"peer": peer}
        out += [Metric("clockfabric_clock_pair_exchanges_total", p["exchanges"], labels, "counter",
                       "Probe exchanges with the peer"),
                Metric("clockfabric_clock_pair_steps_total", p["steps"], labels, "counter",
                       "Clock steps detected on the pair")]
    for row in state.get("owd", []):
        direction = "out" if row["src"] == state["host"] else "back"
        labels = {"peer": row["dst"] if direction == "out" else row["src"], "path": row["path"],
                  "direction": direction}
        for stat in ("min", "p50", "p99", "floor"):
            out.append(Metric(f"clockfabric_owd_{stat}_seconds", row[f"{stat}_ns"] * NS, labels,
                              help=f"One-way delay {stat} over the last window, by synced clocks"))
    for channel, reasons in state.get("auth", {}).get("rejected", {}).items():
        for reason, n in reasons.items():
            out.append(Metric("clockfabric_auth_rejected_total", float(n), {"channel": channel, "reason": reason},
                              "counter", "Datagrams refused: not sealed by a fleet key, replayed, or from a "
                              "host whose role does not allow them"))
    if "auth" in state:
        out.append(Metric("clockfabric_auth_secure", float(state["auth"]["secure"]),
                          help="1 if the agent seals and checks its datagrams with a fleet key"))
    for name, value in state.get("counters", {}).items():
        out.append(Metric(f"clockfabric_probe_{name}_total", float(value), kind="counter",
                          help=f"Probe engine counter: {name.replace('_', ' ')}"))
    for name, value in state.get("push", {}).items():
        out.append(Metric(f"clockfabric_push_{name}_total", float(value), kind="counter",
                          help=PUSH_HELP.get(name, name)))
    if events := state.get("events"):
        out += [Metric("clockfabric_agent_events_held", float(events["held"]),
                       help="Events held (in the event log) until the controller has them"),
                Metric("clockfabric_agent_events_sent_total", float(events["sent"]), kind="counter",
                       help="Events the controller has taken"),
                Metric("clockfabric_agent_events_dropped_total", float(events["dropped"]), kind="counter",
                       help="Events dropped, oldest first, because the event log was full")]
    for name, f in state.get("service_failures", {}).items():
        out.append(Metric("clockfabric_agent_service_failures_total", float(f["count"]), {"service": name},
                          "counter", "Calls of the agent service that raised (the agent went on without them)"))
    return out


def owd_metrics(labels: dict, owd: dict) -> list[Metric]:
    """A flow's one-way delays over the last window, per direction ("out": local to remote, "in")."""
    out = []
    for direction, stats in owd.items():
        if not stats:
            continue
        at = {**labels, "direction": direction}
        out += [Metric(f"clockfabric_job_flow_owd_{q}_seconds", stats[f"{q}_ns"] * NS, at,
                       help=f"One-way delay {q} of the flow's own packets over the last window (RTT/2 if fallback)")
                for q in ("min", "p50", "p99")]
        out += [Metric("clockfabric_job_flow_owd_samples", float(stats["samples"]), at,
                       help="Packets the last window's one-way delays were measured on"),
                Metric("clockfabric_job_flow_owd_fallback", float(stats["source"] != "inband"), at,
                       help="1 where the one-way delay is RTT/2: no packet matched, or clocks not synced")]
    return out


def workload_metrics(state: dict) -> list[Metric]:
    """Jobs and their flow groups (labels `jobid` and `flow`, the group's ends; `job` is
    Prometheus's own), from the workload service's last update."""
    w = state.get("workload")
    if not w:
        return []
    out = []
    for j in w["jobs"]:
        labels = {"jobid": j["jobid"]}
        out += [Metric("clockfabric_job_processes", float(len(j["pids"])), labels,
                       help="The job's processes on this host"),
                Metric("clockfabric_job_start_seconds", j["start_s"], labels,
                       help="When the job's first process on this host started, seconds since the epoch")]
    groups: dict[tuple[str, str], list[dict]] = {}
    for f in w["flows"]:  # summed per flow group as the pushed series are: a label never holds a port
        groups.setdefault((f["jobid"], f["group"]), []).append(f)
    for (jobid, group), flows in groups.items():
        labels = {"jobid": jobid, "flow": group}
        out += [Metric("clockfabric_job_flow_acked_bytes_total", float(sum(f["bytes_acked"] for f in flows)), labels,
                       "counter", "Bytes the group's connections sent that the peer acknowledged"),
                Metric("clockfabric_job_flow_received_bytes_total", float(sum(f["bytes_received"] for f in flows)),
                       labels, "counter", "Bytes the group's connections received"),
                Metric("clockfabric_job_flow_retransmits_total", float(sum(f["retransmits"] for f in flows)), labels,
                       "counter", "Segments the group's connections retransmitted"),
                Metric("clockfabric_job_flow_rtt_seconds", max(f["rtt_us"] for f in flows) * 1e-6, labels,
                       help="Smoothed RTT of the group's slowest connection"),
                Metric("clockfabric_job_flow_cwnd_segments", float(max(f["cwnd"] for f in flows)), labels,
                       help="The largest congestion window among the group's connections")]
        out += owd_metrics(labels, {d: combine_owd_dicts((f.get("owd") or {}).get(d) for f in flows)
                                    for d in DIRECTIONS})
    out.append(Metric("clockfabric_workload_cpu_seconds_total", w["cpu_seconds"], kind="counter",
                      help="CPU time the agent spent reading jobs and flows"))
    if inband := w.get("inband"):
        out += [Metric("clockfabric_inband_sampled_packets_total", float(inband["sampled_packets"]), kind="counter",
                       help="Sampled packets read for in-band one-way delays"),
                Metric("clockfabric_inband_cpu_seconds_total", inband["cpu_seconds"], kind="counter",
                       help="CPU time the agent spent reading sampled packets")]
    return out


def qos_metrics(state: dict) -> list[Metric]:
    """Each job's QoS on this host (label `jobid`) and whether the kernel refused the policies."""
    q = state.get("qos")
    if not q:
        return []
    out = [Metric("clockfabric_qos_refused", float(bool(q["refused"])),
                  help="1 while the kernel refuses this host's QoS policies (the host keeps what it had)")]
    for jobid, j in q["jobs"].items():
        labels = {"jobid": jobid, "class": j["class"]}
        out += [Metric("clockfabric_qos_marked_packets_total", float(j["marked_packets"]), labels, "counter",
                       "Packets of the job marked with its class's DSCP on this host"),
                Metric("clockfabric_qos_sockets", float(j["sockets"]), labels, help="The job's sockets marked")]
    return out


class AgentMetrics:
    """A prometheus_client collector over the agent's telemetry and its latest state."""

    def __init__(self, host: str, collectors: Collectors, state: Callable[[], dict | None]):
        self.host = host
        self.collectors = collectors
        self.state = state

    def collect(self) -> Iterator[Family]:
        metrics = self.collectors.collect().metrics
        if (state := self.state()) is not None:
            metrics += clock_metrics(state) + workload_metrics(state) + qos_metrics(state)
        # name -> family, its label names
        families: dict[str, tuple[CounterMetricFamily | GaugeMetricFamily, list[str]]] = {}
        for m in metrics:
            labels = {"host": self.host, **m.labels}
            if m.name not in families:
                cls = CounterMetricFamily if m.kind == "counter" else GaugeMetricFamily
                families[m.name] = cls(m.name, m.help or m.name, labels=list(labels)), list(labels)
            fam, names = families[m.name]
            fam.add_metric([labels.get(k, "") for k in names], m.value)
        yield from (fam for fam, _ in families.values())


def serve(metrics: AgentMetrics, address: str, port: int):
    """/metrics on address:port in a thread of its own; returns the server (shutdown() stops it)."""
    registry = CollectorRegistry(auto_describe=False)
    registry.register(metrics)
    server, _ = start_http_server(port, addr=address, registry=registry)
    return server
