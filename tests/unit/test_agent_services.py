"""The agent as a router of services: control messages to the service that declared their type,
the services' registry, and which telemetry collectors an agent runs."""

from __future__ import annotations

import json
import math
from types import SimpleNamespace

import pytest

from clockfabric.agent.config import AgentConfig
from clockfabric.agent.metrics import clock_metrics
from clockfabric.agent.service import SERVICES, Polls, Router, Service, Supervisor, chosen
from clockfabric.agent.services.claims import Claims
from clockfabric.agent.services.telemetry import Telemetry
from clockfabric.errors import ClockfabricError
from clockfabric.telemetry.base import COLLECTORS
from clockfabric.topology import leafspine, multirail


class Recorder(Service):
    def __init__(self, name: str, *kinds: str):
        self.name = name
        self.handles = frozenset(kinds)
        self.got: list[tuple[dict, tuple[str, int]]] = []

    def on_message(self, msg, reply_to):
        self.got.append((msg, reply_to))


def send(router: Router, msg) -> None:
    router.deliver(json.dumps(msg).encode(), ("10.0.0.2", 7400))


def test_a_message_goes_to_the_service_that_declared_its_type():
    clock, claims = Recorder("clock", "map", "report"), Recorder("claims", "place")
    router = Router([clock, claims])
    send(router, {"t": "place", "job": "j1"})
    send(router, {"t": "map", "maps": {}})
    assert claims.got == [({"t": "place", "job": "j1"}, ("10.0.0.2", 7400))]
    assert [m["t"] for m, _ in clock.got] == ["map"]
    assert router.bad_messages == 0


def test_the_router_names_the_services_it_handed_messages_since_last_asked():
    clock, claims = Recorder("clock", "map"), Recorder("claims", "place")
    router = Router([clock, claims])
    send(router, {"t": "map", "maps": {}})
    send(router, {"t": "nobody's"})
    assert router.taken() == {clock}
    assert router.taken() == set()


def test_a_message_its_service_says_moves_nothing_sooner_does_not_poll_it():
    clock, qos = Recorder("clock", "map", "report"), Recorder("qos", "qos_queues")
    clock.on_message = lambda msg, reply_to: msg["t"] != "report"  # type: ignore[method-assign]
    router = Router([clock, qos])
    send(router, {"t": "report"})
    send(router, {"t": "qos_queues"})
    assert router.taken() == {qos}  # handed, not polled for it
    send(router, {"t": "report"})
    send(router, {"t": "map"})
    send(router, {"t": "report"})  # a later one does not take back an earlier one's poll
    assert router.taken() == {clock}


def test_a_service_is_polled_at_its_time_and_after_its_messages_alone():
    clock, qos, lldp = Recorder("clock", "map"), Recorder("qos", "qos_queues"), Recorder("lldp")
    polls = Polls([clock, qos, lldp])
    assert polls.due(0.0, set()) == [clock, qos, lldp]  # each once at start
    polls.asked(clock, math.inf)
    polls.asked(qos, 0.1)
    polls.asked(lldp, 5.0)
    assert polls.next_s() == 0.1
    assert polls.due(0.1, set()) == [qos]  # the pacer's wake-ups poll the pacer alone
    polls.asked(qos, 0.2)
    assert polls.due(0.15, {clock}) == [clock]  # a message polls its own service at once
    polls.asked(clock, math.inf)
    assert polls.due(1.0, set()) == [qos]  # no one else's time came: the update polls them
    polls.asked(qos, math.inf)
    assert polls.next_s() == 5.0
    assert polls.due(5.0, set()) == [lldp]
    assert Polls([]).next_s() == math.inf


def test_a_type_declared_by_two_services_fails_at_start():
    with pytest.raises(ValueError, match="'map' is claimed by both the clock and the other service"):
        Router([Recorder("clock", "map"), Recorder("other", "map")])


@pytest.mark.parametrize("data", [json.dumps({"t": "nobody"}).encode(), json.dumps({"no": "type"}).encode(),
                                  b"not json", json.dumps(["t"]).encode(), json.dumps({"t": ["x"]}).encode()])
def test_an_unknown_or_malformed_message_is_counted_not_raised(data):
    clock = Recorder("clock", "map")
    router = Router([clock])
    router.deliver(data, ("10.0.0.2", 7400))
    assert router.bad_messages == 1 and clock.got == []


def test_a_service_that_raises_on_a_bad_field_counts_the_message_bad():
    class Strict(Service):
        name, handles = "strict", frozenset({"x"})

        def on_message(self, msg, reply_to):
            int(msg["n"])

    router = Router([Strict()])
    send(router, {"t": "x"})
    send(router, {"t": "x", "n": "many"})
    send(router, {"t": "x", "n": 3})
    assert router.bad_messages == 2


def test_the_agents_services_declare_disjoint_message_types():
    router = Router(entry.factory for entry in SERVICES.entries())  # the classes carry name and handles
    assert SERVICES.names() == ["clock", "claims", "lldp", "failover", "telemetry", "workload", "qos",
                               "controller"]
    assert {kind: s.name for kind, s in router.routes.items()} == {
        "report": "clock", "map": "clock", "stepped": "clock",
        "place": "claims", "release": "claims", "loads": "claims", "claims": "claims", "inband": "workload",
        "qos_queues": "qos"}


def wanted(cfg: AgentConfig) -> list[str]:
    return [e.name for e in SERVICES.entries() if e.meta["wanted"](cfg)]


def test_failover_and_controller_services_run_only_when_configured(tmp_path):
    topo = leafspine(4, 2, 2)
    assert wanted(AgentConfig("h0", topo, tmp_path)) == ["clock", "claims", "lldp", "telemetry", "workload", "qos"]
    assert wanted(AgentConfig("h0", topo, tmp_path, controller="http://c:9400", failover=True)) == [
        "clock", "claims", "lldp", "failover", "telemetry", "workload", "qos", "controller"]


def test_a_disabled_service_is_not_run_and_the_rest_keep_their_order(tmp_path):
    topo = leafspine(4, 2, 2)
    cfg = AgentConfig("h0", topo, tmp_path, controller="http://c:9400", failover=True, disabled=("workload", "lldp"))
    assert [e.name for e in chosen(cfg)] == ["clock", "claims", "failover", "telemetry", "qos", "controller"]
    assert [e.name for e in chosen(AgentConfig("h0", topo, tmp_path))] == wanted(AgentConfig("h0", topo, tmp_path))


def test_an_unknown_service_name_is_one_clear_error_naming_the_known(tmp_path):
    with pytest.raises(ClockfabricError, match="no service named 'workloads'; services are ") as e:
        AgentConfig("h0", leafspine(4, 2, 2), tmp_path, disabled=("workloads",))
    assert str(e.value).split("are ")[1].split(", ") == SERVICES.names()


def test_disabling_failover_turns_it_off_and_contradicts_asking_for_it(tmp_path):
    topo = leafspine(4, 2, 2)
    two_nics = multirail(4, 2, 2, 2)
    assert AgentConfig("h0", two_nics, tmp_path).failover is True
    assert AgentConfig("h0", two_nics, tmp_path, disabled=("failover",)).failover is False
    with pytest.raises(ClockfabricError, match="--failover and --disable failover contradict"):
        AgentConfig("h0", topo, tmp_path, failover=True, disabled=("failover",))
    with pytest.raises(ClockfabricError, match="--steer needs failover"):
        AgentConfig("h0", topo, tmp_path, steer=True, disabled=("failover",))


def test_agent_help_lists_every_service_it_can_disable():
    from typer.testing import CliRunner

    from clockfabric.cli.main import build_app

    shown = CliRunner().invoke(build_app("agent"), ["agent", "--help"], env={"COLUMNS": "400"})
    assert shown.exit_code == 0 and "--disable" in shown.output
    assert f"(repeatable): {', '.join(SERVICES.names())}." in " ".join(shown.output.split())


def fake_context(topo, **cfg):
    sent, replies = [], []
    ctx = SimpleNamespace(cfg=AgentConfig("h0", topo, "/nonexistent", **cfg), rails=["eth0"], links=None,
                          neighbours=None, address="10.0.0.1", latest=None,
                          send=lambda host, msg: sent.append((host, msg)),
                          reply=lambda msg, to: replies.append((msg, to)))
    return ctx, sent, replies


def test_claims_placed_through_the_router_are_answered_and_told_to_the_leafmates():
    topo = leafspine(4, 2, 2)  # h0, h1 under leaf0
    ctx, sent, replies = fake_context(topo)
    claims = Claims(ctx)
    router = Router([claims])
    send(router, {"t": "place", "job": "j1", "want": [[1, ["spine0", "spine1"]]]})  # 1 subflow, over either
    assert router.bad_messages == 0
    (answer, to), = replies
    assert answer["t"] == "placed" and answer["job"] == "j1"
    assert len(answer["hops"][0]) == 1 and answer["hops"][0][0] in ("spine0", "spine1")
    assert to == ("10.0.0.2", 7400)
    assert claims.leafmates == ["h1"] and [h for h, m in sent if m["t"] == "claims"] == ["h1"]
    assert claims.report()["claims"]["placements"] == 1


def test_collectors_run_by_default_plus_enabled_less_disabled(tmp_path):
    topo = leafspine(4, 2, 2)
    ctx, _, _ = fake_context(topo, metrics_port=0, no_collectors=("links", "nvidia_gpu", "amd_gpu"))
    telemetry = Telemetry(ctx)
    # (in the order their modules were first imported: here, maybe by other tests)
    assert sorted(c.name for c in telemetry.collectors.all) == ["lldp", "nic", "rdma"]
    assert "lldp" in telemetry.report()["telemetry_not_present"]  # no listener given: absent, said why
    assert {e.name for e in COLLECTORS.enabled(disable=["rdma"])} == {"nic", "links", "lldp", "nvidia_gpu", "amd_gpu"}


def test_an_unknown_collector_name_is_one_clear_error_naming_the_known(tmp_path):
    topo = leafspine(4, 2, 2)
    with pytest.raises(ClockfabricError, match="no collector named 'nvme'; collectors are ") as e:
        AgentConfig("h0", topo, tmp_path, no_collectors=("nvme",))
    assert set(str(e.value).split("are ")[1].split(", ")) == {"nic", "links", "lldp", "rdma", "nvidia_gpu", "amd_gpu"}
    with pytest.raises(ClockfabricError, match="'nic' is both enabled and disabled"):
        AgentConfig("h0", topo, tmp_path, collectors=("nic",), no_collectors=("nic",))


class Broken(Service):
    """A service whose tick fails every time, as a socket on a NIC that went away would."""

    name = "broken"

    def __init__(self):
        self.ticks = 0

    def tick(self, now_ns):
        self.ticks += 1
        raise OSError(100, "Network is down")


def test_a_failing_service_costs_its_call_not_the_caller_and_is_counted(caplog):
    sup, broken, fine = Supervisor(), Broken(), Recorder("fine")
    with caplog.at_level("ERROR"):
        for _ in range(3):
            assert sup.call(broken, broken.tick, 0, default=None) is None
            assert sup.call(fine, fine.report, default={"x": 1}) == {}  # a working service's answer, not the default
    assert broken.ticks == 3
    assert sup.call(broken, broken.poll, 0.0, default=7.0) == math.inf  # poll does not raise: its own answer
    report = sup.report()["service_failures"]
    assert list(report) == ["broken"] and report["broken"]["count"] == 3
    assert report["broken"]["last"] == "tick: OSError: [Errno 100] Network is down"
    logged = [r for r in caplog.records if "broken service's tick failed" in r.getMessage()]
    assert len(logged) == 1 and logged[0].exc_info  # its traceback, once a minute, not every tick


def test_service_failures_become_a_counter_by_service():
    metrics = clock_metrics({"service_failures": {"workload": {"count": 4, "last": "tick: OSError"}}})
    [m] = [m for m in metrics if m.name == "clockfabric_agent_service_failures_total"]
    assert m.value == 4.0 and m.labels == {"service": "workload"} and m.kind == "counter"
