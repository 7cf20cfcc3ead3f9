"""Discover's assembly: a fleet file from recorded LLDP neighbour samples and agents' info."""

import pytest
import yaml

from clockfabric.errors import ClockfabricError
from clockfabric.topology import dumps, leafspine, multirail, parse
from clockfabric.topology.discover import Heard, assemble, heard_from_samples
from clockfabric.topology.model import Topology


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
