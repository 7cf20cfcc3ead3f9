"""Traffic classes: the topology's classes: section (parse, validate, round trip) and the tc
operations the lab builds from it, without a kernel."""

import socket

import pytest
import yaml

from clockfabric.agent.config import AgentConfig
from clockfabric.clock import ptp4l
from clockfabric.errors import ClockfabricError
from clockfabric.lab import shaping
from clockfabric.probe.engine import Marking, ProbeEngine
from clockfabric.topology import TopologyError, TrafficClasses, dumps, leafspine, parse


def one_leaf(**extra) -> dict:
    return {"name": "t", "hosts": [{"name": "h0"}, {"name": "h1"}], "switches": [{"name": "leaf0"}],
            "links": [{"a": "h0", "b": "leaf0"}, {"a": "h1", "b": "leaf0"}], **extra}


def problems_of(classes: object) -> list[str]:
    with pytest.raises(TopologyError) as e:
        parse(one_leaf(classes=classes))
    return e.value.problems


# ---- the topology section ------------------------------------------------------------------
def test_without_the_section_every_port_is_one_fifo():
    assert parse(one_leaf()).classes is None


@pytest.mark.parametrize("raw", [{}, None])
def test_an_empty_section_takes_every_default(raw):
    classes = parse(one_leaf(classes=raw)).classes
    assert classes == TrafficClasses()
    assert [(c.name, c.dscp, c.percent, c.prio) for c in classes.classes()] == [
        ("priority", (46, 48), 5.0, 0), ("collective", (26,), 70.0, 1), ("best-effort", (), 25.0, 2)]


def test_the_section_sets_dscp_and_shares():
    classes = parse(one_leaf(classes={"priority": {"dscp": 48, "cap": "2%"},
                                      "collective": {"dscp": [24, 26], "share": 60}})).classes
    assert classes == TrafficClasses((48,), 2.0, (24, 26), 60.0)
    assert classes.classes()[2].percent == 38.0
    assert [classes.class_of(d) for d in (48, 46, 24, 0)] == ["priority", "best-effort", "collective", "best-effort"]


def test_classes_survive_a_save_and_load():
    topo = parse(one_leaf(classes={"priority": {"dscp": [46], "cap": "2.5%"}}))
    again = parse(yaml.safe_load(dumps(topo)))
    assert again.classes == topo.classes == TrafficClasses((46,), 2.5)
    assert "classes:" not in dumps(leafspine(2, 1, 0))


@pytest.mark.parametrize(("classes", "says"), [
    ("yes", "'classes' must be a mapping"),
    ({"gold": {}}, "classes: unknown key 'gold'; known keys: priority, collective"),
    ({"priority": [46]}, "classes.priority must be a mapping"),
    ({"priority": {"rate": "5%"}}, "classes.priority: unknown key 'rate'; known keys: dscp, cap"),
    ({"priority": {"dscp": 64}}, "dscp 64 must be a DSCP (0..63)"),
    ({"priority": {"dscp": []}}, "must be a DSCP (0..63) or a list"),
    ({"priority": {"dscp": [46, True]}}, "must be a DSCP"),
    ({"priority": {"dscp": [46, 46]}}, "names a DSCP twice"),
    ({"priority": {"cap": "60%"}}, "cap '60%' must be a percent of the link from 0.1% to 50%"),
    ({"priority": {"cap": "fast"}}, "cap 'fast' must be a percent"),
    ({"collective": {"share": 0}}, "share 0 must be a percent"),
    ({"collective": {"dscp": [46]}}, "DSCP 46 is in both priority and collective"),
    ({"priority": {"cap": 30}, "collective": {"share": 70}}, "leave best-effort under 5%"),
])
def test_bad_sections_say_what_is_wrong_in_one_line(classes, says):
    problems = problems_of(classes)
    assert len(problems) == 1 and says in problems[0], problems
    assert "\n" not in problems[0]


# ---- what the lab hands the kernel -----------------------------------------------------------
def test_without_classes_a_port_is_htb_over_one_bfifo():
    ops = shaping.plan(100_000_000, 200, 1500)
    assert [(op.command, op.kind, op.handle) for op in ops] == [
        ("add", "htb", shaping.ROOT), ("add-class", "htb", shaping.CLASS), ("add", "bfifo", shaping.FIFO)]
    assert ops[0].params == {"default": 1}
    assert ops[1].params["rate"] == ops[1].params["ceil"] == 12_500_000
    assert ops[2].params == {"parent": shaping.CLASS, "limit": 200 * 1514}


def test_with_classes_a_port_has_capped_priority_over_two_borrowing_classes():
    ops = shaping.plan(100_000_000, 200, 9000, TrafficClasses())
    assert ops[0].params == {"default": 0x30}  # best-effort takes what no filter matches
    leaves = {op.handle: op.params for op in ops if op.command == "add-class" and op.handle != shaping.CLASS}
    pri, col, be = (leaves[shaping.LEAVES[n]] for n in ("priority", "collective", "best-effort"))
    assert (pri["prio"], pri["rate"], pri["ceil"]) == (0, 625_000, 625_000)  # 5% of 100 Mbit/s, never more
    assert (col["prio"], col["rate"], col["ceil"]) == (1, 8_750_000, 12_500_000)
    assert (be["prio"], be["rate"], be["ceil"]) == (2, 3_125_000, 12_500_000)
    assert all(p["parent"] == shaping.CLASS and p["quantum"] == 4 * 9000 for p in leaves.values())  # no r2q warning
    fifos = {op.params["parent"]: op.params["limit"] for op in ops if op.kind == "bfifo"}
    assert fifos == dict.fromkeys(shaping.LEAVES.values(), 200 * 9014)
    filters = [(op.params["target"], op.params["keys"]) for op in ops if op.kind == "u32"]
    assert filters == [(0x10010, ["0x00b80000/0x00fc0000+0"]), (0x10010, ["0x00c00000/0x00fc0000+0"]),
                       (0x10020, ["0x00680000/0x00fc0000+0"])]
    assert all(op.params["protocol"] == shaping.ETH_P_IP for op in ops if op.kind == "u32")


def first_word(tos: int) -> int:
    """An IPv4 header's first 32 bits: version, IHL, TOS, total length."""
    return (4 << 28) | (5 << 24) | (tos << 16) | 1500


def test_the_dscp_key_matches_the_tos_byte_ignoring_ecn():
    value, mask = (int(x, 16) for x in shaping.dscp_key(46).removesuffix("+0").split("/"))
    assert all(first_word(tos) & mask == value for tos in (0xB8, 0xB9, 0xBA, 0xBB))  # EF, any ECN
    assert first_word(0xC0) & mask != value and first_word(0) & mask != value


# ---- the agent's probe DSCP --------------------------------------------------------------------
def test_the_agent_marks_probes_ef_unless_told_and_refuses_a_bad_dscp(tmp_path):
    topo = leafspine(2, 1, 0)
    assert AgentConfig("h0", topo, tmp_path).probe_dscp == 46
    assert AgentConfig("h0", topo, tmp_path, probe_dscp=0).probe_dscp == 0
    with pytest.raises(ClockfabricError, match="probe DSCP 64 must be 0..63"):
        AgentConfig("h0", topo, tmp_path, probe_dscp=64)


@pytest.mark.parametrize("dscp", [46, 0])
def test_every_probe_socket_carries_the_dscp(dscp):
    engine = ProbeEngine("127.0.0.1", {"a": "127.0.0.1"}, [], rails=[None], ports=2, base_port=47310,
                         marking=Marking(dscp))
    socks = [p.sock for p in engine._paths + engine._reflectors]
    try:
        assert [s.getsockopt(socket.IPPROTO_IP, socket.IP_TOS) for s in socks] == [dscp << 2] * 4
    finally:
        for s in socks:
            s.close()


def test_ptp4l_marks_its_packets_like_the_probes():
    conf = ptp4l.COMMON.format(sync=-4, dscp=46, uds="/tmp/x.sock")
    assert "dscp_event 46\n" in conf and "dscp_general 46\n" in conf
