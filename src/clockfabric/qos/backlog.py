"""The queue on a host's own egress links, read where it is: each NIC's root qdisc backlog.

A host's link to its leaf queues in the host (the qdisc, whatever made it: the kernel's default,
an operator's, the lab's link emulation), before the packet capture that times the in-band
one-way delays sees a packet leave; so that part of a path's queueing is read here instead, as
backlog bytes over the rate the queue drains at: what the qdisc sent since the last reading,
where it held a backlog at both (the link was busy throughout, so that is its rate now, a
degraded link's too), else the link's configured rate. Read only: nothing is changed on any qdisc.
"""

from __future__ import annotations

import time

from pyroute2 import IPRoute

ADDRESSES_EVERY_S = 10.0  # the NICs and the routes to peers, read again this often
ROOT = 0xFFFFFFFF


class EgressBacklog:
    def __init__(self, rates_bps: dict[str, int]):
        self.rates_bps = {nic: r for nic, r in rates_bps.items() if r}
        self.ipr = IPRoute()
        self.routes: dict[str, str] = {}  # peer address -> the NIC the kernel sends to it by
        self._index: dict[str, int] = {}
        self._read_at = -ADDRESSES_EVERY_S
        self._names: dict[int, str] = {}
        self._last: dict[str, tuple[float, int, int]] = {}  # NIC -> (read at, bytes sent, backlog)

    def _addresses(self) -> None:
        self._read_at = time.monotonic()
        names = {link["index"]: link.get_attr("IFLA_IFNAME") for link in self.ipr.get_links()}
        self._index = {name: i for i, name in names.items() if name in self.rates_bps}
        self._names = names
        self.routes = {}

    def egress(self, peer: str) -> str:
        """The NIC the kernel routes to this peer by (a host's own address may sit on lo: the
        route, not the address, says which link a flow leaves by); the peer itself where unknown."""
        if time.monotonic() - self._read_at >= ADDRESSES_EVERY_S:
            self._addresses()
        if peer not in self.routes:
            try:
                oif = self.ipr.route("get", dst=peer)[0].get_attr("RTA_OIF")
                self.routes[peer] = self._names.get(oif, peer)
            except (OSError, IndexError, ValueError):
                self.routes[peer] = peer
        return self.routes[peer]

    def queues_s(self) -> dict[str, float]:
        """Each NIC's root qdisc backlog, in seconds at the rate it drains at."""
        if time.monotonic() - self._read_at >= ADDRESSES_EVERY_S:
            self._addresses()
        out = {}
        for nic, index in self._index.items():
            for q in self.ipr.get_qdiscs(index):
                if q["index"] == index and q["parent"] == ROOT and (stats := q.get_attr("TCA_STATS2")):
                    now, sent = time.monotonic(), stats.get_attr("TCA_STATS_BASIC")["bytes"]
                    backlog = stats.get_attr("TCA_STATS_QUEUE")["backlog"]
                    out[nic] = backlog * 8 / self._drain_bps(nic, now, sent, backlog)
                    self._last[nic] = (now, sent, backlog)
        return out

    def _drain_bps(self, nic: str, now: float, sent: int, backlog: int) -> float:
        configured = self.rates_bps[nic]
        if (last := self._last.get(nic)) is None or not (backlog and last[2]) or now <= last[0] or sent < last[1]:
            return configured
        return max((sent - last[1]) * 8 / (now - last[0]), configured / 1000)  # busy, but not stopped

    def forget(self) -> None:
        """A NIC changed: read the addresses and indexes again."""
        self._read_at = -ADDRESSES_EVERY_S
        self._last.clear()

    def close(self) -> None:
        self.ipr.close()
