"""The agent's path map without a network: which peers are traced, how answers become switches."""

import threading

from clockfabric.agent.pathmap import PathMapper
from clockfabric.errors import ClockfabricError
from clockfabric.probe.engine import path_label
from clockfabric.topology import Port, interfaces, multirail

TOPO = multirail(4, 2, 2, 2)  # h0, h1 under p*-leaf0; h2, h3 under p*-leaf1; two planes
FLOWS = [(path_label(rail, 7300 + k), rail, 7302 + k, 7300 + k) for rail in ("eth0", "eth1") for k in range(2)]
ADDRESS = {p: str(i.address.ip) for p, i in interfaces(TOPO).items()}


def spine_address(plane: int, spine: int) -> str:
    """The address a spine answers from: its port toward leaf0."""
    port = TOPO.find_link(f"p{plane}-leaf0", f"p{plane}-spine{spine}").port(f"p{plane}-spine{spine}")
    return ADDRESS[Port(port.node, port.iface)]


def fabric(calls: list, *, silent: set = frozenset()):
    """A trace over a fabric that hashes sport onto spine sport % 2, on the plane of the NIC it leaves by."""
    def trace(src, dst, flows, *, proto, ttl, device):
        calls.append((src, dst, proto, ttl, device))
        plane = int(device[-1])
        return {(s, d): None if s in silent else spine_address(plane, s % 2) for s, d in flows}
    return trace


def test_peers_across_the_fabric_are_traced_on_each_rail_and_same_leaf_peers_are_not():
    calls = []
    mapper = PathMapper(TOPO, "h0", ["h1", "h2", "h3"], FLOWS, trace_fn=fabric(calls, silent={7303}))
    rows = mapper.learn()
    h0, h2 = str(TOPO.hosts["h0"].address), str(TOPO.hosts["h2"].address)
    assert (h0, h2, "udp", 2, "eth1") in calls
    assert len(calls) == 4 and not [c for c in calls if c[1] == str(TOPO.hosts["h1"].address)]
    assert ("h1", "eth0:7300", 0, None) in rows  # one path, no spine: not traced
    assert ("h2", "eth0:7300", 0, "p0-spine0") in rows  # sport 7302 hashes onto spine 0
    assert ("h2", "eth1:7300", 1, "p1-spine0") in rows
    assert ("h3", "eth0:7301", 0, None) in rows  # sport 7303 got no answer: no switch named
    assert len(rows) == 3 * len(FLOWS)


def test_learns_again_when_woken_and_says_when_the_map_changed():
    calls, changed = [], threading.Event()
    mapper = PathMapper(TOPO, "h0", ["h2"], FLOWS, every_s=3600, trace_fn=fabric(calls), on_change=changed.set)
    mapper.start()
    try:
        assert changed.wait(5) and mapper.rows
        first = len(calls)
        mapper.wake()  # a link of the host changed
        for _ in range(100):
            if len(calls) > first:
                break
            threading.Event().wait(0.02)
        assert len(calls) == 2 * first
    finally:
        mapper.stop()
        mapper.join(5)
    assert not mapper.is_alive()


def test_without_raw_sockets_the_mapper_gives_up_quietly(caplog):
    def refuse(*args, **kwargs):
        raise ClockfabricError("path discovery sends raw probes, which needs root or CAP_NET_RAW; run it with sudo")

    mapper = PathMapper(TOPO, "h0", ["h2"], FLOWS, trace_fn=refuse)
    mapper.start()
    mapper.join(5)
    assert not mapper.is_alive() and mapper.rows == []
    assert "CAP_NET_RAW" in caplog.text


def test_a_peer_without_a_route_does_not_stop_the_map():
    calls = []
    inner = fabric(calls)
    h2 = str(TOPO.hosts["h2"].address)

    def trace(src, dst, flows, **kw):
        if dst == h2:
            raise ClockfabricError(f"no route from {src} to {dst}")
        return inner(src, dst, flows, **kw)

    rows = PathMapper(TOPO, "h0", ["h2", "h3"], FLOWS, trace_fn=trace).learn()
    assert {r[3] for r in rows if r[0] == "h2"} == {None}  # its paths name no switch
    assert {r[3] for r in rows if r[0] == "h3"} == {"p0-spine0", "p0-spine1", "p1-spine0", "p1-spine1"}
