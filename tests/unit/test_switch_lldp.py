"""Switches' LLDP tables (topology/switch_lldp.py, switch_snmp.py), read from what lldpd and snmpwalk
really print.

The fixtures in tests/fixtures/lldp/ were captured from lldpd 1.0.16 (Debian 12) in network
namespaces: a leaf `leafA` (port IDs its interface names, but swp3 announced as "Eth1/3" with
`configure ports swp3 lldp portidsubtype local Eth1/3`) hears on swp1 `hostB` twice (lldpd with its
defaults, which announces the MAC as port ID and eth0 as description, and clockfabric's own
announcer), on swp2 `h7` (clockfabric's announcer with no system name: a chassis ID alone) and on
swp3 the spine `spineD` (lldpd, capabilities bridge and router). The SNMP walks are of the same
leaf, through lldpd's AgentX subagent and net-snmp's snmpd."""

from __future__ import annotations

from pathlib import Path

import pytest

from clockfabric.errors import ClockfabricError
from clockfabric.topology.switch_lldp import parse_lldpcli, parse_table, read_lldpcli
from clockfabric.topology.switch_snmp import parse_snmpwalk
from clockfabric.topology.switch_table import MAX_NEIGHBOURS, Neighbour, SwitchTable

FIXTURES = Path(__file__).parents[1] / "fixtures" / "lldp"
LEAF = {Neighbour("swp1", "hostB", "eth0", False), Neighbour("swp2", "h7", "eth0", None),
        Neighbour("swp3", "spineD", "Ethernet4", True)}


def read(name: str) -> str:
    return (FIXTURES / name).read_text()


@pytest.mark.parametrize("name", ["leafA-neighbors.json", "leafA-neighbors.json0", "leafA-neighbors.keyvalue"])
def test_lldpcli_neighbours_in_each_format(name):
    table = parse_lldpcli(read(name))
    assert set(table.neighbours) == LEAF and table.system is None and not table.left_out
    # hostB heard twice on swp1 (its lldpd and an agent): one neighbour
    assert len(table.neighbours) == 3


@pytest.mark.parametrize("own", ["leafA-interfaces.json", "leafA-interfaces.keyvalue"])
def test_the_switchs_own_side_names_it_and_its_ports_as_neighbours_hear_them(own):
    fmt = own.rsplit(".", 1)[1]
    table = parse_lldpcli(read(f"leafA-neighbors.{fmt}") + "\n" + read(own))
    assert table.system == "leafA"
    assert {n.port for n in table.neighbours} == {"swp1", "swp2", "Eth1/3"}
    # and the spine, read alone, hears the leaf's port by the same name
    spine = parse_lldpcli(read("spineD-neighbors.json") + read("spineD-interfaces.json"))
    assert spine.system == "spineD"
    assert spine.neighbours == (Neighbour("Ethernet4", "leafA", "Eth1/3", False),)


@pytest.mark.parametrize("name", ["leafA-lldp.snmpwalk", "leafA-lldp.On.snmpwalk"])
def test_snmpwalk_of_lldp_mib(name):
    table = parse_snmpwalk(read(name))
    assert table.system == "leafA"
    # h7 sends no system name: its chassis ID names it; capabilities from lldpRemSysCapEnabled
    assert set(table.neighbours) == {Neighbour("swp1", "hostB", "eth0", False), Neighbour("swp2", "h7", "eth0", False),
                                     Neighbour("Eth1/3", "spineD", "Ethernet4", True)}


def test_snmpwalk_with_the_mibs_names_loaded():
    text = """LLDP-MIB::lldpLocSysName.0 = STRING: leaf9
LLDP-MIB::lldpLocPortIdSubtype.12 = INTEGER: interfaceName(5)
LLDP-MIB::lldpLocPortId.12 = STRING: Ethernet48
LLDP-MIB::lldpRemPortIdSubtype.0.12.1 = INTEGER: interfaceName(5)
LLDP-MIB::lldpRemPortId.0.12.1 = STRING: Ethernet0
LLDP-MIB::lldpRemSysName.0.12.1 = STRING: spine2
LLDP-MIB::lldpRemSysCapEnabled.0.12.1 = BITS: 28 bridge(2) router(4)
"""
    assert parse_snmpwalk(text) == SwitchTable("leaf9", (Neighbour("Ethernet48", "spine2", "Ethernet0", True),))


def test_formats_are_told_apart():
    assert parse_table(read("leafA-neighbors.keyvalue"), "f").neighbours
    assert parse_table(read("leafA-lldp.On.snmpwalk"), "f").system == "leafA"
    assert parse_table("", "f") == SwitchTable(None, ())
    assert parse_lldpcli('{\n  "lldp": {\n\n  }\n}\n') == SwitchTable(None, ())  # lldpd hearing no one


@pytest.mark.parametrize("text, says", [
    ("hello world", "neither lldpcli's output"),
    ('{"lldp": {"interface": [1, 2]}}', "not lldpcli's JSON"),
    ('{"other": 1}', 'without lldpcli\'s top-level "lldp" key'),
    ('{"lldp": {', "not lldpcli's JSON"),
    ("[" * 100 + "]" * 100, "neither lldpcli's output"),
    ('{"lldp":' + "[" * 100 + "]" * 100 + "}", "nested deeper"),
    ("lldp.swp1.chassis.name=x\n", "comes before its interface's first line"),
    ("lldp.swp1.via=LLDP\nnot a key\n", "line 2 is not lldpcli's key=value"),
    (".1.0.8802.1.1.2.1.1.1.0 = INTEGER: 1\n", "no LLDP-MIB rows"),
])
def test_bad_text_is_one_line(text, says):
    with pytest.raises(ClockfabricError, match=says) as e:
        parse_table(text, "leaf1")
    assert str(e.value).startswith("leaf1: ") and "\n" not in str(e.value)


def test_names_a_fleet_file_cannot_take_are_left_out_with_a_line():
    text = ("lldp.swp1.via=LLDP\nlldp.swp1.chassis.name=bad name\nlldp.swp1.port.ifname=eth0\n"
            "lldp.swp2.via=LLDP\nlldp.swp2.chassis.mac=aa:bb:cc:dd:ee:ff\nlldp.swp2.port.mac=aa:bb:cc:dd:ee:ff\n"
            "lldp.swp3.via=LLDP\nlldp.swp3.chassis.name=h3\nlldp.swp3.port.ifname=eth0\n")
    table = parse_lldpcli(text)
    assert table.neighbours == (Neighbour("swp3", "h3", "eth0", None),)
    assert len(table.left_out) == 2 and "neighbour 'bad name'" in table.left_out[0]
    assert "neighbour port 'aa:bb:cc:dd:ee:ff'" in table.left_out[1]


def test_a_table_is_bounded():
    text = "".join(f"lldp.p{i}.via=LLDP\nlldp.p{i}.chassis.name=h{i}\nlldp.p{i}.port.ifname=eth0\n"
                   for i in range(MAX_NEIGHBOURS + 5))
    table = parse_lldpcli(text)
    assert len(table.neighbours) == MAX_NEIGHBOURS and table.left_out == (
        f"more than {MAX_NEIGHBOURS} neighbours: the rest left out",)
    with pytest.raises(ClockfabricError, match="more than a switch's LLDP table takes"):
        parse_lldpcli("x" * (16 * 2**20 + 1))


def test_an_interface_name_with_dots_in_keyvalue():
    text = "lldp.eth0.100.via=LLDP\nlldp.eth0.100.chassis.name=leaf1\nlldp.eth0.100.port.ifname=swp1.100\n"
    assert parse_lldpcli(text).neighbours == (Neighbour("eth0.100", "leaf1", "swp1.100", None),)


def test_reading_a_switch_runs_lldpcli_and_takes_its_own_side_where_it_has_it():
    asked = []

    def run(argv):
        asked.append(argv)
        if argv[-1] == "neighbors":
            return 0, read("leafA-neighbors.json"), ""
        return 0, read("leafA-interfaces.json"), ""

    table = read_lldpcli(run, ["sudo", "lldpcli"], "leafA")
    assert asked == [["sudo", "lldpcli", "-f", "json", "show", "neighbors"],
                     ["sudo", "lldpcli", "-f", "json", "show", "interfaces"]]
    assert table.system == "leafA" and {n.port for n in table.neighbours} == {"swp1", "swp2", "Eth1/3"}

    def older(argv):  # no `show interfaces`: the interface names stay
        return (0, read("leafA-neighbors.json"), "") if argv[-1] == "neighbors" else (1, "", "unknown command")

    assert set(read_lldpcli(older, ["lldpcli"], "leafA").neighbours) == LEAF
    with pytest.raises(ClockfabricError, match=r"leaf1: lldpcli show neighbors failed: .*Permission denied"):
        read_lldpcli(lambda argv: (1, "", "unable to connect to socket: Permission denied\n"), ["lldpcli"], "leaf1")

