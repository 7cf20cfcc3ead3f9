"""Addressing (/31 per link, a fabric slice per plane), routing tables (ECMP) and paths."""

import ipaddress
from collections import Counter

import pytest

from clockfabric.topology import NextHop, Port, Topology, interfaces, leafspine, multirail, parse, plane_subnet, routing_tables

NET = ipaddress.IPv4Network


def ring() -> Topology:
    """Four switches in a ring (s0-s1-s2-s3-s0) with a host on s0, s1 and s2: not a leaf-spine."""
    return parse({
        "name": "ring",
        "hosts": [{"name": "a"}, {"name": "b"}, {"name": "c"}],
        "switches": [{"name": f"s{i}"} for i in range(4)],
        "links": [{"a": "a", "b": "s0"}, {"a": "b", "b": "s1"}, {"a": "c", "b": "s2"}]
                 + [{"a": f"s{i}", "b": f"s{(i + 1) % 4}"} for i in range(4)],
    })


TOPOLOGIES = {
    "leafspine": lambda: leafspine(8, 2, 2),
    "multirail": lambda: multirail(8, 2, 2, 2),
    "multirail3": lambda: multirail(6, 3, 3, 2),
    "ring": ring,
}


@pytest.fixture(params=list(TOPOLOGIES), scope="module")
def topo(request):
    return TOPOLOGIES[request.param]()


def lookup(table, address):
    """Longest-prefix match, as the kernel does."""
    matches = [r for r in table if address in r.dst]
    if not matches:
        return None
    best = max(r.dst.prefixlen for r in matches)
    (route,) = [r for r in matches if r.dst.prefixlen == best]  # never two routes for one prefix
    return route


def walk(topo, tables, start, address, arrived, ifaces=None):
    """Every route from start to address, following all next hops (ECMP), as node tuples.

    Fails on a missing route, a next hop that is not the peer of its interface, a loop,
    or a packet that ends up somewhere arrived() rejects.
    """
    ifaces = ifaces or interfaces(topo)
    owner = {itf.address.ip: itf.port for itf in ifaces.values()}
    limit = len(topo.nodes())
    done = []

    def step(node, trail):
        trail = (*trail, node)
        if len(trail) > 1 and arrived(node):
            done.append(trail)
            return
        assert node not in trail[:-1], f"loop: {trail}"
        assert len(trail) <= limit, f"too long: {trail}"
        assert len(trail) == 1 or node in topo.switches, f"host {node} asked to forward: {trail}"
        route = lookup(tables[node], address)
        assert route is not None, f"{node} has no route to {address} ({trail})"
        assert route.nexthops, f"{node}: empty route to {address}"
        for nh in route.nexthops:
            itf = ifaces[Port(node, nh.iface)]
            assert nh.gateway == itf.peer_address, f"{node}: gateway {nh.gateway} is not on {nh.iface}"
            step(owner[nh.gateway].node, trail)

    step(start, ())
    return done


# ---- addressing -----------------------------------------------------------------------------

def test_every_cabled_port_has_one_interface(topo):
    ifaces = interfaces(topo)
    assert set(ifaces) == {p for lk in topo.links for p in (lk.a, lk.b)}
    assert len(ifaces) == 2 * len(topo.links)


def test_interface_addresses_are_unique_31s_shared_by_both_ends(topo):
    ifaces = interfaces(topo)
    ips = [itf.address.ip for itf in ifaces.values()]
    assert len(set(ips)) == len(ips)
    nets = Counter(itf.address.network for itf in ifaces.values())
    assert set(nets.values()) == {2}  # every /31 on exactly the two ends of one link
    for i, lk in enumerate(topo.links):
        a, b = ifaces[lk.a], ifaces[lk.b]
        assert a.address.network.prefixlen == 31
        assert a.address.network == b.address.network
        assert a.address.ip != b.address.ip
        assert (a.peer, b.peer) == (lk.b, lk.a)
        assert (a.peer_address, b.peer_address) == (b.address.ip, a.address.ip)
        assert a.link_index == b.link_index == i


def test_interface_addresses_stay_out_of_the_host_pool(topo):
    for itf in interfaces(topo).values():
        assert itf.address.ip in topo.fabric_pool
        assert itf.address.ip not in topo.host_pool
    assert not {h.address for h in topo.hosts.values()} & {i.address.ip for i in interfaces(topo).values()}


def test_plane_links_lie_inside_their_plane_subnet(topo):
    for itf in interfaces(topo).values():
        plane = topo.plane_of(itf.port)
        assert itf.address.network.subnet_of(plane_subnet(topo, plane))
        for other in topo.planes:
            if other != plane:
                assert itf.address.ip not in plane_subnet(topo, other)


def test_plane_subnets_are_disjoint_slices_of_the_fabric_pool():
    topo = leafspine(2, 1, 0)
    subnets = [plane_subnet(topo, r) for r in range(64)]
    assert subnets[0] == NET("10.64.0.0/16")
    assert subnets[1] == NET("10.65.0.0/16")
    assert subnets[63] == NET("10.127.0.0/16")
    assert all(s.subnet_of(topo.fabric_pool) for s in subnets)
    assert all(not a.overlaps(b) for i, a in enumerate(subnets) for b in subnets[i + 1:])


def test_addresses_are_packed_per_plane_in_link_order():
    topo = multirail(2, 2, 1, 0)  # links: h0:eth0, h1:eth0 (plane 0), then h0:eth1, h1:eth1 (plane 1)
    ifaces = interfaces(topo)
    assert [str(ifaces[lk.a].address) for lk in topo.links] == [
        "10.64.0.0/31", "10.64.0.2/31", "10.65.0.0/31", "10.65.0.2/31"]


# ---- routing tables -------------------------------------------------------------------------

def gateway_of(topo, node, peer):
    """The address node uses to reach its neighbour peer (the peer's end of their link)."""
    ifaces = interfaces(topo)
    return ifaces[topo.find_link(node, peer).port(peer)].address.ip


def test_leaf_route_to_host_under_another_leaf_is_ecmp_over_spines():
    topo = leafspine(8, 2, 2)
    tables = routing_tables(topo)
    route = lookup(tables["leaf0"], topo.hosts["h5"].address)
    assert route.dst == NET(f"{topo.hosts['h5'].address}/32")
    assert sorted(route.nexthops, key=lambda nh: nh.iface) == [NextHop("swp5", gateway_of(topo, "leaf0", "spine0")),
                                                                NextHop("swp6", gateway_of(topo, "leaf0", "spine1"))]
    assert route.src is None


def test_spine_route_to_host_has_one_nexthop():
    topo = leafspine(8, 2, 2)
    tables = routing_tables(topo)
    for spine in ("spine0", "spine1"):
        for host, leaf in (("h1", "leaf0"), ("h6", "leaf1")):
            (nh,) = lookup(tables[spine], topo.hosts[host].address).nexthops
            assert nh.gateway == gateway_of(topo, spine, leaf)


def test_leaf_route_to_its_own_host_goes_straight_to_it():
    topo = leafspine(8, 2, 2)
    tables = routing_tables(topo)
    (nh,) = lookup(tables["leaf1"], topo.hosts["h4"].address).nexthops
    assert nh.iface == "swp1"
    assert nh.gateway == gateway_of(topo, "leaf1", "h4")


def leaf_name(host, plane):
    """multirail(8, 2, 2, 2): h0-h3 under leaf0, h4-h7 under leaf1, in every plane."""
    return f"p{plane}-leaf{0 if int(host[1:]) < 4 else 1}"


def test_host_route_to_host_pool_uses_every_nic_with_stable_source():
    topo = multirail(8, 2, 2, 2)
    tables = routing_tables(topo)
    for h in topo.hosts.values():
        (pool_route,) = [r for r in tables[h.name] if r.dst == topo.host_pool]
        assert pool_route.src == h.address
        assert len(pool_route.nexthops) == len(h.nics) == 2
        assert {nh.iface for nh in pool_route.nexthops} == {"eth0", "eth1"}
        for nh in pool_route.nexthops:
            plane = h.nics[[n.name for n in h.nics].index(nh.iface)].plane
            assert nh.gateway == gateway_of(topo, f"{h.name}:{nh.iface}", leaf_name(h.name, plane))


def test_host_routes_each_plane_subnet_out_of_that_planes_nic():
    topo = multirail(8, 2, 2, 2)
    tables = routing_tables(topo)
    ifaces = interfaces(topo)
    table = tables["h3"]
    assert len(table) == 1 + 2
    for plane in (0, 1):
        (route,) = [r for r in table if r.dst == plane_subnet(topo, plane)]
        (nh,) = route.nexthops
        assert nh.iface == f"eth{plane}"
        assert route.src == ifaces[Port("h3", f"eth{plane}")].address.ip


def test_switch_tables_hold_hosts_of_their_plane_and_remote_links_only(topo):
    tables = routing_tables(topo)
    ifaces = interfaces(topo)
    for sw in topo.switches.values():
        table = tables[sw.name]
        dsts = [r.dst for r in table]
        assert len(set(dsts)) == len(dsts)  # one route per destination
        hosts = {NET(h.address) for h in topo.hosts.values() if h.nic(sw.plane)}
        own = {ifaces[lk.port(sw.name)].address.network for lk in topo.links_of(sw.name)}
        remote = {itf.address.network for itf in ifaces.values()
                  if topo.plane_of(itf.port) == sw.plane} - own  # connected /31s need no route
        assert set(dsts) == hosts | remote
        assert all(r.src is None for r in table)


def test_every_switch_reaches_every_host_of_its_plane(topo):
    tables, ifaces = routing_tables(topo), interfaces(topo)
    for sw in topo.switches.values():
        for h in topo.hosts.values():
            if not h.nic(sw.plane):
                continue
            walks = walk(topo, tables, sw.name, h.address, arrived=lambda n, h=h: n == h.name, ifaces=ifaces)
            assert walks, (sw.name, h.name)
            assert all(w[-1] == h.name for w in walks)


def test_every_switch_reaches_every_link_address_of_its_plane(topo):
    tables = routing_tables(topo)
    ifaces = interfaces(topo)
    for sw in topo.switches.values():
        for itf in ifaces.values():
            if topo.plane_of(itf.port) != sw.plane or sw.name in (itf.port.node, itf.peer.node):
                continue
            ends = {itf.port.node, itf.peer.node}
            walks = walk(topo, tables, sw.name, itf.address.ip, arrived=lambda n, ends=ends: n in ends, ifaces=ifaces)
            assert walks and all(w[-1] in ends for w in walks)


def test_host_to_host_routes_follow_exactly_the_shortest_paths(topo):
    """Following the tables from a host over every NIC and ECMP branch gives topo.paths()."""
    tables, ifaces = routing_tables(topo), interfaces(topo)
    names = list(topo.hosts)
    for src in names:
        for dst in names:
            if src == dst:
                continue
            walks = walk(topo, tables, src, topo.hosts[dst].address, arrived=lambda n, d=dst: n == d, ifaces=ifaces)
            assert sorted(walks) == sorted(p.nodes for p in topo.paths(src, dst)), (src, dst)


def test_ring_takes_both_ways_round_when_they_tie():
    topo = ring()
    tables = routing_tables(topo)
    c = topo.hosts["c"].address
    assert len(lookup(tables["s0"], c).nexthops) == 2  # s0 -> s1 -> s2 and s0 -> s3 -> s2
    assert len(lookup(tables["s1"], c).nexthops) == 1
    assert len(lookup(tables["s3"], c).nexthops) == 1
    assert sorted(p.nodes for p in topo.paths("a", "c")) == [("a", "s0", "s1", "s2", "c"),
                                                              ("a", "s0", "s3", "s2", "c")]


def test_links_through_a_traced_switch():
    topo = multirail(4, 2, 2, 2)  # h0, h1 under p*-leaf0; h2, h3 under p*-leaf1
    name = lambda a, b: topo.find_link(a, b).name  # noqa: E731
    assert topo.links_through("h0", "h2", 1, "p1-spine1") == [
        name("h0:eth1", "p1-leaf0"), name("p1-leaf0", "p1-spine1"), name("p1-spine1", "p1-leaf1"),
        name("p1-leaf1", "h2:eth1")]
    # no switch known: only what every path on the plane shares, the two host cables
    assert topo.links_through("h0", "h2", 0) == [name("h0:eth0", "p0-leaf0"), name("p0-leaf1", "h2:eth0")]
    assert topo.links_through("h0", "h1", 0) == [name("h0:eth0", "p0-leaf0"), name("p0-leaf0", "h1:eth0")]
    assert topo.links_through("h0", "h2", 0, "p1-spine0") == []  # a spine of the other plane
    assert topo.links_through("h0", "h2", 0, "p0-spine0", at=1) == []  # at TTL 1 a leaf answers, not a spine
