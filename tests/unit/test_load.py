"""Topology files: YAML load / save / parse, and every validation problem, one line each."""

import copy
import ipaddress
import textwrap

import pytest
import yaml

from clockfabric.errors import ClockfabricError
from clockfabric.topology import (
    Port, Topology, TopologyError, dumps, leafspine, load, multirail, parse, save,
)

VALID_YAML = textwrap.dedent("""\
    name: small
    addressing: {hosts: 10.1.0.0/24, fabric: 10.128.0.0/12}
    defaults: {rate: 200Mbit/s, buffer: 100}
    hosts:
      - {name: h0, nics: [{name: eth0, plane: 0}, {name: eth1, plane: 1}]}
      - {name: h1, address: 10.1.0.50, nics: [{name: eth0, plane: 0}, {name: eth1, plane: 1}]}
    switches:
      - {name: a-leaf, role: leaf, plane: 0}
      - {name: b-leaf, role: leaf, plane: 1}
    links:
      - {a: h0:eth0, b: a-leaf}
      - {a: h1:eth0, b: a-leaf, rate: 10Gbps}
      - {a: h0:eth1, b: b-leaf:port7, buffer: 50}
      - {a: h1:eth1, b: b-leaf}
""")


def one_leaf(hosts=2) -> dict:
    """A minimal valid topology as parsed YAML: single-NIC hosts under one leaf."""
    return {
        "name": "t",
        "hosts": [{"name": f"h{i}"} for i in range(hosts)],
        "switches": [{"name": "leaf0", "role": "leaf"}],
        "links": [{"a": f"h{i}", "b": "leaf0"} for i in range(hosts)],
    }


def two_plane() -> dict:
    """Two dual-NIC hosts, one leaf per plane."""
    return {
        "name": "t2",
        "hosts": [{"name": f"h{i}", "nics": [{"name": "eth0", "plane": 0}, {"name": "eth1", "plane": 1}]}
                  for i in range(2)],
        "switches": [{"name": "l0", "plane": 0}, {"name": "l1", "plane": 1}],
        "links": [{"a": f"h{i}:eth{r}", "b": f"l{r}"} for r in range(2) for i in range(2)],
    }


def problems_of(data) -> list[str]:
    with pytest.raises(TopologyError) as info:
        parse(data, "t.yaml")
    err = info.value
    # the message is the problems, one line each, prefixed by the source
    assert str(err).splitlines() == [f"t.yaml: {p}" for p in err.problems]
    assert all("\n" not in p for p in err.problems)
    return err.problems


def only_problem(data) -> str:
    problems = problems_of(data)
    assert len(problems) == 1, problems
    return problems[0]


# ---- loading a valid file -------------------------------------------------------------------

def test_load_valid_file(tmp_path):
    path = tmp_path / "small.yaml"
    path.write_text(VALID_YAML)
    topo = load(path)

    assert isinstance(topo, Topology)
    assert topo.name == "small"
    assert topo.host_pool == ipaddress.IPv4Network("10.1.0.0/24")
    assert topo.fabric_pool == ipaddress.IPv4Network("10.128.0.0/12")
    assert topo.default_rate_bps == 200 * 10**6
    assert topo.default_buffer_pkts == 100
    assert list(topo.hosts) == ["h0", "h1"]
    assert list(topo.switches) == ["a-leaf", "b-leaf"]
    assert topo.switches["b-leaf"].plane == 1
    assert topo.planes == [0, 1]
    assert [n.name for n in topo.hosts["h0"].nics] == ["eth0", "eth1"]
    assert topo.hosts["h0"].nic(1).name == "eth1"
    assert topo.hosts["h0"].nic(2) is None

    assert topo.hosts["h0"].address == ipaddress.IPv4Address("10.1.0.1")  # auto: first of the pool
    assert topo.hosts["h1"].address == ipaddress.IPv4Address("10.1.0.50")  # as written

    l0, l1, l2, l3 = topo.links
    assert (l0.a, l0.b) == (Port("h0", "eth0"), Port("a-leaf", "swp1"))
    assert (l0.rate_bps, l0.buffer_pkts) == (200 * 10**6, 100)  # defaults apply
    assert l1.rate_bps == 10 * 10**9
    assert l2.b == Port("b-leaf", "port7") and l2.buffer_pkts == 50
    assert l3.b == Port("b-leaf", "swp1")  # explicit port7 does not consume an auto number
    assert topo.find_link("h0", "a-leaf") is l0
    assert topo.find_link("b-leaf:port7", "h0:eth1") is l2


def test_load_without_name_uses_file_stem(tmp_path):
    path = tmp_path / "rack-7.yaml"
    data = one_leaf()
    del data["name"]
    path.write_text(yaml.safe_dump(data))
    assert load(path).name == "rack-7"


def test_defaults_when_sections_are_omitted():
    topo = parse(one_leaf())
    assert topo.host_pool == ipaddress.IPv4Network("10.0.0.0/16")
    assert topo.fabric_pool == ipaddress.IPv4Network("10.64.0.0/10")
    assert topo.default_rate_bps == 10**8
    assert topo.default_buffer_pkts == 200
    assert topo.hosts["h0"].nics[0].name == "eth0" and topo.hosts["h0"].nics[0].plane == 0
    assert all(lk.rate_bps == 10**8 and lk.buffer_pkts == 200 for lk in topo.links)


def test_auto_assigned_host_addresses_follow_list_order():
    data = one_leaf(3)
    data["addressing"] = {"hosts": "172.16.4.0/22"}
    topo = parse(data)
    assert [str(h.address) for h in topo.hosts.values()] == ["172.16.4.1", "172.16.4.2", "172.16.4.3"]


def test_auto_assigned_switch_ports_count_per_switch():
    data = one_leaf(3)
    data["switches"].append({"name": "spine0", "role": "spine"})
    data["links"].append({"a": "leaf0", "b": "spine0"})
    topo = parse(data)
    assert [str(lk.b) for lk in topo.links[:3]] == ["leaf0:swp1", "leaf0:swp2", "leaf0:swp3"]
    assert (topo.links[3].a, topo.links[3].b) == (Port("leaf0", "swp4"), Port("spine0", "swp1"))


def test_bare_host_endpoint_allowed_for_single_nic_host():
    topo = parse(one_leaf())
    assert topo.links[0].a == Port("h0", "eth0")


def test_bare_host_endpoint_is_an_error_for_multi_nic_host():
    data = two_plane()
    data["links"][0]["a"] = "h0"
    problem = only_problem(data)
    assert "link 1 (h0 -- l0)" in problem
    assert "host 'h0' has 2 NICs" in problem
    assert "h0:eth0" in problem  # says how to write it


# ---- dumps / save round trips ---------------------------------------------------------------

@pytest.mark.parametrize("make", [
    lambda: parse(yaml.safe_load(VALID_YAML)),
    lambda: leafspine(8, 2, 2, fabric_rate="10gbit"),
    lambda: multirail(8, 2, 2, 2, buffer=64),
    lambda: leafspine(8, 2, 2, mtu=9000),
])
def test_dumps_parse_round_trip_is_exact(make):
    topo = make()
    text = dumps(topo)
    again = parse(yaml.safe_load(text))
    assert dumps(again) == text
    assert again.hosts == topo.hosts
    assert again.switches == topo.switches
    assert again.links == topo.links
    assert again.meta == topo.meta
    assert again.mtu == topo.mtu
    assert (again.host_pool, again.fabric_pool) == (topo.host_pool, topo.fabric_pool)


def test_dumps_writes_one_line_per_host_switch_and_link():
    topo = leafspine(8, 2, 2)
    lines = dumps(topo).splitlines()
    assert sum(ln.startswith("  - {name: h") for ln in lines) == 8
    assert sum("role:" in ln for ln in lines) == 4
    assert sum(ln.startswith("  - {a: ") for ln in lines) == len(topo.links) == 12


def test_dumps_writes_buffer_only_where_it_differs():
    topo = parse(yaml.safe_load(VALID_YAML))
    link_lines = [ln for ln in dumps(topo).splitlines() if ln.startswith("  - {a: ")]
    assert ["buffer" in ln for ln in link_lines] == [False, False, True, False]
    assert "buffer: 50" in link_lines[2]


def test_save_then_load(tmp_path):
    topo = multirail(4, 2, 2, 1)
    path = tmp_path / "out.yaml"
    save(topo, path)
    assert path.read_text() == dumps(topo)
    again = load(path)
    assert dumps(again) == dumps(topo)


@pytest.mark.parametrize("name", ["on", "null", "007"])
def test_dumps_round_trips_yaml_special_host_names(name):
    data = one_leaf()
    data["hosts"][0]["name"] = name
    data["links"][0]["a"] = name
    topo = parse(data)
    assert name in topo.hosts  # the name is valid
    again = parse(yaml.safe_load(dumps(topo)))
    assert list(again.hosts) == list(topo.hosts)


# ---- file-level errors ----------------------------------------------------------------------

def test_missing_file(tmp_path):
    path = tmp_path / "nope.yaml"
    with pytest.raises(ClockfabricError) as info:
        load(path)
    msg = str(info.value)
    assert str(path) in msg
    assert "No such file" in msg and "check the path" in msg
    assert len(msg.splitlines()) == 1


def test_invalid_yaml_is_one_clear_line(tmp_path):
    path = tmp_path / "bad.yaml"
    path.write_text("name: x\nhosts:\n  - {name: h0\n  - [unclosed\n")
    with pytest.raises(ClockfabricError) as info:
        load(path)
    err = info.value
    msg = str(err)
    assert len(msg.splitlines()) == 1
    assert str(path) in msg and "not valid YAML" in msg and "at line" in msg
    for noise in ("Traceback", "yaml.", "Error", "mark", "^"):
        assert noise not in msg
    assert err.__cause__ is None and err.__suppress_context__  # raised "from None"
    assert not isinstance(err, TopologyError)


def test_empty_file_is_not_a_mapping(tmp_path):
    path = tmp_path / "empty.yaml"
    path.write_text("")
    with pytest.raises(TopologyError) as info:
        load(path)
    assert info.value.problems == ["expected a mapping with name, hosts, switches and links"]
    assert info.value.source == str(path)


@pytest.mark.parametrize("data", [[1, 2], "hosts", 42, None])
def test_not_a_mapping(data):
    assert "expected a mapping" in only_problem(data)


def test_topology_error_is_a_clockfabric_error():
    assert issubclass(TopologyError, ClockfabricError)


# ---- each validation problem: exactly one line, naming the offender -------------------------

def test_problem_unknown_node_in_link():
    data = one_leaf()
    data["links"][1]["b"] = "leaf9"
    problem = only_problem(data)
    assert "link 2 (h1 -- leaf9)" in problem and "unknown node 'leaf9'" in problem
    assert "hosts or switches" in problem


def test_problem_unknown_nic_on_host():
    data = one_leaf()
    data["links"][0]["a"] = "h0:eth3"
    problem = only_problem(data)
    assert "host 'h0' has no NIC 'eth3'" in problem


def test_problem_duplicate_host_name():
    data = one_leaf()
    data["hosts"].append({"name": "h0"})
    problem = only_problem(data)
    assert "host 'h0' is defined twice" in problem


def test_problem_switch_named_like_a_host():
    data = one_leaf()
    data["switches"].append({"name": "h1", "role": "spine"})
    problem = only_problem(data)
    assert "node 'h1' is defined twice" in problem


def test_problem_duplicate_address():
    data = one_leaf(3)
    data["hosts"][0]["address"] = "10.0.0.77"
    data["hosts"][2]["address"] = "10.0.0.77"
    problem = only_problem(data)
    assert "duplicate address 10.0.0.77" in problem
    assert "h0, h2" in problem and "h1" not in problem


def test_problem_address_not_ipv4_is_reported():
    data = one_leaf()
    data["hosts"][1]["address"] = "10.0.0.300"
    problems = problems_of(data)
    assert "host 'h1': address '10.0.0.300' is not an IPv4 address; write it like 10.0.0.7" in problems


def test_problem_address_not_ipv4_is_one_line():
    data = one_leaf()
    data["hosts"][1]["address"] = "10.0.0.300"
    assert "is not an IPv4 address" in only_problem(data)


@pytest.mark.parametrize("where", ["link", "defaults"])
def test_problem_bad_rate(where):
    data = one_leaf()
    if where == "link":
        data["links"][1]["rate"] = "fast"
        expected_label = "link 2 (h1 -- leaf0)"
    else:
        data["defaults"] = {"rate": "fast"}
        expected_label = "defaults"
    problem = only_problem(data)
    assert problem.startswith(f"{expected_label}: rate 'fast'")
    assert "1gbit" in problem


@pytest.mark.parametrize("buffer", [0, -3, 100_001, "lots", 2.5, True])
def test_problem_bad_link_buffer(buffer):
    data = one_leaf()
    data["links"][0]["buffer"] = buffer
    problem = only_problem(data)
    assert problem.startswith("link 1 (h0 -- leaf0): buffer")
    assert repr(buffer) in problem and "1 to 100000" in problem


def test_problem_bad_default_buffer():
    data = one_leaf()
    data["defaults"] = {"buffer": 0}
    assert only_problem(data).startswith("defaults: buffer 0")


def test_mtu_defaults_to_1500_and_is_written_only_where_it_differs():
    assert leafspine(4, 1, 0).mtu == 1500 and "mtu" not in dumps(leafspine(4, 1, 0))
    assert "\nmtu: 9000\n" in dumps(leafspine(4, 1, 0, mtu=9000))


@pytest.mark.parametrize("mtu", [1279, 9217, "jumbo", 1500.0, True])
def test_problem_bad_mtu(mtu):
    data = one_leaf()
    data["mtu"] = mtu
    problem = only_problem(data)
    assert problem.startswith(f"mtu {mtu!r} must be a byte count from 1280 to 9216")


@pytest.mark.parametrize("mtu", [1280, 9216])
def test_mtu_limits_are_inclusive(mtu):
    data = one_leaf()
    data["mtu"] = mtu
    assert parse(data).mtu == mtu


@pytest.mark.parametrize("buffer", [1, 100_000])
def test_buffer_limits_are_inclusive(buffer):
    data = one_leaf()
    data["links"][0]["buffer"] = buffer
    assert parse(data).links[0].buffer_pkts == buffer


def test_problem_link_joining_two_planes():
    data = two_plane()
    data["links"][3]["b"] = "l0"  # h1:eth1 (plane 1) cabled into the plane-0 leaf
    problem = only_problem(data)
    assert "link h1:eth1--l0:swp3 joins plane 1 to plane 0" in problem


def test_problem_switch_to_switch_link_across_planes():
    data = two_plane()
    data["links"].append({"a": "l0", "b": "l1"})
    problem = only_problem(data)
    assert "l0:swp3--l1:swp3" in problem and "joins plane 0 to plane 1" in problem


def test_problem_nic_with_no_link():
    data = two_plane()
    del data["links"][3]  # h1:eth1
    problem = only_problem(data)
    assert problem.startswith("host h1: NIC eth1 (plane 1) has no link")


def test_problem_two_nics_on_one_plane():
    data = one_leaf()
    data["hosts"][0]["nics"] = [{"name": "eth0", "plane": 0}, {"name": "eth1", "plane": 0}]
    data["links"][0]["a"] = "h0:eth0"
    data["links"].append({"a": "h0:eth1", "b": "leaf0"})
    problem = only_problem(data)
    assert problem.startswith("host h0: 2 NICs on plane 0")


def test_problem_two_nics_share_a_name():
    data = one_leaf()
    data["hosts"][0]["nics"] = [{"name": "eth0", "plane": 0}, {"name": "eth0", "plane": 1}]
    data["links"][0]["a"] = "h0:eth0"
    problem = only_problem(data)
    assert "host 'h0': two NICs share a name" in problem


def test_problem_host_with_no_path_two_leaves_no_spine():
    data = {
        "hosts": [{"name": "h0"}, {"name": "h1"}],
        "switches": [{"name": "leaf0"}, {"name": "leaf1"}],
        "links": [{"a": "h0", "b": "leaf0"}, {"a": "h1", "b": "leaf1"}],
    }
    # reachability is reported per host, so each side of the split names the other
    assert problems_of(data) == [
        "host h0 has no path to h1; add links so every plane is connected",
        "host h1 has no path to h0; add links so every plane is connected",
    ]


def test_one_connected_plane_is_enough_for_reachability():
    data = two_plane()
    data["switches"].append({"name": "l1b", "plane": 1})
    data["links"][3]["b"] = "l1b"  # plane 1 split, plane 0 still joins h0 and h1
    topo = parse(data)
    assert [p.plane for p in topo.paths("h0", "h1")] == [0]


def test_problem_no_path_lists_at_most_three_names():
    data = one_leaf(5)
    data["hosts"].append({"name": "lonely"})
    data["switches"].append({"name": "leaf1"})
    data["links"].append({"a": "lonely", "b": "leaf1"})
    problems = problems_of(data)
    assert len(problems) == 6
    assert problems[-1].startswith("host lonely has no path to h0, h1, h2 and 2 more;")
    assert problems[0].startswith("host h0 has no path to lonely;")


@pytest.mark.parametrize("address", ["192.168.1.1", "10.0.0.0", "10.0.255.255"])
def test_problem_host_address_outside_host_pool(address):
    data = one_leaf()
    data["hosts"][1]["address"] = address
    problem = only_problem(data)
    assert problem.startswith(f"host h1: address {address} is not a usable address of addressing.hosts 10.0.0.0/16")


def test_problem_overlapping_pools():
    data = one_leaf()
    data["addressing"] = {"hosts": "10.64.0.0/16", "fabric": "10.64.0.0/10"}
    problem = only_problem(data)
    assert "hosts 10.64.0.0/16 overlaps fabric 10.64.0.0/10" in problem


@pytest.mark.parametrize(("key", "value"), [("hosts", "10.0.0.1/16"), ("fabric", "not-a-prefix")])
def test_problem_bad_pool_prefix(key, value):
    data = one_leaf()
    data["addressing"] = {key: value}
    problem = only_problem(data)
    assert problem.startswith(f"addressing.{key}:") and "write a prefix like" in problem


def test_problem_fabric_pool_too_small():
    data = one_leaf()
    data["addressing"] = {"fabric": "10.64.0.0/20"}
    assert "addressing.fabric must be /16 or larger" in only_problem(data)


@pytest.mark.parametrize(("field", "value", "expected"), [
    ("role", "router", "switch 'leaf0': role 'router' must be one of leaf, spine, core"),
    ("plane", 64, "switch 'leaf0': plane 64 must be 0..63"),
    ("name", "bad name!", "switch 'bad name!': use DNS labels"),
])
def test_problem_bad_switch_fields(field, value, expected):
    data = one_leaf()
    data["switches"][0][field] = value
    if field == "name":
        data["links"] = [{"a": "h0", "b": "bad name!"}]  # the link refers to the (bad) name
        data["hosts"] = data["hosts"][:1]
    assert only_problem(data).startswith(expected)


def test_problem_bad_topology_name():
    data = one_leaf()
    data["name"] = "has space"
    assert only_problem(data).startswith("name 'has space': use letters")


def test_problem_nic_plane_out_of_range():
    data = one_leaf()
    data["hosts"][0]["nics"] = [{"name": "eth0", "plane": 99}, {"name": "eth1", "plane": 0}]
    data["links"][0]["a"] = "h0:eth1"
    assert only_problem(data) == "host 'h0': NIC eth0 plane 99 must be 0..63"


def test_problem_link_without_endpoints():
    data = one_leaf()
    data["links"].append({"a": "h0"})
    assert only_problem(data).startswith("link 3: needs 'a' and 'b' endpoints")


def test_problem_link_to_itself():
    data = one_leaf()
    data["links"].append({"a": "leaf0:swp8", "b": "leaf0:swp9"})
    assert "link 3 (leaf0:swp8 -- leaf0:swp9): a link must join two different nodes" in only_problem(data)


def test_problem_port_cabled_twice():
    data = one_leaf(3)
    data["links"][1]["b"] = "leaf0:swp5"
    data["links"][2]["b"] = "leaf0:swp5"
    assert only_problem(data) == ("link 3 (h2 -- leaf0:swp5): port leaf0:swp5 is already cabled; "
                                  "each port takes one link")


def test_problem_section_not_a_list():
    data = one_leaf()
    data["switches"] = {"name": "leaf0"}
    problems = problems_of(data)
    assert "'switches' must be a list" in problems
    # with no switches the links now name an unknown node: reported too, not hidden
    assert sum("unknown node 'leaf0'" in p for p in problems) == 2


def test_several_problems_are_all_reported():
    data = one_leaf(3)
    data["hosts"].append({"name": "h1"})  # duplicate name
    data["links"][0]["rate"] = "fast"  # bad rate
    data["links"][1]["buffer"] = 0  # bad buffer
    data["links"][2]["b"] = "nowhere"  # unknown node
    data["switches"].append({"name": "s", "role": "router"})  # bad role
    problems = problems_of(data)
    assert len(problems) == 5
    assert any("host 'h1' is defined twice" in p for p in problems)
    assert any(p.startswith("link 1 (h0 -- leaf0): rate 'fast'") for p in problems)
    assert any(p.startswith("link 2 (h1 -- leaf0): buffer 0") for p in problems)
    assert any("link 3 (h2 -- nowhere): unknown node 'nowhere'" in p for p in problems)
    assert any("switch 's': role 'router'" in p for p in problems)


def test_several_semantic_problems_are_all_reported():
    data = two_plane()
    data["addressing"] = {"hosts": "10.64.0.0/16", "fabric": "10.64.0.0/10"}
    data["hosts"][0]["address"] = "10.64.0.9"
    data["hosts"][1]["address"] = "10.64.0.9"
    data["hosts"].append({"name": "h2", "address": "192.168.0.1"})
    data["links"].append({"a": "h2", "b": "l0"})
    data["links"][3]["b"] = "l0"  # h1:eth1 into plane 0
    problems = problems_of(data)
    assert len(problems) == 4
    assert "overlaps fabric" in problems[0]
    assert any("duplicate address 10.64.0.9 on hosts h0, h1" in p for p in problems)
    assert any(p.startswith("host h2: address 192.168.0.1") for p in problems)
    assert any("joins plane 1 to plane 0" in p for p in problems)


def test_load_reports_problems_with_file_name(tmp_path):
    path = tmp_path / "broken.yaml"
    data = one_leaf()
    data["links"][0]["b"] = "leafX"
    path.write_text(yaml.safe_dump(data))
    with pytest.raises(TopologyError) as info:
        load(path)
    assert str(info.value).startswith(f"{path}: link 1 (h0 -- leafX): unknown node 'leafX'")


def test_parse_does_not_modify_its_input():
    data = one_leaf()
    before = copy.deepcopy(data)
    parse(data)
    assert data == before


# ---- known bugs -----------------------------------------------------------------------------

def test_auto_port_skips_explicitly_used_port():
    data = one_leaf()
    data["links"][0]["b"] = "leaf0:swp1"
    topo = parse(data)
    assert topo.links[1].b == Port("leaf0", "swp2")


def test_auto_address_skips_explicitly_used_address():
    data = one_leaf()
    data["hosts"][0]["address"] = "10.0.0.2"  # h1, written without one, would be given 10.0.0.2
    topo = parse(data)
    assert topo.hosts["h1"].address != topo.hosts["h0"].address


@pytest.mark.parametrize("key, value", [("addressing", "10.0.0.0/16"), ("defaults", "1gbit")])
def test_problem_addressing_or_defaults_not_a_mapping(key, value):
    data = one_leaf()
    data[key] = value
    problem = only_problem(data)
    assert key in problem
