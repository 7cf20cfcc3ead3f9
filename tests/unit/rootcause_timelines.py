"""Recorded-shape multi-flow timelines for the root-cause tests: a two-leaf, two-spine fabric
(h0, h1 on leaf0; h2, h3 on leaf1), 1 Gbit/s links, a reading a second for 30 s."""

from __future__ import annotations

from clockfabric.controller.rootcause import Flow, FlowPoint, Hop, LinkEvent, ProbePath
from clockfabric.controller.rootcause_fabric import Fabric

S = 10**9
NOW = 1_000 * S
READINGS = 30
LEAF = {"h0": "leaf0", "h1": "leaf0", "h2": "leaf1", "h3": "leaf1"}
PLANE0 = ("10.0", "10.1")  # NIC address prefixes of plane 0 and 1


def link(x: str, y: str) -> str:
    """A link's one name, whichever way it is crossed."""
    return "--".join(sorted((x, y)))


def hops(src: str, dst: str, spine: str) -> tuple[Hop, ...]:
    nodes = (src, LEAF[src], spine, LEAF[dst], dst)
    return tuple((link(x, y), f"{x}>{y}") for x, y in zip(nodes, nodes[1:], strict=False))


def links() -> dict[str, float]:
    names = {name for s in LEAF for d in LEAF if LEAF[s] != LEAF[d] for sp in ("spine0", "spine1")
             for name, _ in hops(s, d, sp)}
    return dict.fromkeys(names, 1e9)


def flow(src: str, dst: str, spine: str, jobid: str | None, mbps: float, rtt_us: float, *, port: int = 5000,
         then: tuple[float, float] | None = None, at: int = READINGS // 2, plane: int | None = 0,
         dscp: int | None = 26, owd_us: float | None = None, send_queue: float | None = 0.0) -> Flow:
    """A flow's readings: `mbps` and `rtt_us`, switching to `then` (rate, RTT) from reading `at` on;
    `send_queue`: what waits in its socket at each (an agent reads it with the rest; None: unread)."""
    points = []
    for i in range(READINGS):
        rate, rtt = then if then and i >= at else (mbps, rtt_us)
        wobble = 1 + 0.03 * ((i * 7) % 5 - 2)  # a few percent either way, as readings go
        points.append(FlowPoint(NOW - (READINGS - i) * S, rate * 1e6 * wobble, rtt * wobble,
                                None if owd_us is None else owd_us * wobble, send_queue))
    return Flow(src, f"10.0.0.{src[1:]}:{port}->10.0.1.{dst[1:]}:5201", jobid, dst, plane, hops(src, dst, spine),
                dscp, tuple(points))


def ring(jobid: str, mbps: float = 300, rtt_us: float = 60, **slow: tuple[float, float]) -> list[Flow]:
    """Job `jobid` as a ring over the four hosts, spreading over both spines; `slow`: per sending
    host, its flow's (rate, RTT) from the middle of the window on."""
    route = [("h0", "h2", "spine0"), ("h2", "h1", "spine0"), ("h1", "h3", "spine1"), ("h3", "h0", "spine1")]
    return [flow(s, d, sp, jobid, mbps, rtt_us, then=slow.get(s)) for s, d, sp in route]


def fabric(events: list[LinkEvent] | None = None, floors: bool = True) -> Fabric:
    probe = [ProbePath(s, d, hops(s, d, sp), 12.0, 13.0) for s in LEAF for d in LEAF
             if LEAF[s] != LEAF[d] for sp in ("spine0", "spine1")] if floors else []
    return Fabric(floors=probe, link_rates=links(), events=events or [], collective_dscp=(26,))


def receivers(flows: list[Flow]) -> list[Flow]:
    """The flows with each one's receiving socket, as its peer's agent reports it: sending
    nothing, marking the flow's DSCP (a job that marks both ends: its ACKs ride its class)."""
    return flows + [Flow(f.peer or "", "->".join(reversed(f.flow.split("->"))), f.jobid, f.host, f.plane, (), f.dscp,
                         tuple(FlowPoint(p.t_ns, 0.0, p.rtt_us) for p in f.points)) for f in flows]


def untraced(f: Flow) -> Flow:
    """The flow as the controller sees it when its trace was lost (often in the very queue that
    slows it): only its host links known, every link of both spines' paths in reach."""
    a, b = LEAF[f.host], LEAF[f.peer or ""]
    spines = [hops(f.host, f.peer or "", sp) for sp in ("spine0", "spine1")]
    reach = tuple(h for i in range(4) for h in dict.fromkeys(route[i] for route in spines))
    known = ((link(f.host, a), f"{f.host}>{a}"), (link(b, f.peer or ""), f"{b}>{f.peer}"))
    return Flow(**{**f.__dict__, "hops": known, "reach": reach})
