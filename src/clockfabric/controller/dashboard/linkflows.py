"""The flows that cross one link, for the fabric map's link details, and the load flows put on
each link, for the map's colours. Pure: flows in, rows out.

A flow's links are what the root cause knows of them (controller.rootcause_inputs): its hops,
where its agent traced the switch it crosses or every path between its hosts shares them, and,
where the switch is not traced, every link it may cross. A flow on a hop crosses the link; one
that only may cross it is listed as such (`certain` false), and adds to no link's load.
"""

from __future__ import annotations

from collections.abc import Iterable

from clockfabric.controller.rootcause import Flow


def crossing(flows: Iterable[Flow], link: str) -> list[dict]:
    """{host, flow, jobid, peer, plane, tx_bps, t_ns, certain} of each flow that crosses or may cross
    `link`, those that surely cross it first, then the fastest; tx_bps and t_ns: its newest reading."""
    out = []
    for f in flows:
        if link not in {name for name, _ in f.may_cross()}:
            continue
        newest = max(f.points, key=lambda p: p.t_ns, default=None)
        out.append({"host": f.host, "flow": f.flow, "jobid": f.jobid, "peer": f.peer, "plane": f.plane,
                    "tx_bps": newest.tx_bps if newest else None, "t_ns": newest.t_ns if newest else None,
                    "certain": link in {name for name, _ in f.hops}})
    return sorted(out, key=lambda r: (not r["certain"], -(r["tx_bps"] or 0.0), r["host"], r["flow"]))


def load(flows: Iterable[Flow], rates: dict[str, float]) -> dict[str, dict]:
    """{link: {bps, share}} of each link some flow surely crosses: the sum of those flows' newest
    sending rates, and that as a share of the link's rate (null where its rate is unknown)."""
    sums: dict[str, float] = {}
    for f in flows:
        newest = max(f.points, key=lambda p: p.t_ns, default=None)
        if newest is None or not newest.tx_bps:
            continue
        for name in {name for name, _ in f.hops}:
            sums[name] = sums.get(name, 0.0) + newest.tx_bps
    return {name: {"bps": bps, "share": bps / rates[name] if rates.get(name) else None}
            for name, bps in sorted(sums.items())}
