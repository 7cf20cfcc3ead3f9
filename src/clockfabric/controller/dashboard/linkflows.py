"""The flows that cross one link, for the fabric map's link details. Pure: flows in, rows out.

A flow's links are what the root cause knows of them (controller.rootcause_inputs): its hops,
where its agent traced the switch it crosses or every path between its hosts shares them, and,
where the switch is not traced, every link it may cross. A flow on a hop crosses the link; one
that only may cross it is listed as such (`certain` false).
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
