"""Topology generators: leaf-spine and multi-rail."""

import json
from collections import Counter

import pytest

from clockfabric.errors import ClockfabricError
from clockfabric.topology import leafspine, multirail


def leaf_of(topo, host: str, plane: int) -> str:
    """The switch host's NIC on plane is cabled to."""
    nic = topo.hosts[host].nic(plane)
    (link,) = [lk for lk in topo.links_of(host) if lk.port(host).iface == nic.name]
    return link.other(host).node


def is_host_link(topo, lk) -> bool:
    return lk.a.node in topo.hosts or lk.b.node in topo.hosts


# ---- leafspine ------------------------------------------------------------------------------

def test_leafspine_counts_and_names():
    topo = leafspine(8, 2, 2)
    assert topo.name == "leafspine-8"
    assert list(topo.hosts) == [f"h{i}" for i in range(8)]
    assert {n: (s.role, s.plane) for n, s in topo.switches.items()} == {
        "leaf0": ("leaf", 0), "leaf1": ("leaf", 0), "spine0": ("spine", 0), "spine1": ("spine", 0)}
    assert len(topo.links) == 8 + 2 * 2
    assert topo.planes == [0]
    assert topo.meta == {"generator": "leafspine", "hosts": 8, "planes": 1, "leaves": 2, "spines": 2}


def test_leafspine_every_leaf_joins_every_spine_once():
    topo = leafspine(8, 2, 2)
    fabric = Counter(frozenset((lk.a.node, lk.b.node)) for lk in topo.links if not is_host_link(topo, lk))
    assert fabric == {frozenset((f"leaf{j}", f"spine{k}")): 1 for j in range(2) for k in range(2)}


def test_leafspine_hosts_spread_evenly_in_order():
    topo = leafspine(8, 2, 2)
    assert [leaf_of(topo, f"h{i}", 0) for i in range(8)] == ["leaf0"] * 4 + ["leaf1"] * 4


def test_leafspine_paths():
    topo = leafspine(8, 2, 2)
    far = topo.paths("h0", "h5")
    assert sorted(p.nodes for p in far) == [("h0", "leaf0", "spine0", "leaf1", "h5"),
                                            ("h0", "leaf0", "spine1", "leaf1", "h5")]
    assert all(p.plane == 0 for p in far)
    assert far[0].switches == ("leaf0", "spine0", "leaf1")
    near = topo.paths("h1", "h3")
    assert [(p.plane, p.nodes) for p in near] == [(0, ("h1", "leaf0", "h3"))]


def test_leafspine_fabric_rate_applies_to_leaf_spine_links_only():
    topo = leafspine(8, 2, 2, host_rate="10gbit", fabric_rate="40gbit", buffer=64)
    host_links = [lk for lk in topo.links if is_host_link(topo, lk)]
    fabric_links = [lk for lk in topo.links if not is_host_link(topo, lk)]
    assert len(host_links) == 8 and len(fabric_links) == 4
    assert {lk.rate_bps for lk in host_links} == {10 * 10**9}
    assert {lk.rate_bps for lk in fabric_links} == {40 * 10**9}
    assert {lk.buffer_pkts for lk in topo.links} == {64}
    assert topo.default_rate_bps == 10 * 10**9


def test_leafspine_fabric_rate_defaults_to_host_rate():
    topo = leafspine(4, 2, 1, host_rate="25gbit")
    assert {lk.rate_bps for lk in topo.links} == {25 * 10**9}


def test_leafspine_single_leaf_needs_no_spine():
    topo = leafspine(3, 1, 0, name="tiny")
    assert topo.name == "tiny"
    assert list(topo.switches) == ["leaf0"]
    assert len(topo.links) == 3
    assert [p.nodes for p in topo.paths("h0", "h2")] == [("h0", "leaf0", "h2")]


# ---- multirail ------------------------------------------------------------------------------

def test_multirail_counts_and_names():
    topo = multirail(8, 2, 2, 2)
    assert topo.name == "dualplane-8"
    assert len(topo.hosts) == 8
    assert sorted(topo.switches) == sorted(f"p{r}-{role}{i}" for r in range(2)
                                          for role in ("leaf", "spine") for i in range(2))
    assert all(s.plane == int(n[1]) for n, s in topo.switches.items())
    assert len(topo.links) == 2 * (8 + 2 * 2)
    assert topo.planes == [0, 1]
    assert topo.meta["generator"] == "multirail"
    assert multirail(4, 3, 2, 1).name == "multirail3-4"


def test_multirail_every_host_has_one_nic_per_plane_cabled_into_that_plane():
    topo = multirail(8, 2, 2, 2)
    for h in topo.hosts.values():
        assert sorted(n.plane for n in h.nics) == [0, 1]
        assert [n.name for n in h.nics] == ["eth0", "eth1"]
        for n in h.nics:
            leaf = topo.switches[leaf_of(topo, h.name, n.plane)]
            assert (leaf.role, leaf.plane) == ("leaf", n.plane)


def test_multirail_hosts_spread_evenly_over_leaves_in_every_plane():
    topo = multirail(8, 2, 2, 2)
    for r in (0, 1):
        per_leaf = Counter(leaf_of(topo, h, r) for h in topo.hosts)
        assert per_leaf == {f"p{r}-leaf0": 4, f"p{r}-leaf1": 4}
    # the same hosts share a leaf in every plane (rails line up)
    assert all(leaf_of(topo, h, 0)[3:] == leaf_of(topo, h, 1)[3:] for h in topo.hosts)


def test_multirail_paths_under_different_leaves_are_spines_times_planes():
    topo = multirail(8, 2, 2, 2)
    paths = topo.paths("h0", "h7")
    assert len(paths) == 2 * 2
    assert Counter(p.plane for p in paths) == {0: 2, 1: 2}
    for p in paths:
        assert len(p.nodes) == 5 and (p.nodes[0], p.nodes[-1]) == ("h0", "h7")
        assert all(topo.switches[s].plane == p.plane for s in p.switches)
    assert {p.nodes[2] for p in paths} == {"p0-spine0", "p0-spine1", "p1-spine0", "p1-spine1"}


def test_multirail_paths_under_same_leaf_are_one_per_plane():
    topo = multirail(8, 2, 2, 2)
    paths = topo.paths("h4", "h6")
    assert [(p.plane, p.nodes) for p in paths] == [(0, ("h4", "p0-leaf1", "h6")), (1, ("h4", "p1-leaf1", "h6"))]


def test_multirail_paths_scale_with_spines_and_planes():
    topo = multirail(6, 3, 2, 3)
    assert len(topo.paths("h0", "h5")) == 3 * 3
    assert len(topo.paths("h0", "h1")) == 3


def test_multirail_fabric_rate_applies_to_leaf_spine_links_only():
    topo = multirail(8, 2, 2, 2, host_rate="100gbit", fabric_rate="400gbit")
    for lk in topo.links:
        leaf_spine = {topo.switches[n].role for n in (lk.a.node, lk.b.node) if n in topo.switches} == {"leaf", "spine"}
        assert lk.rate_bps == (400 if leaf_spine else 100) * 10**9, lk.name


def test_generated_topologies_have_no_host_to_host_or_cross_plane_links():
    topo = multirail(8, 2, 2, 2)
    for lk in topo.links:
        assert not (lk.a.node in topo.hosts and lk.b.node in topo.hosts)
        assert topo.plane_of(lk.a) == topo.plane_of(lk.b)


# ---- bad arguments --------------------------------------------------------------------------

@pytest.mark.parametrize(("args", "words"), [
    ((2, 3, 1), "--leaves (3) must not exceed --hosts (2)"),
    ((0, 1, 0), "--hosts must be at least 1 (got 0)"),
    ((8, 2, 0), "at least one spine"),
    ((4, 0, 1), "--leaves must be at least 1"),
    ((4, 1, -1), "--spines must be at least 0"),
])
def test_leafspine_bad_arguments(args, words):
    with pytest.raises(ClockfabricError) as info:
        leafspine(*args)
    assert words in str(info.value)


@pytest.mark.parametrize(("args", "words"), [
    ((8, 0, 2, 2), "--planes must be at least 1"),
    ((1, 2, 2, 1), "--leaves (2) must not exceed --hosts (1)"),
    ((8, 2, 2, 0), "at least one spine"),
])
def test_multirail_bad_arguments(args, words):
    with pytest.raises(ClockfabricError) as info:
        multirail(*args)
    assert words in str(info.value)


@pytest.mark.parametrize("kwargs", [{"host_rate": "fast"}, {"fabric_rate": "0"}])
def test_bad_rate_argument_is_a_clockfabric_error(kwargs):
    with pytest.raises(ClockfabricError):
        leafspine(4, 2, 1, **kwargs)


@pytest.mark.parametrize(("hosts", "leaves"), [(6, 4), (10, 4), (9, 4)])
def test_uneven_host_counts_still_spread_evenly(hosts, leaves):
    topo = leafspine(hosts, leaves, 1)
    per_leaf = Counter(leaf_of(topo, h, 0) for h in topo.hosts)
    counts = [per_leaf.get(f"leaf{j}", 0) for j in range(leaves)]
    assert min(counts) >= 1
    assert max(counts) - min(counts) <= 1


def test_the_cli_writes_and_shows_a_jumbo_topology(cli, tmp_path):
    path = tmp_path / "jumbo.yaml"
    cli("topology", "generate", "leafspine", "--hosts", "4", "--spines", "1", "--mtu", "9000", "-o", str(path))
    assert json.loads(cli("topology", "show", str(path), "--json").stdout)["mtu"] == 9000
    bad = cli("topology", "generate", "leafspine", "--mtu", "100000", "-o", str(tmp_path / "bad.yaml"), check=False)
    assert bad.returncode != 0 and "mtu 100000 must be a byte count from 1280 to 9216" in bad.stderr
    assert "Traceback" not in bad.stderr and not (tmp_path / "bad.yaml").exists()


def test_the_cli_writes_traffic_classes_only_when_asked(cli, tmp_path):
    from clockfabric.topology import TrafficClasses, load

    classed, plain = tmp_path / "classed.yaml", tmp_path / "plain.yaml"
    cli("topology", "generate", "multirail", "--hosts", "4", "--classes", "-o", str(classed))
    cli("topology", "generate", "multirail", "--hosts", "4", "-o", str(plain))
    assert load(classed).classes == TrafficClasses()
    assert load(plain).classes is None
