"""The strict topology schema: unknown keys with line and nearest key, given v4 and v6
addresses, dotted names, real switch port names, and the published JSON Schema."""

import ipaddress
import json
import textwrap
from pathlib import Path

import pytest
import yaml

from clockfabric.errors import ClockfabricError
from clockfabric.lab.naming import check_port_names, netns_name, parse_netns
from clockfabric.topology import Port, TopologyError, dumps, interfaces, leafspine, load, parse, schema

ROOT = Path(__file__).resolve().parents[2]
FLEET = textwrap.dedent("""\
    name: fleet
    hosts:
      - name: gpu-001.rack1.example.com
        address: 10.0.0.11
        address6: fd00::11
        nics:
          - {name: eth0, plane: 0, address: 192.168.10.5/31, address6: "fd00:64::5/127"}
      - name: gpu-002.rack1.example.com
        adress: 10.0.0.12
    switches:
      - {name: leaf1.rack1.example.com, role: leaf}
    links:
      - {a: "gpu-001.rack1.example.com:eth0", b: "leaf1.rack1.example.com:Ethernet1/1"}
      - {a: gpu-002.rack1.example.com, b: "leaf1.rack1.example.com:swp1s0"}
""")


def problems_of(text: str, tmp_path: Path) -> list[str]:
    f = tmp_path / "fleet.yaml"
    f.write_text(text)
    with pytest.raises(TopologyError) as info:
        load(f)
    return info.value.problems


def test_unknown_key_names_the_key_its_line_and_the_nearest_known_key(tmp_path):
    assert problems_of(FLEET, tmp_path) == ["line 9: hosts[1]: unknown key 'adress'; did you mean address?"]


def test_unknown_key_with_no_near_match_lists_the_known_keys(tmp_path):
    text = FLEET.replace("adress", "address") + "colour: blue\n"
    assert problems_of(text, tmp_path) == [
        "line 15: unknown key 'colour'; known keys: name, meta, addressing, defaults, mtu, classes, hosts, "
        "switches, links, ssh"]


@pytest.mark.parametrize(("old", "new", "says"), [
    ("{name: eth0, plane: 0,", "{name: eth0, plane: 0, planes: 1,", "line 7: hosts[0].nics[0]: unknown key 'planes'; "
                                                                    "did you mean plane?"),
    ("role: leaf}", "role: leaf, rol: spine}", "line 11: switches[0]: unknown key 'rol'; did you mean role?"),
    ("b: \"leaf1.rack1.example.com:swp1s0\"}", "b: \"leaf1.rack1.example.com:swp1s0\", rtae: 1gbit}",
     "line 14: links[1]: unknown key 'rtae'; did you mean rate?"),
])
def test_unknown_keys_anywhere_are_reported_with_their_line(tmp_path, old, new, says):
    assert problems_of(FLEET.replace("adress", "address").replace(old, new), tmp_path) == [says]


def test_parse_without_a_file_reports_unknown_keys_without_a_line():
    data = yaml.safe_load(FLEET)
    with pytest.raises(TopologyError) as info:
        parse(data, "fleet")
    assert info.value.problems == ["hosts[1]: unknown key 'adress'; did you mean address?"]


def test_given_addresses_names_and_ports_load_and_round_trip(tmp_path):
    f = tmp_path / "fleet.yaml"
    f.write_text(FLEET.replace("adress", "address"))
    topo = load(f)
    gpu1 = topo.hosts["gpu-001.rack1.example.com"]
    assert gpu1.address6 == ipaddress.IPv6Address("fd00::11")
    assert gpu1.nics[0].address == ipaddress.IPv4Interface("192.168.10.5/31")
    itfs = interfaces(topo)
    nic = itfs[Port("gpu-001.rack1.example.com", "eth0")]
    port = itfs[Port("leaf1.rack1.example.com", "Ethernet1/1")]
    assert (nic.address, nic.peer_address) == (ipaddress.IPv4Interface("192.168.10.5/31"),
                                               ipaddress.IPv4Address("192.168.10.4"))
    assert port.address == ipaddress.IPv4Interface("192.168.10.4/31")
    assert nic.address6 == ipaddress.IPv6Interface("fd00:64::5/127")
    # the host that gives no NIC address keeps the plan's first /31 of plane 0
    assert itfs[Port("gpu-002.rack1.example.com", "eth0")].address == ipaddress.IPv4Interface("10.64.0.0/31")
    again = parse(yaml.safe_load(dumps(topo)))
    assert dumps(again) == dumps(topo) and again.hosts == topo.hosts


def test_wider_nic_prefix_takes_the_subnets_first_address_as_the_far_end():
    """Two hosts in one /24 behind a leaf: both links' switch ends are the gateway, 172.16.0.1."""
    same_gateway = parse({"hosts": [{"name": f"h{i}", "nics": [{"name": "eth0", "address": f"172.16.0.{9 + i}/24"}]}
                                    for i in range(2)],
                          "switches": [{"name": "s"}], "links": [{"a": "h0", "b": "s"}, {"a": "h1", "b": "s"}]})
    assert {i.peer_address for i in interfaces(same_gateway).values() if i.port.node != "s"} == {
        ipaddress.IPv4Address("172.16.0.1")}


def fleet(host: dict | None = None, nic: dict | None = None, port: str = "swp1") -> dict:
    return {"hosts": [{"name": "h0", **(host or {}), "nics": [{"name": "eth0", **(nic or {})}]}, {"name": "h1"}],
            "switches": [{"name": "leaf0"}],
            "links": [{"a": "h0", "b": f"leaf0:{port}"}, {"a": "h1", "b": "leaf0"}]}


def only_problem(data: dict) -> str:
    with pytest.raises(TopologyError) as info:
        parse(data, "t")
    assert len(info.value.problems) == 1, info.value.problems
    return info.value.problems[0]


@pytest.mark.parametrize(("host", "nic", "says"), [
    ({"address": "10.0.0.300"}, None, "host 'h0': address '10.0.0.300' is not an IPv4 address; write it like 10.0.0.7"),
    ({"address": "fd00::7"}, None, "host 'h0': address 'fd00::7' is not an IPv4 address; that is IPv6: write it as "
                                   "address6"),
    ({"address6": "10.0.0.9"}, None, "host 'h0': address6 '10.0.0.9' is not an IPv6 address; that is IPv4: write it "
                                     "as address"),
    ({"address6": "fd00::zz"}, None, "host 'h0': address6 'fd00::zz' is not an IPv6 address; write it like fd00::7"),
    (None, {"address": "10.64.9.1"}, "host 'h0': NIC eth0: address '10.64.9.1' is not an IPv4 address with its "
                                     "prefix; write it like 10.64.0.1/31"),
    (None, {"address6": "fd00::1/200"}, "host 'h0': NIC eth0: address6 'fd00::1/200' is not an IPv6 address with "
                                        "its prefix; write it like fd00:64::1/127"),
    (None, {"address": "10.9.0.1/32"}, "host h0: NIC eth0: address 10.9.0.1/32 leaves no address for the far end "
                                       "of its link; give it a /31 or wider"),
    (None, {"address": "10.9.0.0/24"}, "host h0: NIC eth0: address 10.9.0.0/24 is its subnet's network or "
                                       "broadcast address; pick a usable one"),
])
def test_bad_addresses_are_one_line_each(host, nic, says):
    assert only_problem(fleet(host, nic)) == says


def test_a_given_address_that_clashes_with_the_plan_is_named():
    with pytest.raises(TopologyError) as info:
        parse(fleet(nic={"address": "10.64.0.1/31"}))
    assert info.value.problems == [
        "address 10.64.0.1 is on both h0:eth0 and leaf0:swp2; give each port its own",
        "address 10.64.0.0 of h1:eth0 is also the far end of the given address on leaf0:swp1; give each port its own"]


def test_duplicate_ipv6_host_address():
    data = fleet({"address6": "fd00::1"})
    data["hosts"][1]["address6"] = "fd00::1"
    assert only_problem(data) == "duplicate address6 fd00::1 on hosts h0, h1; give each host its own"


@pytest.mark.parametrize("name", ["gpu-001.example.com", "a.b", "h_0.rack-1", "x" * 63 + ".example"])
def test_dotted_names_are_accepted(name):
    data = fleet()
    data["hosts"][0]["name"] = name
    data["links"][0]["a"] = name
    assert name in parse(data).hosts


@pytest.mark.parametrize("name", ["-gpu", "gpu..example", "gpu.", ".gpu", "gpu/1", "gpu 1", "x" * 64])
def test_bad_names_are_refused(name):
    data = fleet()
    data["hosts"][0]["name"] = name
    data["links"][0]["a"] = name
    assert only_problem(data).startswith(f"host {name!r}: use DNS labels")


@pytest.mark.parametrize("port", ["swp1", "swp1s0", "Ethernet1/1", "et-0/0/1", "Eth1/1.100"])
def test_real_switch_port_names_are_accepted(port):
    assert Port("leaf0", port) in interfaces(parse(fleet(port=port)))


@pytest.mark.parametrize("port", ["1/1", "Eth 1", "Eth,1", "x" * 65])
def test_bad_port_names_are_refused(port):
    assert "must start with a letter and hold letters, digits and '_-./'" in only_problem(fleet(port=port))


def test_the_lab_refuses_ports_linux_cannot_name_and_takes_dotted_nodes():
    with pytest.raises(ClockfabricError, match=r"port leaf0:Ethernet1/1: the lab names .* no '/'"):
        check_port_names(parse(fleet(port="Ethernet1/1")))
    with pytest.raises(ClockfabricError, match="at most 15 characters"):
        check_port_names(parse(fleet(port="Ethernet1.1.1.1.1")))
    check_port_names(parse(fleet(port="swp1s0")))
    assert parse_netns(netns_name("lab1", "gpu-001.example.com")) == ("lab1", "gpu-001.example.com")
    assert parse_netns("cf.lab1.") is None


def test_published_json_schema_is_the_loaders_own():
    published = json.loads((ROOT / "docs" / "topology.schema.json").read_text())
    assert published == json.loads(schema.dumps()), \
        "regenerate: python -m clockfabric.topology.schema > docs/topology.schema.json"


@pytest.mark.parametrize("path", sorted((ROOT / "examples").glob("*.yaml")), ids=lambda p: p.name)
def test_every_example_file_validates_against_the_json_schema(path):
    jsonschema = pytest.importorskip("jsonschema")
    jsonschema.validate(yaml.safe_load(path.read_text()), schema.SCHEMA)
    load(path)


def test_json_schema_refuses_what_the_loader_refuses():
    jsonschema = pytest.importorskip("jsonschema")
    data = json.loads(json.dumps(yaml.safe_load(FLEET)))
    with pytest.raises(jsonschema.ValidationError, match="adress"):
        jsonschema.validate(data, schema.SCHEMA)
    jsonschema.validate(yaml.safe_load(dumps(leafspine(4, 2, 1))), schema.SCHEMA)


def test_the_ssh_section_takes_the_keys_the_audit_reads():
    from clockfabric.hosts.options import _TYPES

    assert set(schema.SSH["properties"]) == set(_TYPES)
    data = fleet({"ssh": {"port": 2222}})
    data["ssh"] = {"user": "ops", "python": "python3"}
    parse(data)
    data["ssh"]["prot"] = 22
    assert only_problem(data) == "ssh: unknown key 'prot'; did you mean port?"
