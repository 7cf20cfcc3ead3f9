"""Link speed as an htb class on each end's egress, with a packet FIFO as the port buffer.

root 1: htb (default class 1:1) -> class 1:1 rate R ceil R -> 10: pfifo limit BUFFER
Queues therefore build, delay and drop exactly where a real switch port would.
"""

from __future__ import annotations

from pyroute2 import IPRoute

ROOT, CLASS, FIFO = 0x10000, 0x10001, 0x100000
MTU = 1500


def _class_params(rate_bps: int) -> dict:
    rate = rate_bps // 8  # bytes per second, as htb counts
    burst = max(rate // 1000, 2 * MTU)  # about 1 ms of tokens: smooth at every lab rate
    # set quantum ourselves so the kernel never warns about r2q at high or low rates
    return {"rate": rate, "ceil": rate, "burst": burst, "cburst": burst, "quantum": 4 * MTU}


def shape(ipr: IPRoute, index: int, rate_bps: int, buffer_pkts: int) -> None:
    ipr.tc("add", "htb", index, ROOT, default=CLASS & 0xFFFF)
    ipr.tc("add-class", "htb", index, CLASS, parent=ROOT, **_class_params(rate_bps))
    ipr.tc("add", "pfifo", index, FIFO, parent=CLASS, limit=buffer_pkts)


def set_rate(ipr: IPRoute, index: int, rate_bps: int) -> None:
    ipr.tc("change-class", "htb", index, CLASS, parent=ROOT, **_class_params(rate_bps))


def set_buffer(ipr: IPRoute, index: int, packets: int) -> None:
    """The port buffer's size; 0 drops everything, with the link still up."""
    ipr.tc("replace", "pfifo", index, FIFO, parent=CLASS, limit=packets)


def read_rate(ipr: IPRoute, index: int) -> int | None:
    """The rate in force on this port, in bits per second, from the kernel."""
    for cls in ipr.get_classes(index=index):
        if cls.get("handle") == CLASS and cls.get_attr("TCA_KIND") == "htb":
            parms = cls.get_nested("TCA_OPTIONS", "TCA_HTB_PARMS")
            rate64 = cls.get_nested("TCA_OPTIONS", "TCA_HTB_RATE64")
            return 8 * (rate64 or parms["rate"])
    return None
