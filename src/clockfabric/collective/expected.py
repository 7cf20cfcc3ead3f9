"""What an all-reduce or an all-to-all should reach on a topology, from its link rates alone."""

from __future__ import annotations

from collections import defaultdict
from collections.abc import Sequence

from clockfabric.errors import ClockfabricError
from clockfabric.topology import Topology

Flow = tuple[str, str]  # (from host, to host): one ring hop, one direction


def common_planes(topo: Topology, hosts: Sequence[str]) -> list[int]:
    """The planes every one of hosts has a NIC on."""
    return [p for p in topo.planes if all(topo.hosts[h].nic(p) for h in hosts)]


def leaf_groups(topo: Topology, hosts: Sequence[str], plane: int) -> list[list[str]]:
    """hosts grouped by the switch their NIC on plane is cabled to, in order of first appearance."""
    groups: dict[str, list[str]] = {}
    for h in hosts:
        nic = topo.hosts[h].nic_on(plane)
        link = next(lk for lk in topo.links_of(h) if lk.port(h).iface == nic.name)
        groups.setdefault(link.other(h).node, []).append(h)
    return list(groups.values())


def expected_busbw_gbps(topology: Topology, hosts: Sequence[str], subflows: int,
                        planes: Sequence[int] | None = None, *, algorithm: str = "ring") -> float:
    """The busbw (GB/s) an all-reduce over hosts should reach if links were the only limit.

    The ring runs through hosts in the order given (rank i on hosts[i]); hop i sends from
    hosts[i] to hosts[i+1]. Subflow j of each hop is on plane planes[j % len(planes)]
    (default: every plane all hosts share). For a ring, busbw is what each hop moves per
    second; a hop on p planes can use up to the sum of those planes' bottleneck rates along
    its path, and the expectation is the minimum over the hops. Assumptions:

    - each subflow carries an equal share of a hop's bytes (the transport cuts messages so),
      so a plane with k_p of the k subflows carries k_p/k of them and the hop runs at
      min over its planes of (that plane's rate / (k_p/k)); with subflows spread evenly over
      planes that is the sum of the planes' rates;
    - within a plane, traffic splits evenly over the equal-cost next hops at every switch,
      as ECMP does on average; a few flows hashed onto one spine do worse than this;
    - a link carrying several hops (a leaf uplink the ring crosses more than once) is
      shared evenly among them; each direction of a link has its full rate;
    - link rates are line rates: TCP/IP and Ethernet headers cost about 4.4% at MTU 1500
      (1448 payload bytes per 1514 on the wire), so TCP peaks near 0.956 of this;
    - no CPU, latency or per-step cost: large messages.

    algorithm="hier" (groups by the leaf on the first plane) adds up three phases, each as
    above: reduce-scatter in the groups, an all-reduce across groups of 1/m of the buffer
    (m hosts per group), all-gather in the groups.
    """
    hosts = list(hosts)
    n = len(hosts)
    shares = _plane_shares(topology, hosts, subflows, planes, "an all-reduce")
    planes = list(planes) if planes is not None else common_planes(topology, hosts)

    def rate(flows):
        return _flow_rate(topology, shares, flows)

    def ring(members):
        return [(members[i], members[(i + 1) % len(members)]) for i in range(len(members))]

    groups = leaf_groups(topology, hosts, planes[0]) if algorithm == "hier" else [hosts]
    if algorithm not in ("ring", "hier"):
        raise ClockfabricError(f"unknown algorithm {algorithm!r}; use ring or hier")
    if len(groups) == 1 or len(groups) == n:  # one group, or one host per group: the flat ring
        return rate(ring(hosts)) / 8 / 1e9
    m, g = len(groups[0]), len(groups)
    if any(len(gr) != m for gr in groups):
        raise ClockfabricError(f"hier needs the same number of hosts under each leaf; got {[len(x) for x in groups]}")
    # bytes per flow in each phase, as a fraction of the buffer, over the rate of that phase
    intra = (m - 1) / m / rate([f for gr in groups for f in ring(gr)])
    inter = 2 * (g - 1) / g / m / rate([f for k in range(m) for f in ring([gr[k] for gr in groups])])
    return 2 * (n - 1) / n / (2 * intra + inter) / 8 / 1e9


def expected_alltoall_busbw_gbps(topology: Topology, hosts: Sequence[str], subflows: int,
                                 planes: Sequence[int] | None = None, *, algorithm: str = "pairwise") -> float:
    """The busbw (GB/s) an all-to-all over hosts should reach if links were the only limit.

    Rank i on hosts[i]; each rank sends 1/n of its buffer to each of the other n-1 (a flow per
    ordered pair), so a host link carries (n-1)/n of the buffer each way and, across leaves,
    the uplinks carry every flow between the leaves. Subflows, planes, ECMP, line rates: the
    same assumptions as expected_busbw_gbps. Flows that run at once, each with the same bytes,
    are done when the busiest link is: each gets min over links of (rate / flows on it).

    - oneshot: all n(n-1) flows at once. This is the bound for any schedule.
    - pairwise: n-1 steps one after another, step k the flows hosts[p] -> hosts[(p+k) % n];
      a step that sends many flows across leaves waits on the uplinks while others leave
      them idle, so it can fall below oneshot's figure. Assumes ranks stay in step (each
      step waits for its send and its receive, so they nearly do).

    busbw = algbw (n-1)/n = (n-1) / sum over steps of 1 / (a flow's rate).
    """
    hosts = list(hosts)
    n = len(hosts)
    shares = _plane_shares(topology, hosts, subflows, planes, "an all-to-all")
    steps = [[(hosts[p], hosts[(p + k) % n]) for p in range(n)] for k in range(1, n)]
    if algorithm == "oneshot":
        steps = [[f for step in steps for f in step]]
    elif algorithm != "pairwise":
        raise ClockfabricError(f"unknown all-to-all algorithm {algorithm!r}; use pairwise or oneshot")
    return (n - 1) / sum(1 / _flow_rate(topology, shares, flows) for flows in steps) / 8 / 1e9


def _plane_shares(topo: Topology, hosts: list[str], subflows: int, planes: Sequence[int] | None,
                  what: str) -> dict[int, float]:
    """plane -> fraction of every message's bytes (subflow j on planes[j % len(planes)]), after checking input."""
    if len(hosts) < 2:
        raise ClockfabricError(f"{what} needs at least 2 hosts")
    if subflows < 1:
        raise ClockfabricError(f"subflows must be at least 1 (got {subflows})")
    planes = list(planes) if planes is not None else common_planes(topo, hosts)
    if not planes:
        raise ClockfabricError("the hosts share no plane")
    shares: dict[int, float] = defaultdict(float)
    for j in range(subflows):
        shares[planes[j % len(planes)]] += 1 / subflows
    return shares


def _flow_rate(topo: Topology, shares: dict[int, float], flows: list[Flow]) -> float:
    """Bits/s each of these flows gets when they all run at once: the busiest link's rate over its load."""
    load: dict[tuple[int, str], float] = defaultdict(float)  # (link, from node) -> flows' shares
    for a, b in flows:
        for plane, share in shares.items():
            for key, fraction in _spread(topo, plane, a, b).items():
                load[key] += share * fraction
    return min(topo.links[i].rate_bps / x for (i, _), x in load.items())


def _spread(topo: Topology, plane: int, src: str, dst: str) -> dict[tuple[int, str], float]:
    """Fraction of src->dst traffic on each (link index, sending node), ECMP split hop by hop."""
    import networkx as nx  # only path questions need it

    g = topo.transit_graph(plane, src, dst)
    if src not in g or dst not in g or not nx.has_path(g, src, dst):
        raise ClockfabricError(f"{src} cannot reach {dst} on plane {plane}")
    dist = nx.single_source_shortest_path_length(g, dst)
    arriving = defaultdict(float, {src: 1.0})
    out: dict[tuple[int, str], float] = {}
    for node in sorted((v for v in dist if dist[v] <= dist[src]), key=lambda v: -dist[v]):
        if not arriving[node] or node == dst:
            continue
        hops = [(nbr, key) for nbr, keys in g[node].items() for key in keys if dist.get(nbr) == dist[node] - 1]
        for nbr, key in hops:
            out[(key, node)] = arriving[node] / len(hops)
            arriving[nbr] += arriving[node] / len(hops)
    return out
