"""Discover's assembly: a fleet file from recorded LLDP neighbour samples and agents' info, and
switches' own LLDP tables."""

import sys
from pathlib import Path

import pytest
import yaml

from clockfabric.errors import ClockfabricError
from clockfabric.topology import dumps, leafspine, load, multirail, parse
from clockfabric.topology.discover import Heard, assemble, heard_from_samples, with_switches
from clockfabric.topology.model import Topology
from clockfabric.topology.switch_table import Neighbour, SwitchTable

FIXTURES = Path(__file__).parents[1] / "fixtures" / "lldp"  # real lldpd and snmpwalk output: test_switch_lldp.py


def read(name: str) -> str:
    return (FIXTURES / name).read_text()


def recorded(topo: Topology, *, switch_agents: bool = True) -> tuple[dict[str, dict], list[Heard]]:
    """What a running fleet reports: every host's address, and each end of each cable hearing the other."""
    nodes: dict[str, dict] = {h.name: {"address": str(h.address)} for h in topo.hosts.values()}
    if switch_agents:
        nodes |= {s: {"role": "switch"} for s in topo.switches}
    heard = []
    for lk in topo.links:
        for here, there in ((lk.a, lk.b), (lk.b, lk.a)):
            if here.node in nodes:
                heard.append(Heard(here.node, here.iface, str(there)))
    return nodes, heard


def shape(topo: Topology) -> tuple:
    return ({h.name: (str(h.address), h.nics) for h in topo.hosts.values()}, topo.switches,
            {frozenset((lk.a, lk.b)) for lk in topo.links})


@pytest.mark.parametrize("topo", [leafspine(8, 2, 2), multirail(6, 2, 2, 1), multirail(4, 4, 1, 0),
                                  leafspine(12, 3, 2)], ids=lambda t: t.name)
def test_a_recorded_fleet_assembles_to_the_same_hosts_switches_links_and_planes(topo):
    found = assemble(*recorded(topo))
    assert shape(found) == shape(topo)
    assert parse(yaml.safe_load(dumps(found))).hosts == found.hosts


def test_without_switch_agents_hosts_still_find_their_leaves():
    """Real switches run no agent: the hosts' hearing alone gives each leaf and host cable."""
    topo = multirail(4, 2, 1, 0)
    found = assemble(*recorded(topo, switch_agents=False))
    assert shape(found) == shape(topo)


def tables(topo: Topology, *, bridge: bool | None = True) -> dict[str, SwitchTable]:
    """Each switch's own LLDP table, as lldpd on it would print it: what every port hears."""
    out: dict[str, list[Neighbour]] = {s: [] for s in topo.switches}
    for lk in topo.links:
        for here, there in ((lk.a, lk.b), (lk.b, lk.a)):
            if here.node in topo.switches:
                far_is_switch = bridge if there.node in topo.switches else False
                out[here.node].append(Neighbour(here.iface, there.node, there.iface, far_is_switch))
    return {s: SwitchTable(s, tuple(n)) for s, n in out.items()}


@pytest.mark.parametrize("topo", [multirail(4, 2, 1, 1), leafspine(8, 2, 2)], ids=lambda t: t.name)
def test_switches_tables_give_the_cables_between_switches(topo):
    """A real fleet: hosts push (their agents hear their leaves), switches run no agent, and their
    LLDP tables, read, give the leaf-spine cables the hosts cannot hear."""
    nodes, heard = recorded(topo, switch_agents=False)
    found = assemble(*with_switches(nodes, heard, tables(topo))[:2])
    assert shape(found) == shape(topo)
    # the switches' tables alone (hosts that push but hear nothing of their own) say the same
    assert shape(assemble(*with_switches(nodes, [], tables(topo))[:2])) == shape(topo)
    if topo.name == "dualplane-4":  # without the tables: no leaf-spine cable
        assert len(assemble(nodes, heard).links) == len(topo.links) - 2


def test_a_switch_is_named_as_it_calls_itself_and_unknown_neighbours_are_left_out():
    topo = multirail(2, 2, 1, 1)
    nodes, heard = recorded(topo, switch_agents=False)
    read = tables(topo)
    read["10.1.0.5"] = read.pop("p0-spine0")  # the spine read by its address; its table says its name
    leaf = read["p0-leaf0"]
    read["p0-leaf0"] = SwitchTable("p0-leaf0", (*leaf.neighbours, Neighbour("swp9", "h9", "eth0", None)),
                                   ("'x' hears 'bad name':'eth0': neighbour 'bad name' is not a name",))
    read["p0-mgmt"] = SwitchTable(None, ())
    nodes_out, heard_out, notes = with_switches(nodes, heard, read)
    assert shape(assemble(nodes_out, heard_out)) == shape(topo)
    assert notes == [
        "switch 10.1.0.5 calls itself p0-spine0 by LLDP: named p0-spine0, as its neighbours hear it",
        "switch p0-leaf0: 'x' hears 'bad name':'eth0': neighbour 'bad name' is not a name",
        "p0-leaf0:swp9 hears h9:eth0, which does not push (not approved yet, or no agent) and is no switch read: "
        "left out",
        "switch p0-mgmt: its LLDP table has no neighbour; left out"]


def test_spines_and_core_get_their_roles():
    data = {"hosts": [{"name": "h0"}, {"name": "h1"}],
            "switches": [{"name": "l0"}, {"name": "l1"}, {"name": "s0", "role": "spine"},
                         {"name": "c0", "role": "core"}],
            "links": [{"a": "h0", "b": "l0"}, {"a": "h1", "b": "l1"}, {"a": "l0", "b": "s0"}, {"a": "l1", "b": "s0"},
                      {"a": "s0", "b": "c0"}]}
    topo = parse(data)
    found = assemble(*recorded(topo))
    assert {s.name: s.role for s in found.switches.values()} == {"l0": "leaf", "l1": "leaf", "s0": "spine",
                                                                  "c0": "core"}


def test_planes_follow_the_nic_names_not_the_switch_names():
    """The fabric the eth0s reach is plane 0, whatever its switches are called."""
    topo = multirail(2, 2, 1, 0)
    nodes, heard = recorded(topo)
    swapped = {"p0-leaf0": "zz-leaf", "p1-leaf0": "aa-leaf"}

    def rename(text: str) -> str:
        node, _, port = text.partition(":")
        return f"{swapped.get(node, node)}:{port}" if port else swapped.get(node, node)

    found = assemble({swapped.get(n, n): i for n, i in nodes.items()},
                     [Heard(rename(h.node), h.device, rename(h.neighbour)) for h in heard])
    assert (found.switches["zz-leaf"].plane, found.switches["aa-leaf"].plane) == (0, 1)
    assert [(n.name, n.plane) for n in found.hosts["h0"].nics] == [("eth0", 0), ("eth1", 1)]


def test_real_names_ports_and_addresses_come_through():
    nodes = {"gpu-1.example.com": {"address": "192.168.7.10"}, "gpu-2.example.com": {"address": "fd00::2"}}
    heard = [Heard("gpu-1.example.com", "eth0", "leaf1.example.com:Ethernet1/1"),
             Heard("gpu-2.example.com", "eth0", "leaf1.example.com:Ethernet1/2")]
    found = assemble(nodes, heard, name="site")
    assert str(found.hosts["gpu-1.example.com"].address) == "192.168.7.10"
    assert str(found.hosts["gpu-2.example.com"].address6) == "fd00::2"
    assert str(found.host_pool) == "192.168.7.8/30"
    assert {str(lk.b) for lk in found.links} == {"leaf1.example.com:Ethernet1/1", "leaf1.example.com:Ethernet1/2"}


def test_a_port_heard_at_two_far_ends_is_named():
    nodes = {"h0": {}, "h1": {}}
    heard = [Heard("h0", "eth0", "leaf0:swp1"), Heard("h1", "eth0", "leaf0:swp1")]
    with pytest.raises(ClockfabricError, match=r"leaf0:swp1 is heard cabled to h0:eth0 and to h1:eth0"):
        assemble(nodes, heard)


def test_a_host_that_hears_nothing_is_named():
    nodes = {"h0": {}, "h1": {}}
    with pytest.raises(ClockfabricError, match=r"host h1: no LLDP neighbour heard on any NIC"):
        assemble(nodes, [Heard("h0", "eth0", "leaf0:swp1"), Heard("h1", "eth0", "")])


def test_a_neighbour_that_is_not_node_port_is_named():
    with pytest.raises(ClockfabricError, match=r"h0:eth0 heard 'leaf0', which is not NODE:PORT"):
        assemble({"h0": {}}, [Heard("h0", "eth0", "leaf0")])


def test_samples_reduce_to_the_newest_neighbour_of_each_interface():
    rows = [{"host": "h0", "t_ns": 5, "labels": {"device": "eth0", "neighbour": "leaf0:swp1"}},
            {"host": "h0", "t_ns": 9, "labels": {"device": "eth0", "neighbour": "leaf0:swp2"}},
            {"host": "h0", "t_ns": 7, "labels": {"device": "eth1", "neighbour": "leaf1:swp1"}},
            {"host": "h0", "t_ns": 8, "labels": {"device": "eth1", "neighbour": ""}}]
    assert heard_from_samples(rows) == [Heard("h0", "eth0", "leaf0:swp2"), Heard("h0", "eth1", "")]


@pytest.mark.parametrize("leaf", ["json", "snmpwalk"])
def test_discover_writes_a_fleet_file_topology_show_takes_from_hosts_and_saved_tables(leaf, tmp_path, monkeypatch,
                                                                                       capsys):
    """`clockfabric discover --lldp-file`: the hosts as the controller gives them (stood in for here),
    the switches' tables as saved; the file it writes is one `topology show` accepts."""
    from clockfabric.cli import discover_cmds
    from clockfabric.cli.main import main

    answers = {"/api/v1/hosts": {"items": [
        {"host": "hostB", "state": "ok", "info": {"address": "10.0.0.1"}},
        {"host": "h7", "state": "ok", "info": {"address": "10.0.0.2"}},
        {"host": "h9", "state": "stale", "info": {"address": "10.0.0.9"}}]},
        "/api/v1/neighbours": {"items": [
            {"host": "hostB", "t_ns": 1, "labels": {"device": "eth0", "neighbour": "leafA:swp1"}},
            {"host": "h7", "t_ns": 1, "labels": {"device": "eth0", "neighbour": "leafA:swp2"}}]}}
    monkeypatch.setattr(discover_cmds, "api", lambda ctl, path, **kw: answers[path])
    (tmp_path / "tok").write_text("t" * 32)
    if leaf == "json":
        (tmp_path / "leafA").write_text(read("leafA-neighbors.json") + read("leafA-interfaces.json"))
    else:
        (tmp_path / "leafA").write_text(read("leafA-lldp.snmpwalk"))
    (tmp_path / "spineD").write_text(read("spineD-neighbors.json") + read("spineD-interfaces.json"))
    out = tmp_path / "fleet.yaml"

    def cli(*argv: str) -> tuple[int, str]:
        monkeypatch.setattr(sys, "argv", ["clockfabric", *argv])
        with pytest.raises(SystemExit) as done:
            main()
        return done.value.code, capsys.readouterr().err

    code, said = cli("discover", "--controller", "http://ctl:7400", "--token-file", str(tmp_path / "tok"), "-o",
                     str(out), "--lldp-file", f"leafA={tmp_path / 'leafA'}", "--lldp-file", f"x={tmp_path / 'spineD'}")
    assert code == 0, said
    assert "2 hosts, 2 switches, 3 links on 1 planes: wrote" in said and "left out 1 nodes not pushing now: h9" in said
    assert "switch x calls itself spineD by LLDP" in said
    topo = load(out)
    assert {str(lk.a): str(lk.b) for lk in topo.links} == {
        "hostB:eth0": "leafA:swp1", "h7:eth0": "leafA:swp2", "leafA:Eth1/3": "spineD:Ethernet4"}
    assert {s.name: s.role for s in topo.switches.values()} == {"leafA": "leaf", "spineD": "spine"}
    assert cli("topology", "show", str(out))[0] == 0
