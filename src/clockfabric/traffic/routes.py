"""Per-peer routes through netlink: the host's lever for moving traffic between planes.

The host's own route to the other hosts (multipath over every NIC) is left alone. To keep
a peer off a plane we add a /32 route to the peer over the remaining planes' next hops;
the more specific route wins, and because the host's TCP connections are bound to its
stable address, not to a NIC, they carry on over the new route with no reconnect. Our
routes carry their own protocol number, so a restarted agent finds exactly its routes in
the kernel (and nobody else's), and if the agent dies they stay and keep working
(fail-static). Sockets bound to a NIC (the agent's own probes) still reach the peer over
that NIC: with the /32 having no next hop there, the lookup falls back to the host route.
"""

from __future__ import annotations

import ipaddress
import socket

from pyroute2 import IPRoute, NetlinkError

RTPROT_CLOCKFABRIC = 199  # the route's "protocol" field: 186-192 are BGP, IS-IS, OSPF, RIP, EIGRP
MAIN_TABLE = 254


class RouteError(Exception):
    pass


class PlaneRoutes:
    def __init__(self, source: str, nics: dict[int, str], ipr: IPRoute | None = None):
        """`source`: this host's stable address; `nics`: plane -> NIC name."""
        self.source = source
        self.nics = nics
        self.ipr = ipr or IPRoute()
        self._index = {name: self.ipr.link_lookup(ifname=name)[0] for name in nics.values()}
        self._gateways: dict[str, dict[int, str]] = {}

    def close(self) -> None:
        self.ipr.close()

    def gateways(self, peer: str) -> dict[int, str]:
        """plane -> next hop toward `peer`, from the host's own routes (not ours), learned once:
        a NIC that goes down later keeps its gateway for when it comes back."""
        if peer not in self._gateways:
            found: dict[int, str] = {}
            by_index = {i: plane for plane, i in ((p, self._index[n]) for p, n in self.nics.items())}
            for _, hops in sorted(self._host_routes(peer), key=lambda r: -r[0]):  # longest prefix first
                for oif, gw in hops:
                    if oif in by_index and by_index[oif] not in found:
                        found[by_index[oif]] = gw
            self._gateways[peer] = found
        return self._gateways[peer]

    def _host_routes(self, peer: str):
        address = ipaddress.IPv4Address(peer)
        for r in self.ipr.get_routes(family=socket.AF_INET, table=MAIN_TABLE):
            if r["proto"] == RTPROT_CLOCKFABRIC:
                continue
            dst = r.get_attr("RTA_DST") or "0.0.0.0"
            if address not in ipaddress.IPv4Network(f"{dst}/{r['dst_len']}"):
                continue
            if r.get_attr("RTA_MULTIPATH"):
                hops = [(h["oif"], h.get_attr("RTA_GATEWAY")) for h in r.get_attr("RTA_MULTIPATH")]
            else:
                hops = [(r.get_attr("RTA_OIF"), r.get_attr("RTA_GATEWAY"))]
            yield r["dst_len"], [(oif, gw) for oif, gw in hops if gw]

    def pin(self, peer: str, planes: tuple[int, ...]) -> None:
        """Send to `peer` over these planes only."""
        gws = self.gateways(peer)
        hops = [{"gateway": gws[p], "oif": self._index[self.nics[p]]} for p in planes if p in gws]
        if not hops:
            raise RouteError(f"no next hop toward {peer} on planes {planes}")
        spec = {"dst": f"{peer}/32", "proto": RTPROT_CLOCKFABRIC, "prefsrc": self.source}
        if len(hops) == 1:
            spec |= hops[0]
        else:
            spec["multipath"] = hops
        try:
            self.ipr.route("replace", **spec)
        except NetlinkError as e:
            raise RouteError(f"route to {peer} over planes {planes}: {e}") from None

    def unpin(self, peer: str) -> None:
        """Back to the host's own route (every plane)."""
        try:
            self.ipr.route("del", dst=f"{peer}/32", proto=RTPROT_CLOCKFABRIC)
        except NetlinkError as e:
            if e.code != 3:  # ESRCH: not there, which is what we wanted
                raise RouteError(f"removing the route to {peer}: {e}") from None

    def installed(self) -> dict[str, tuple[int, ...]]:
        """Our routes in the kernel now: peer -> planes it is pinned to."""
        plane_of = {self._index[n]: p for p, n in self.nics.items()}
        out = {}
        for r in self.ipr.get_routes(family=socket.AF_INET, table=MAIN_TABLE, proto=RTPROT_CLOCKFABRIC):
            if r["proto"] != RTPROT_CLOCKFABRIC or r["dst_len"] != 32:
                continue
            if r.get_attr("RTA_MULTIPATH"):
                oifs = [h["oif"] for h in r.get_attr("RTA_MULTIPATH")]
            else:
                oifs = [r.get_attr("RTA_OIF")]
            out[r.get_attr("RTA_DST")] = tuple(sorted(plane_of[o] for o in oifs if o in plane_of))
        return out
