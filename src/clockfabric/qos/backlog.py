"""The queue on a host's own egress links, read where it is: each NIC's root qdisc backlog.

A host's link to its leaf queues in the host (the qdisc, whatever made it: the kernel's default,
an operator's, the lab's link emulation), before the packet capture that times the in-band
one-way delays sees a packet leave; so that part of a path's queueing is read here instead, as
backlog bytes over the rate the queue drains at: what the qdisc sent since the last reading,
where it held a backlog at both (the link was busy throughout, so that is its rate now, a
degraded link's too), else the link's configured rate. Read only: nothing is changed on any qdisc.

Where the root qdisc sorts packets into classes by their DSCP (u32 filters on the IP header's
DSCP bits, as a host with traffic classes is set up), a packet waits in its own class's queue,
which drains at the rate the class gets, not behind the whole backlog: each such class's queue
is read the same way, from the qdisc under the class, as what a packet of that DSCP waits
(`read`). A class with a backlog drains at no less than the rate htb guarantees it:
two readings that each catch a burst (a probe round leaves in one) say nothing of the time
between them, so the sent bytes between them are no drain rate below that.

One reading is one instant: read on a fixed beat, it can fall in step with a paced sender's
bursts and see that sender's own packets waiting every time. `QueueSampler` reads at random
instants instead (a Poisson process, whose readings see the time average whatever the traffic's
rhythm) and sums each update up as every queue's median: what a packet sent at a random moment
waited, as the in-band delays' median beside it is a random packet's.
"""

from __future__ import annotations

import random
import statistics
import struct
import time

from pyroute2 import IPRoute

from clockfabric.qos.qdisc_stats import QdiscReader, QdiscStat

ADDRESSES_EVERY_S = 10.0  # the NICs and the routes to peers, read again this often
READS_PER_S = 5.0  # QueueSampler's readings a second, on average
# ... and while the NICs send less than one busy flow and no reading held a queue: a queue needs
# traffic to build, and any traffic or any backlog read brings the full rate back at the next update
IDLE_READS_PER_S = 1.0
ROOT = 0xFFFFFFFF
TOS_BYTE, DSCP_BITS = 1, 0xFC  # the IP header's second byte, and its DSCP part
_SEL = struct.Struct("=BBBxHhhhI")  # struct tc_u32_sel, before its keys
_KEY_VALUE, _KEY_AT = struct.Struct(">II"), struct.Struct("=ii")  # tc_u32_key: mask, val (network order); off


def u32_dscp(raw: bytes) -> int | None:
    """The DSCP a u32 selector (TCA_U32_SEL, as the kernel stores it) matches, where that is all it
    matches: one key, on the TOS byte's DSCP bits alone. pyroute2 decodes the keys out of place,
    so the attribute's bytes are read here."""
    if len(raw) < _SEL.size:
        return None
    _flags, _offshift, nkeys, offmask, _off, _offoff, _hoff, hmask = _SEL.unpack_from(raw)
    if nkeys != 1 or len(raw) < _SEL.size + 16 or offmask or hmask:
        return None
    mask, value = _KEY_VALUE.unpack_from(raw, _SEL.size)
    at, key_offmask = _KEY_AT.unpack_from(raw, _SEL.size + 8)
    shift = 8 * (3 - (TOS_BYTE - at))  # where the TOS byte sits in the 32-bit word read at `at`
    if key_offmask or not 0 <= TOS_BYTE - at <= 3 or mask != DSCP_BITS << shift:
        return None
    return ((value >> shift) & DSCP_BITS) >> 2


def _raw(nla) -> bytes:
    return bytes(nla.data[nla.offset + 4: nla.offset + nla.length])  # past the attribute's own header


class EgressBacklog:
    def __init__(self, rates_bps: dict[str, int]):
        self.rates_bps = {nic: r for nic, r in rates_bps.items() if r}
        self.ipr = IPRoute()  # the NICs, routes, filters and classes: read every ADDRESSES_EVERY_S
        self.qdiscs = QdiscReader()  # the qdiscs' counters: read each time
        self.routes: dict[str, str] = {}  # peer address -> the NIC the kernel sends to it by
        self._index: dict[str, int] = {}
        self._read_at = -ADDRESSES_EVERY_S
        self._names: dict[int, str] = {}
        # (NIC, the qdisc's parent) -> (read at, bytes sent, backlog)
        self._last: dict[tuple[str, int], tuple[float, int, int]] = {}
        self._classes: dict[str, dict[int, int]] = {}  # NIC -> DSCP -> its class, read again with the addresses
        self._guaranteed: dict[str, dict[int, int]] = {}  # NIC -> class -> the rate htb guarantees it, bits/s

    def _addresses(self) -> None:
        self._read_at = time.monotonic()
        names = {link["index"]: link.get_attr("IFLA_IFNAME") for link in self.ipr.get_links()}
        self._index = {name: i for i, name in names.items() if name in self.rates_bps}
        self._names = names
        self.routes = {}
        self._classes = {}
        self._guaranteed = {}

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

    def read(self) -> tuple[dict[str, float], dict[str, dict[int, float]]]:
        """One dump of each NIC's qdiscs: its whole queue, in seconds at the rate it drains at, and
        per NIC whose root qdisc sorts packets into classes by DSCP, what a packet of each DSCP a
        filter names waits, its class's backlog in seconds at the rate that class drains at. The
        filters are read again with the addresses, not each time."""
        if time.monotonic() - self._read_at >= ADDRESSES_EVERY_S:
            self._addresses()
        whole: dict[str, float] = {}
        by_dscp: dict[str, dict[int, float]] = {}
        stats = self.qdiscs.read()
        for nic, index in self._index.items():
            qdiscs = [q for q in stats if q.ifindex == index]
            root = next((q for q in qdiscs if q.parent == ROOT), None)
            if root is None:
                continue
            whole[nic] = self._wait(nic, root)
            if nic not in self._classes:
                self._classes[nic] = self._dscp_classes(index, root.handle)
                self._guaranteed[nic] = self._class_rates(index) if self._classes[nic] else {}
            under = {q.parent: q for q in qdiscs}
            # each class's qdisc read once, however many DSCPs its filters send to it
            classes = {classid: self._wait(nic, under[classid], self._guaranteed[nic].get(classid, 0))
                       for classid in set(self._classes[nic].values()) if classid in under}
            waits = {dscp: wait for dscp, classid in self._classes[nic].items()
                     if (wait := classes.get(classid)) is not None}
            if waits:
                by_dscp[nic] = waits
        return whole, by_dscp

    def _dscp_classes(self, index: int, root: int) -> dict[int, int]:
        """DSCP -> the class a u32 filter on the root qdisc sends it to."""
        found: dict[int, int] = {}
        try:
            filters = list(self.ipr.get_filters(index, parent=root))
        except OSError:
            return found
        for f in filters:
            if f.get_attr("TCA_KIND") != "u32" or (opts := f.get_attr("TCA_OPTIONS")) is None:
                continue
            classid, sel = opts.get_attr("TCA_U32_CLASSID"), opts.get_attr("TCA_U32_SEL")
            if classid and sel is not None and (dscp := u32_dscp(_raw(sel))) is not None:
                found.setdefault(dscp, int(classid))  # the first filter to match wins, as in the kernel
        return found

    def _class_rates(self, index: int) -> dict[int, int]:
        """Each htb class's guaranteed rate in bits per second."""
        found: dict[int, int] = {}
        try:
            classes = list(self.ipr.get_classes(index=index))
        except OSError:
            return found
        for cls in classes:
            if cls.get_attr("TCA_KIND") == "htb" and (parms := cls.get_nested("TCA_OPTIONS", "TCA_HTB_PARMS")):
                found[int(cls["handle"])] = 8 * (cls.get_nested("TCA_OPTIONS", "TCA_HTB_RATE64") or parms["rate"])
        return found

    def _wait(self, nic: str, q: QdiscStat, guaranteed_bps: int = 0) -> float:
        now, sent, backlog = time.monotonic(), q.sent_bytes, q.backlog_bytes
        key = (nic, q.parent)
        drain = self._drain_bps(self._last.get(key), self.rates_bps[nic], now, sent, backlog)
        wait = backlog * 8 / max(drain, guaranteed_bps)
        self._last[key] = (now, sent, backlog)
        return wait

    @staticmethod
    def _drain_bps(last: tuple[float, int, int] | None, configured: int, now: float, sent: int, backlog: int) -> float:
        if last is None or not (backlog and last[2]) or now <= last[0] or sent < last[1]:
            return configured
        return max((sent - last[1]) * 8 / (now - last[0]), configured / 1000)  # busy, but not stopped

    def forget(self) -> None:
        """A NIC changed: read the addresses and indexes again."""
        self._read_at = -ADDRESSES_EVERY_S
        self._last.clear()

    def close(self) -> None:
        self.ipr.close()
        self.qdiscs.close()


Waits = tuple[dict[str, float], dict[str, dict[int, float]]]  # EgressBacklog.read's: whole queues, by DSCP


class QueueSampler:
    """`EgressBacklog.read` at random instants, `reads_per_s` on average (`idle_reads_per_s` while
    the NICs are idle and their queues empty), summed up by `take`."""

    def __init__(self, backlog: EgressBacklog, reads_per_s: float = READS_PER_S,
                 idle_reads_per_s: float = IDLE_READS_PER_S, rng: random.Random | None = None):
        self.backlog, self.reads_per_s, self.idle_reads_per_s = backlog, reads_per_s, idle_reads_per_s
        self.rate = reads_per_s  # the readings a second asked for now
        self.rng = rng or random.Random()
        self.reads: list[Waits] = []
        self.next_s = 0.0  # the first poll reads at once
        self.polled_s = 0.0

    def poll(self, now_s: float) -> float:
        """Read if a reading is due; returns when the next one is (time.monotonic())."""
        self.polled_s = now_s
        if now_s >= self.next_s:
            self.next_s = now_s + self.rng.expovariate(self.rate)
            self.reads.append(self.backlog.read())
        return self.next_s

    def take(self, idle: bool = False) -> Waits:
        """Each queue's median over the readings since the last take (one read now if none).
        `idle`: the NICs sent less than one busy flow since the last take; then, where no reading
        held a queue either, the next readings come at the idle rate."""
        reads, self.reads = self.reads or [self.backlog.read()], []
        rate = self.idle_reads_per_s if idle and not any(any(w.values()) for w, _ in reads) else self.reads_per_s
        if rate != self.rate:  # the next reading drawn afresh at the new rate (a Poisson process forgets)
            self.rate = rate
            self.next_s = self.polled_s + self.rng.expovariate(rate)
        whole = medians([w for w, _ in reads])
        nics = sorted({nic for _, by in reads for nic in by})
        return whole, {nic: medians([by[nic] for _, by in reads if nic in by]) for nic in nics}


def medians(reads: list[dict]) -> dict:
    """Each key's median over the readings that hold it."""
    keys = sorted({k for r in reads for k in r})
    return {k: statistics.median(r[k] for r in reads if k in r) for k in keys}
