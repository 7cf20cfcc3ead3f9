"""From the policies and the jobs' sockets on this host to the kernel, all or nothing.

Each update the service hands in the policies and the sockets of every job here (their cookies,
from the workload monitor). What they ask for (`Wanted`: the mark of each socket, the classes
to shape) is compared with what is in place; on a change a new map and program are built and
swapped onto every NIC, and the shaping remade. If the kernel refuses any step, every NIC is put
back as it was and the refusal is kept (`state()`, an event): a host applies a policy entirely
or not at all. With no policy for any job here, nothing of ours is on any NIC.
"""

from __future__ import annotations

import errno
import logging
import time
from collections.abc import Iterable
from dataclasses import dataclass, field

from pyroute2 import IPRoute
from pyroute2.netlink.exceptions import NetlinkError

from clockfabric.qos import tc
from clockfabric.qos.bpf import BpfError, MarkMap
from clockfabric.qos.policy import CLASSES, Policy

log = logging.getLogger(__name__)
DEFAULT_CLASS = "normal"  # unmarked traffic: the class every socket without a policy is in


@dataclass(frozen=True)
class Wanted:
    marks: dict[int, tuple[int, bool]]  # socket cookie -> (DSCP, override the job's own)
    weights: dict[str, int]  # QoS class -> its weight on this host's links (jobs' weights added)


def wanted(policies: Iterable[Policy], sockets: Iterable[tuple[str, int]]) -> Wanted:
    """`sockets`: (jobid, cookie) of every job socket here. Jobs without a policy are left out."""
    by_job = {p.jobid: p for p in policies}
    marks, jobs = {}, {}
    for jobid, cookie in sockets:
        if (p := by_job.get(jobid)) is not None:
            marks[cookie] = (p.dscp, p.override_dscp)
            jobs[jobid] = p
    weights: dict[str, int] = {}
    for p in jobs.values():
        weights[p.qos_class] = weights.get(p.qos_class, 0) + p.weight
    if weights:
        weights.setdefault(DEFAULT_CLASS, CLASSES[DEFAULT_CLASS].weight)
    return Wanted(marks, weights)


def shape_classes(weights: dict[str, int]) -> list[tc.ShapeClass]:
    return [tc.ShapeClass(0x10 + CLASSES[name].rank, (CLASSES[name].dscp,) if CLASSES[name].dscp else (), w,
                          CLASSES[name].rank)
            for name, w in sorted(weights.items(), key=lambda kv: CLASSES[kv[0]].rank)]


@dataclass
class Enforcer:
    devices: dict[str, int]  # the NICs to mark and shape: name -> link rate, bits/s (0: unknown)
    applied: Wanted = field(default_factory=lambda: Wanted({}, {}))
    refused: str = ""  # the kernel's last refusal, until a policy applies
    refusals: list[dict] = field(default_factory=list)  # events not yet pushed
    shaping: dict[str, str] = field(default_factory=dict)  # device -> "shaped" or why not
    stale: bool = False  # a NIC changed (replaced, moved): put everything on again at the next update
    _map: MarkMap | None = None
    _carried: dict[int, int] = field(default_factory=dict)  # packets counted by maps replaced since

    def update(self, policies: Iterable[Policy], sockets: Iterable[tuple[str, int]]) -> None:
        want = wanted(policies, sockets)
        if want == self.applied and not self.stale:
            return
        self.stale = False
        try:
            self._apply(want)
        except (OSError, NetlinkError) as e:  # a refused program, map or qdisc: nothing of it stays
            why = f"{type(e).__name__}: {e}"[:300]
            if why != self.refused:
                log.warning("the kernel refused this host's QoS (%s): the host keeps what it had", why)
                self.refusals.append({"t_ns": time.time_ns(), "kind": "qos_refused", "synced": False,
                                      "detail": {"reason": why}})
            self.refused = why
            return
        self.refused = ""

    def _apply(self, want: Wanted) -> None:
        old_map, new_map = self._map, MarkMap(want.marks) if want.marks else None
        done: list[str] = []
        with IPRoute() as ipr:
            try:
                for dev in self.devices:
                    index = _index(ipr, dev)
                    done.append(dev)
                    if new_map is not None:
                        tc.attach_marks(ipr, index, new_map.prog_fd)
                    else:
                        tc.detach_marks(ipr, index)
                    self._shape(ipr, dev, index, want.weights)
            except (OSError, NetlinkError):
                self._put_back(ipr, done, old_map)
                if new_map is not None:
                    new_map.close()
                raise
        if old_map is not None:
            self._carry(old_map)
            old_map.close()
        self._map, self.applied = new_map, want

    def _shape(self, ipr: IPRoute, dev: str, index: int, weights: dict[str, int]) -> None:
        rate = self.devices[dev]
        if not weights:
            tc.unshape(ipr, index)
            self.shaping.pop(dev, None)
        elif not rate:
            self.shaping[dev] = "not shaped: the link's rate is unknown"
        else:
            why = tc.shape(ipr, index, rate, shape_classes(weights), 0x10 + CLASSES[DEFAULT_CLASS].rank)
            self.shaping[dev] = f"not shaped: {why}" if why else "shaped"

    def _put_back(self, ipr: IPRoute, done: list[str], old_map: MarkMap | None) -> None:
        for dev in done:
            try:
                index = _index(ipr, dev)
                if old_map is not None:
                    tc.attach_marks(ipr, index, old_map.prog_fd)
                else:
                    tc.detach_marks(ipr, index)
                self._shape(ipr, dev, index, self.applied.weights)
            except (OSError, NetlinkError) as e:  # a NIC gone meanwhile: nothing to put back
                log.debug("putting back %s: %s", dev, e)

    def _carry(self, old: MarkMap) -> None:
        for cookie, n in old.packets().items():
            self._carried[cookie] = self._carried.get(cookie, 0) + n

    def marked(self) -> dict[int, int]:
        """Packets marked so far, by socket cookie, over every map this enforcer made."""
        try:
            now = self._map.packets() if self._map is not None else {}
        except BpfError:  # the map went with a change made meanwhile: its counts are carried already
            now = {}
        return {c: now.get(c, 0) + self._carried.get(c, 0) for c in set(now) | set(self._carried)}

    def remove(self) -> None:
        """Everything of ours off every NIC: marks and shaping."""
        remove_all(self.devices)
        if self._map is not None:
            self._map.close()
        self._map, self.applied = None, Wanted({}, {})
        self.shaping.clear()


def _index(ipr: IPRoute, dev: str) -> int:
    found = ipr.link_lookup(ifname=dev)
    if not found:
        raise OSError(errno.ENODEV, f"no NIC {dev} on this host")
    return found[0]


def remove_all(devices: Iterable[str]) -> list[str]:
    """Our marks and shaping off these NICs, whoever left them (an agent killed): the devices
    that had any. Only what carries our tags is touched."""
    had = []
    with IPRoute() as ipr:
        for dev in devices:
            found = ipr.link_lookup(ifname=dev)
            if not found:
                continue
            if tc.has_marks(ipr, found[0]) or tc.shaped(ipr, found[0]):
                had.append(dev)
            tc.detach_marks(ipr, found[0])
            tc.unshape(ipr, found[0])
    return had
