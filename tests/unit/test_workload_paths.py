"""Each flow's switch, traced from its own 5-tuple and cached per flow; its DSCP from sock_diag;
both pushed as job_flow_path / other_flow_path the way the root cause reads them."""

from __future__ import annotations

from types import SimpleNamespace

from clockfabric.controller.rootcause_inputs import Places, flows_from
from clockfabric.controller.series.sample import Sample
from clockfabric.topology import interfaces, leafspine
from clockfabric.traffic.steer_decide import FlowKey
from clockfabric.traffic.steer_kernel import dscp
from clockfabric.workload import samples
from clockfabric.workload.flows import FlowRates, SocketReading
from clockfabric.workload.monitor import JobFlow, WorkloadView
from clockfabric.workload.paths import FlowPaths

TOPO = leafspine(4, 2, 2)  # h0, h1 under leaf0; h2, h3 under leaf1; spine0, spine1
FAR = FlowKey("10.0.0.1", 40000, "10.0.0.3", 5201)  # h0 -> h2: through a spine
NEAR = FlowKey("10.0.0.1", 40001, "10.0.0.2", 5201)  # h0 -> h1: under leaf0


class Clock:
    def __init__(self) -> None:
        self.t = 0.0

    def __call__(self) -> float:
        return self.t


def tracer(answers: dict[int, str | None], calls: list):
    def trace(src, dst, flows, *, proto, ttl, device):
        calls.append((src, dst, list(flows), proto, ttl, device))
        return {f: answers.get(f[0]) for f in flows}
    return trace


def spine_address(name: str) -> str:
    """An address of the switch: what answers a trace at its hop."""
    return next(str(i.address.ip) for p, i in interfaces(TOPO).items() if p.node == name)


def test_a_far_flow_is_traced_from_its_own_five_tuple_and_cached():
    calls: list = []
    clock = Clock()
    spine = spine_address("spine1")
    paths = FlowPaths(TOPO, "h0", every_s=300, trace_fn=tracer({40000: spine}, calls), clock=clock,
                      device_of=lambda k: "eth0")
    paths.learn([FAR, NEAR])
    assert calls == [("10.0.0.1", "10.0.0.3", [(40000, 5201)], "tcp", 2, "eth0")]  # the near one: no spine
    assert paths.via(FAR) == "spine1" and paths.via(NEAR) is None
    clock.t = 100
    paths.learn([FAR])
    assert len(calls) == 1  # cached: a 5-tuple hashes the same way every time
    clock.t = 400
    paths.learn([FAR])
    assert len(calls) == 2  # stale: traced again


def test_ended_flows_are_forgotten_and_forget_traces_again():
    calls: list = []
    paths = FlowPaths(TOPO, "h0", trace_fn=tracer({40000: spine_address("spine0")}, calls), clock=Clock())
    paths.learn([FAR])
    assert paths.via(FAR) == "spine0"
    paths.learn([])
    assert paths.via(FAR) is None
    paths.learn([FAR])
    paths.forget()
    assert paths.due([FAR, NEAR]) == [FAR] and len(calls) == 2


def test_flows_outside_the_fabric_and_failed_traces_have_no_switch():
    from clockfabric.errors import ClockfabricError

    def refused(*a, **kw):
        raise ClockfabricError("path discovery sends raw probes, which needs root")

    paths = FlowPaths(TOPO, "h0", trace_fn=refused, clock=Clock())
    paths.learn([FAR, FlowKey("10.0.0.1", 1, "192.0.2.9", 80)])
    assert paths.via(FAR) is None and paths.traces == 0
    assert paths.due([FAR]) == [FAR]  # tried again later


def test_a_flow_missing_its_trace_is_logged_with_why_once_until_it_is_answered(caplog):
    import logging

    clock, answers = Clock(), {40000: None}
    paths = FlowPaths(TOPO, "h0", trace_fn=tracer(answers, []), clock=clock, device_of=lambda k: "eth0")
    with caplog.at_level(logging.INFO, logger="clockfabric.workload.paths"):
        paths.learn([FAR])
        clock.t = 3
        paths.learn([FAR])  # unanswered again: not logged again
        assert [r.getMessage() for r in caplog.records] == [
            "flow 10.0.0.1:40000 -> 10.0.0.3:5201 not traced (tried again later): nothing answered at TTL 2 "
            "out of eth0"]
        answers[40000] = spine_address("spine1")
        clock.t = 6
        paths.learn([FAR])
        assert paths.via(FAR) == "spine1" and not paths.missed
        answers[40000], clock.t = None, 400
        paths.learn([FAR])  # lost once more: logged once more
    assert len(caplog.records) == 2


def test_dscp_is_the_top_six_bits_of_the_sockets_tos():
    def msg(tos):
        return SimpleNamespace(get_attr=lambda name: tos if name == "INET_DIAG_TOS" else None)
    assert dscp(msg("68")) == 26 and dscp(msg("00")) == 0 and dscp(msg(None)) is None


def reading(key: FlowKey, mark: int | None, acked: int = 10_000) -> FlowRates:
    return FlowRates(SocketReading(key, 1, 1, acked, 0, 0, 100, 10, 0.0, mark), 5e6, 0.0, 0)


def test_path_samples_are_what_the_root_cause_reads():
    view = WorkloadView(flows=[JobFlow("A", 1, reading(FAR, 0))], busy_others=[reading(NEAR, None)])
    via = {FAR: "spine1"}.get
    pushed = [s for s in samples.push_samples(view, None, via) if s["name"].endswith("_flow_path")]
    assert pushed == [{"name": "job_flow_path", "value": 1.0,
                       "labels": {"jobid": "A", "flow": "10.0.0.1->10.0.0.3", "via": "spine1",
                                  "dscp": "0"}}]  # the other flow: no switch, no DSCP known: nothing
    stored = [Sample("h0", 1, s["name"], s["value"], s["labels"]) for s in pushed]
    stored.append(Sample("h0", 1, "job_flow_tx_bps", 5e6, {"jobid": "A", "flow": "10.0.0.1->10.0.0.3"}))
    places = Places(TOPO, {})
    (flow,) = flows_from(stored, places)
    assert flow.dscp == 0 and flow.peer == "h2"
    assert any("spine1" in name for name, _ in flow.hops)


def test_a_group_whose_connections_mark_two_classes_keeps_both():
    """A rank that marks another DSCP than its job, to the same peer: one group, two path samples.
    Both marks reach the verdict, whichever the engine answers last."""
    from clockfabric.controller.rootcause_fabric import Fabric
    from clockfabric.controller.rootcause_verdict import why

    key2 = FlowKey(FAR.local, FAR.lport + 1, FAR.remote, FAR.rport)
    view = WorkloadView(flows=[JobFlow("A", 1, reading(FAR, 26)), JobFlow("A", 2, reading(key2, 0))])
    pushed = [s for s in samples.push_samples(view, None, {FAR: "spine1", key2: "spine1"}.get)
              if s["name"] == "job_flow_path"]
    assert sorted(s["labels"]["dscp"] for s in pushed) == ["0", "26"]
    # the peer's flow back to this host, its receiving end here unmarked: no mark of the group's
    back = FlowKey(FAR.local, FAR.lport + 2, FAR.remote, FAR.rport)
    receiving = WorkloadView(flows=[JobFlow("A", 1, reading(FAR, 26)), JobFlow("A", 3, reading(back, 0, acked=0))])
    assert [s["labels"]["dscp"] for s in samples.push_samples(receiving, None, {FAR: "spine1", back: "spine1"}.get)
            if s["name"] == "job_flow_path"] == ["", "26"]
    for order in (pushed, pushed[::-1]):
        stored = [Sample("h0", t, s["name"], s["value"], s["labels"]) for s in order for t in (1, 2)]
        stored += [Sample("h0", t, "job_flow_tx_bps", 5e6, {"jobid": "A", "flow": "10.0.0.1->10.0.0.3"}) for t in (1, 2)]
        (flow,) = flows_from(stored, Places(TOPO, {}))
        assert flow.marks() == (0, 26) and flow.dscp is None
        v = why("A", [flow], Fabric(collective_dscp=(26,)), 3, 10)
        assert (v["verdict"], v["evidence"]["dscp"]) == ("misconfigured_class", [0])


def test_an_unanswered_trace_is_tried_again_soon():
    calls: list = []
    clock = Clock()
    paths = FlowPaths(TOPO, "h0", every_s=300, trace_fn=tracer({}, calls), clock=clock)
    paths.learn([FAR])
    clock.t = 1.0
    assert paths.due([FAR]) == []
    clock.t = 2.5  # its SYN may have been lost in the very queue the flow fills
    assert paths.due([FAR]) == [FAR]
