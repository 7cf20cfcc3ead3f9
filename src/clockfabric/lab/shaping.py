"""Link speed as an htb class on each end's egress, with a byte FIFO as the port buffer.

root 1: htb (default class 1:1) -> class 1:1 rate R ceil R -> 10: bfifo limit BUFFER x frame
Queues therefore build, delay and drop exactly where a real switch port would. A buffer is
given in full-sized frames (MTU + 14 bytes of Ethernet header) and held in bytes, as a
switch's is: a small packet (an ack) takes a small share of it, and a port at MTU 9000 holds
fewer, larger packets than one at 1500, not deeper queues. The class's burst and quantum
follow the MTU too, so jumbo frames pass as smoothly as 1500-byte ones.
"""

from __future__ import annotations

from pyroute2 import IPRoute
from pyroute2.netlink.rtnl.tcmsg import plugins, sched_pfifo

# pyroute2 knows pfifo, not bfifo; their options are one struct (tc_fifo_qopt: a limit, in
# packets or bytes). Unknown to pyroute2, a bfifo would be sent to the root, not under our class.
plugins.setdefault("bfifo", sched_pfifo)

ROOT, CLASS, FIFO = 0x10000, 0x10001, 0x100000
ETHERNET = 14  # header bytes on the wire (and in the qdisc's count) beyond the IP packet


def _class_params(rate_bps: int, mtu: int) -> dict:
    rate = rate_bps // 8  # bytes per second, as htb counts
    burst = max(rate // 1000, 2 * mtu)  # about 1 ms of tokens, two packets at least: smooth at every lab rate
    # set quantum ourselves so the kernel never warns about r2q at high or low rates
    return {"rate": rate, "ceil": rate, "burst": burst, "cburst": burst, "quantum": 4 * mtu}


def _mtu(ipr: IPRoute, index: int) -> int:
    return ipr.get_links(index)[0].get_attr("IFLA_MTU")


def buffer_bytes(buffer_pkts: int, mtu: int) -> int:
    return buffer_pkts * (mtu + ETHERNET)


def shape(ipr: IPRoute, index: int, rate_bps: int, buffer_pkts: int) -> None:
    mtu = _mtu(ipr, index)
    ipr.tc("add", "htb", index, ROOT, default=CLASS & 0xFFFF)
    ipr.tc("add-class", "htb", index, CLASS, parent=ROOT, **_class_params(rate_bps, mtu))
    ipr.tc("add", "bfifo", index, FIFO, parent=CLASS, limit=buffer_bytes(buffer_pkts, mtu))


def set_rate(ipr: IPRoute, index: int, rate_bps: int) -> None:
    ipr.tc("change-class", "htb", index, CLASS, parent=ROOT, **_class_params(rate_bps, _mtu(ipr, index)))


def set_buffer(ipr: IPRoute, index: int, packets: int) -> None:
    """The port buffer's size in full-sized frames; 0 drops everything, with the link still up."""
    ipr.tc("replace", "bfifo", index, FIFO, parent=CLASS, limit=buffer_bytes(packets, _mtu(ipr, index)))


def read_rate(ipr: IPRoute, index: int) -> int | None:
    """The rate in force on this port, in bits per second, from the kernel."""
    for cls in ipr.get_classes(index=index):
        if cls.get("handle") == CLASS and cls.get_attr("TCA_KIND") == "htb":
            parms = cls.get_nested("TCA_OPTIONS", "TCA_HTB_PARMS")
            rate64 = cls.get_nested("TCA_OPTIONS", "TCA_HTB_RATE64")
            return 8 * (rate64 or parms["rate"])
    return None
