"""What the QoS service puts on a host's NICs, found and removed by its tags alone, so nothing
another tool made is ever touched:

- marks: the marking program (qos.bpf) as a cls_bpf filter on the NIC's clsact egress, at
  preference MARK_PREF, named MARK_NAME. A clsact the service finds is shared, not taken: on
  removal it goes only when no filter at all is left on it (an empty clsact does nothing).
- shaping: an htb root with handle SHAPE_HANDLE, made only where the root qdisc is the kernel's
  default (handle 0:): a class per QoS class, rate its weight's share of the link, ceil the whole
  link (so a class borrows what the others leave: work-conserving), chosen by u32 on the DSCP.
  Its htb prio is the class's rank, so what a class leaves is lent to the higher classes first:
  a busy scavenger keeps its guaranteed share and no more while a critical job wants the rest
  (with one prio, htb would split the spare between them by quantum).
  A root qdisc someone else made (the lab's link emulation, an operator's) is left alone and the
  link is reported unshaped, with the reason.
"""

from __future__ import annotations

from dataclasses import dataclass

from pyroute2 import IPRoute
from pyroute2.netlink.exceptions import NetlinkError

MARK_PREF, MARK_NAME = 65100, "clockfabric_qos"
CLSACT, EGRESS = 0xFFFF0000, 0xFFFFFFF3
SHAPE_HANDLE = 0xCF510000  # cf51:
SHAPE_ROOT_CLASS = SHAPE_HANDLE | 1
ETH_P_IP, DSCP_MASK = 0x0800, 0x00FC0000


def _qdiscs(ipr: IPRoute, index: int) -> list:
    return [q for q in ipr.get_qdiscs(index) if q["index"] == index]


def _egress_filters(ipr: IPRoute, index: int, parent: int = EGRESS) -> list:
    try:
        return list(ipr.get_filters(index, parent=parent))
    except NetlinkError:
        return []


def _is_mark(f) -> bool:
    return f.get_attr("TCA_KIND") == "bpf" and (f["info"] >> 16) == MARK_PREF


def has_marks(ipr: IPRoute, index: int) -> bool:
    return any(_is_mark(f) for f in _egress_filters(ipr, index))


def attach_marks(ipr: IPRoute, index: int, prog_fd: int) -> None:
    """The marking program on the NIC's egress, replacing ours if there (one atomic swap)."""
    if not any(q.get_attr("TCA_KIND") == "clsact" for q in _qdiscs(ipr, index)):
        ipr.tc("add", "clsact", index)
    ipr.tc("replace-filter", "bpf", index, 1, fd=prog_fd, name=MARK_NAME, parent=EGRESS, prio=MARK_PREF,
           direct_action=True)


def detach_marks(ipr: IPRoute, index: int) -> None:
    """Our marking filter off the NIC; the clsact too where nothing else is left on it."""
    if has_marks(ipr, index):
        ipr.tc("del-filter", "bpf", index, 1, parent=EGRESS, prio=MARK_PREF)
    clsact = any(q.get_attr("TCA_KIND") == "clsact" for q in _qdiscs(ipr, index))
    if clsact and not _egress_filters(ipr, index) and not _egress_filters(ipr, index, 0xFFFFFFF2):
        ipr.tc("del", "clsact", index)


def root_qdisc(ipr: IPRoute, index: int):
    return next((q for q in _qdiscs(ipr, index) if q["parent"] == 0xFFFFFFFF), None)


def shaped(ipr: IPRoute, index: int) -> bool:
    root = root_qdisc(ipr, index)
    return root is not None and root["handle"] == SHAPE_HANDLE


@dataclass(frozen=True)
class ShapeClass:
    minor: int  # the htb class cf51:<minor>
    dscp: tuple[int, ...]  # the DSCP values it takes; () for the default class
    weight: int
    prio: int = 0  # htb's: the spare goes to the lowest first (the QoS class's rank)


def shape_params(rate_bps: int, share_bps: int, mtu: int, prio: int = 0) -> dict:
    burst = max(rate_bps // 8 // 1000, 2 * mtu)  # about 1 ms of tokens at the link rate
    return {"rate": max(share_bps, 8 * mtu) // 8, "ceil": rate_bps // 8, "burst": burst, "cburst": burst,
            "quantum": 4 * mtu, "prio": prio}


def shape(ipr: IPRoute, index: int, rate_bps: int, classes: list[ShapeClass], default_minor: int) -> str:
    """Our htb on the NIC's egress: "" when made, else why not (a root qdisc not ours). All or
    nothing: a refused step removes what the earlier ones made, and raises."""
    root = root_qdisc(ipr, index)
    if root is not None and root["handle"] not in (0, SHAPE_HANDLE):
        return f"a root qdisc {root.get_attr('TCA_KIND')} {root['handle'] >> 16:x}: that clockfabric did not make"
    mtu = ipr.get_links(index)[0].get_attr("IFLA_MTU")
    total = sum(c.weight for c in classes) or 1
    if root is not None and root["handle"] == SHAPE_HANDLE:
        ipr.tc("del", "htb", index, SHAPE_HANDLE)
    try:
        ipr.tc("add", "htb", index, SHAPE_HANDLE, default=default_minor)
        ipr.tc("add-class", "htb", index, SHAPE_ROOT_CLASS, parent=SHAPE_HANDLE,
               **shape_params(rate_bps, rate_bps, mtu))
        for c in classes:
            ipr.tc("add-class", "htb", index, SHAPE_HANDLE | c.minor, parent=SHAPE_ROOT_CLASS,
                   **shape_params(rate_bps, rate_bps * c.weight // total, mtu, c.prio))
            for d in c.dscp:
                ipr.tc("add-filter", "u32", index, parent=SHAPE_HANDLE, prio=1, protocol=ETH_P_IP,
                       target=SHAPE_HANDLE | c.minor, keys=[f"0x{d << 18:08x}/0x{DSCP_MASK:08x}+0"])
    except NetlinkError:
        unshape(ipr, index)
        raise
    return ""


def unshape(ipr: IPRoute, index: int) -> None:
    """Our htb off the NIC (the kernel's default root comes back); any other root stays."""
    if shaped(ipr, index):
        ipr.tc("del", "htb", index, SHAPE_HANDLE)
