"""Each link's queueing now, located from the whole probe mesh: the fabric map's third colouring.

Every probe path's newest delay over its floor, with the links its host traced it across, goes to
localization as `job why` gives it its mesh (rootcause_verdict.observations, with no flows): the
links whose queueing explains the queued paths are the suspects. A link named with others that
no path tells apart is marked ambiguous, never picked. A path whose newest delay is older than
RECENT_NS counts for nothing: a queue that has drained, or a host gone quiet, locates nothing.
"""

from __future__ import annotations

import time

from clockfabric import localization
from clockfabric.controller.fleet import Fleet
from clockfabric.controller.rootcause import Thresholds
from clockfabric.controller.rootcause_fabric import Fabric, observations
from clockfabric.controller.rootcause_inputs import PlacesCache, probe_paths
from clockfabric.topology import Topology

RECENT_NS = 15 * 10**9  # a few of the agents' pushes: what the map calls "now"


def link_queueing(fleet: Fleet, topology: Topology, places: PlacesCache, now_ns: int | None = None) -> dict:
    """{"strength", "lacks", "paths", "queued", "links": {name: {excess_us, direction, ambiguous,
    with, queued_paths}}}: the links localization names, each with the excess it explains."""
    now_ns = time.time_ns() if now_ns is None else now_ns
    here = places.get(topology, {h.info["address"]: h.name for h in fleet.storage.hosts() if h.info.get("address")})
    path_map = fleet.monitor.path_map() if fleet.monitor else []
    paths = probe_paths(fleet.samples, path_map, here, None, since_ns=now_ns - RECENT_NS)
    classes = topology.classes
    fabric = Fabric(paths, collective_dscp=classes.collective_dscp if classes else None)
    verdict = localization.locate(observations([], fabric, Thresholds()))
    links: dict[str, dict] = {}
    for suspect in verdict.suspects:
        names = [name for name, _ in suspect.hops]
        for name, way in suspect.hops:
            links.setdefault(name, {"excess_us": suspect.excess_us, "direction": way.replace(">", "->") or None,
                                    "ambiguous": suspect.ambiguous, "with": [n for n in names if n != name],
                                    "queued_paths": len(suspect.queued)})
    return {"strength": verdict.strength, "lacks": list(verdict.lacks), "paths": verdict.paths,
            "queued": verdict.queued, "links": links}
