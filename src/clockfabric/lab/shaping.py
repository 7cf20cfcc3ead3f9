"""Link speed as an htb class on each end's egress, with byte FIFOs as the port buffer.

One FIFO (no traffic classes):
    root 1: htb (default 1:1) -> class 1:1 rate R ceil R -> 10: bfifo limit BUFFER x frame
Traffic classes (topology/classes.py), chosen by u32 filters on the IP header's DSCP bits:
    root 1: htb (default 1:30) -> class 1:1 rate R ceil R
        -> 1:10 priority     prio 0, rate = ceil = its cap     -> 11: bfifo
        -> 1:20 collective   prio 1, rate its share, ceil R    -> 21: bfifo
        -> 1:30 best-effort  prio 2, rate the rest, ceil R     -> 31: bfifo
htb serves a class under its own rate before any that borrows, and among those the lowest prio
first: a probe in the capped priority class leaves behind at most the one packet on the wire,
however deep the bulk queue, and the class can never take more than its cap.

Queues therefore build, delay and drop exactly where a real switch port would. A buffer is
given in full-sized frames (MTU + 14 bytes of Ethernet header) and held in bytes, as a
switch's is: a small packet (an ack) takes a small share of it, and a port at MTU 9000 holds
fewer, larger packets than one at 1500, not deeper queues. Each class has the port's whole
buffer (a shared-buffer switch lets one queue take most of it). The class's burst and quantum
follow the MTU too, so jumbo frames pass as smoothly as 1500-byte ones.
"""

from __future__ import annotations

from dataclasses import dataclass, field

from pyroute2 import IPRoute
from pyroute2.netlink.rtnl.tcmsg import plugins, sched_pfifo

from clockfabric.topology import TrafficClasses

# pyroute2 knows pfifo, not bfifo; their options are one struct (tc_fifo_qopt: a limit, in
# packets or bytes). Unknown to pyroute2, a bfifo would be sent to the root, not under our class.
plugins.setdefault("bfifo", sched_pfifo)

ROOT, CLASS, FIFO = 0x10000, 0x10001, 0x100000
LEAVES = {"priority": 0x10010, "collective": 0x10020, "best-effort": 0x10030}  # class name -> htb classid
ETHERNET = 14  # header bytes on the wire (and in the qdisc's count) beyond the IP packet
ETH_P_IP = 0x0800
DSCP_MASK = 0x00FC0000  # the DSCP bits of the IP header's first word (version, IHL, TOS, length)


@dataclass(frozen=True)
class TcOp:
    """One call of IPRoute.tc: what `tc qdisc|class|filter add` would say."""

    command: str
    kind: str
    handle: int
    params: dict = field(default_factory=dict)


def _class_params(rate_bps: int, mtu: int, ceil_bps: int | None = None, prio: int = 0) -> dict:
    rate, ceil = rate_bps // 8, (ceil_bps or rate_bps) // 8  # bytes per second, as htb counts
    burst = max(ceil // 1000, 2 * mtu)  # about 1 ms of tokens, two packets at least: smooth at every lab rate
    # set quantum ourselves so the kernel never warns about r2q at high or low rates
    return {"rate": rate, "ceil": ceil, "burst": burst, "cburst": burst, "quantum": 4 * mtu, "prio": prio}


def _fifo(leaf: int) -> int:
    """A leaf class's FIFO handle: 1:10 -> 11:."""
    return ((leaf & 0xFFFF) + 1) << 16


def dscp_key(dscp: int) -> str:
    """A u32 match on the DSCP bits at the IP header's start, as pyroute2 writes keys."""
    return f"0x{dscp << 18:08x}/0x{DSCP_MASK:08x}+0"


def buffer_bytes(buffer_pkts: int, mtu: int) -> int:
    return buffer_pkts * (mtu + ETHERNET)


def _leaf_classes(rate_bps: int, mtu: int, classes: TrafficClasses, command: str) -> list[TcOp]:
    ops = []
    for c in classes.classes():
        share = round(rate_bps * c.percent / 100)
        ceil = share if c.name == "priority" else rate_bps  # the cap: priority never starves the rest
        ops.append(TcOp(command, "htb", LEAVES[c.name], {"parent": CLASS, **_class_params(share, mtu, ceil, c.prio)}))
    return ops


def plan(rate_bps: int, buffer_pkts: int, mtu: int, classes: TrafficClasses | None = None) -> list[TcOp]:
    """Every qdisc, class and filter of one port's egress, in the order the kernel needs them."""
    limit = buffer_bytes(buffer_pkts, mtu)
    default = LEAVES["best-effort"] if classes else CLASS
    ops = [TcOp("add", "htb", ROOT, {"default": default & 0xFFFF}),
           TcOp("add-class", "htb", CLASS, {"parent": ROOT, **_class_params(rate_bps, mtu)})]
    if classes is None:
        return [*ops, TcOp("add", "bfifo", FIFO, {"parent": CLASS, "limit": limit})]
    ops += _leaf_classes(rate_bps, mtu, classes, "add-class")
    ops += [TcOp("add", "bfifo", _fifo(leaf), {"parent": leaf, "limit": limit}) for leaf in LEAVES.values()]
    for c in classes.classes():
        ops += [TcOp("add-filter", "u32", 0, {"parent": ROOT, "prio": 1, "protocol": ETH_P_IP,
                                              "target": LEAVES[c.name], "keys": [dscp_key(d)]}) for d in c.dscp]
    return ops


def _apply(ipr: IPRoute, index: int, ops: list[TcOp]) -> None:
    for op in ops:
        if op.kind == "u32":
            ipr.tc(op.command, op.kind, index, **op.params)
        else:
            ipr.tc(op.command, op.kind, index, op.handle, **op.params)


def _mtu(ipr: IPRoute, index: int) -> int:
    return ipr.get_links(index)[0].get_attr("IFLA_MTU")


def shape(ipr: IPRoute, index: int, rate_bps: int, buffer_pkts: int, classes: TrafficClasses | None = None) -> None:
    _apply(ipr, index, plan(rate_bps, buffer_pkts, _mtu(ipr, index), classes))


def set_rate(ipr: IPRoute, index: int, rate_bps: int, classes: TrafficClasses | None = None) -> None:
    mtu = _mtu(ipr, index)
    ops = [TcOp("change-class", "htb", CLASS, {"parent": ROOT, **_class_params(rate_bps, mtu)})]
    _apply(ipr, index, ops + (_leaf_classes(rate_bps, mtu, classes, "change-class") if classes else []))


def set_buffer(ipr: IPRoute, index: int, packets: int, classes: TrafficClasses | None = None) -> None:
    """The port buffer's size in full-sized frames; 0 drops everything, with the link still up."""
    limit = buffer_bytes(packets, _mtu(ipr, index))
    fifos = [(_fifo(leaf), leaf) for leaf in LEAVES.values()] if classes else [(FIFO, CLASS)]
    _apply(ipr, index, [TcOp("replace", "bfifo", fifo, {"parent": parent, "limit": limit}) for fifo, parent in fifos])


def read_rate(ipr: IPRoute, index: int) -> int | None:
    """The rate in force on this port, in bits per second, from the kernel."""
    for cls in ipr.get_classes(index=index):
        if cls.get("handle") == CLASS and cls.get_attr("TCA_KIND") == "htb":
            parms = cls.get_nested("TCA_OPTIONS", "TCA_HTB_PARMS")
            rate64 = cls.get_nested("TCA_OPTIONS", "TCA_HTB_RATE64")
            return 8 * (rate64 or parms["rate"])
    return None


def read_classes(ipr: IPRoute, index: int) -> list[str]:
    """The traffic classes this port has in the kernel, by name; [] for one FIFO."""
    names = {handle: name for name, handle in LEAVES.items()}
    found = {cls.get("handle") for cls in ipr.get_classes(index=index) if cls.get_attr("TCA_KIND") == "htb"}
    return [name for handle, name in names.items() if handle in found]
