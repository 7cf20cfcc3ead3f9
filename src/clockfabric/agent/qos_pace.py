"""The QoS service's pacing: the workload's readings and the NICs' queues in, qos.pace_loop's rates
onto the jobs' own sockets (qos.sockpace) out, every PERIOD_S. On one FIFO per port it is all
the fabric does for a higher class; where the switches sort packets into classes it holds a
lower class under the share they guarantee it while the higher class queues.

Host-local: a flow crosses two directed links the host can name, its NIC's egress and the last
hop into its peer. The first's queue is read from the NIC's qdisc backlog each period
(qos.backlog; the higher class's own class queue where the NIC has classes); the second's is the
higher class's in-band one-way delay (the workload's window, synced clocks) above the lowest
this host has seen to that peer, new once a window, so that link is stepped with the window as
its period. What it paced goes to a state file first, so an agent killed while pacing releases
those sockets at its next start.

Between the workload's updates, each period, the sockets a lower-class job opened since the last
one join the loop (`join`): a scavenger starting beside a critical job is paced from the period
after its connect, not from the update after it (up to a second on); until the update lists
them they count as idle flows, which the links' limits split over with the others.

Across hosts: the readings of the last hops into peers that its higher class sees queueing on
(while they show a queue, and SHARE_HOLD readings more), and its lower-class flows' weights on
links it paces against another host's reading, are what it tells the other hosts that want them
(qos.shared); what they tell comes into the loop as their readings. It wants the readings of the
last hops its lower-class flows cross.
"""

from __future__ import annotations

import json
from dataclasses import replace
from pathlib import Path

from clockfabric.qos import sockpace
from clockfabric.qos.backlog import EgressBacklog
from clockfabric.qos.pace_loop import RANK, Flow, PaceLoop, SocketId
from clockfabric.qos.pacing import Gains
from clockfabric.qos.policy import CLASSES, Policy
from clockfabric.qos.shared import REPEAT_S, Reading, Shared
from clockfabric.workload.flows import flow_label
from clockfabric.workload.monitor import JobFlow
from clockfabric.workload.owd import INBAND
from clockfabric.workload.samples import FlowOwd

PERIOD_S = Gains().period_s
SHARE_HOLD = 3  # readings at or under target still told after the last over it: they let the others' law rise
CLASS_OF = {rank: name for name, rank in RANK.items()}


class HostPacer:
    def __init__(self, rates_bps: dict[str, int], state_file: Path, window_s: float):
        self.state_file = state_file
        self.backlog = EgressBacklog(rates_bps)
        self.capacity = min(r for r in rates_bps.values() if r)  # a peer's last hop: the host's own speed
        self.local, self.remote = Gains(), Gains(period_s=max(window_s, PERIOD_S))
        self.loop = PaceLoop(self._link, self._actuate)
        self.floor_ns: dict[str, int] = {}  # peer address -> the lowest one-way delay seen to it
        self.last_owd: FlowOwd | None = None
        self.problem = ""  # the kernel's last refusal, for the state
        self.ever_paced: set[SocketId] = set()  # for the state: what the loop has held since start
        self.limited_s = 0.0  # and how long any limit was in force
        self.fds: dict[SocketId, int] = {}  # each paced socket's descriptor number in its process
        self.own: dict[str, tuple[float, int, int]] = {}  # last hop -> its last queue reading, read time, hold
        self._told: tuple[list, int] = ([], 0)  # what was last told, and when
        self.saying: list[Reading] = []  # what the last period had to tell, new or not
        self.wants: frozenset[str] = frozenset()  # the last hops its lower-class flows cross
        self.joined: dict[SocketId, tuple[str, str]] = {}  # sockets found between updates: (job id, peer)
        self.not_flows: set[int] = set()  # sockets found that will carry no flow: not looked at again
        self.joined_ever = 0  # for the state: sockets paced before an update listed them
        self.inputs: tuple[list[JobFlow], FlowOwd, list[Policy]] | None = None  # those of the last step

    def _link(self, link: str) -> tuple[float, Gains]:
        if link.endswith(">"):  # a NIC's egress
            return self.backlog.rates_bps.get(link[:-1], self.capacity), self.local
        return self.capacity, self.remote

    def links_to(self, peer: str) -> tuple[str, ...]:
        return (f"{self.backlog.egress(peer)}>", f">{peer}")

    def join(self, opened: list[tuple[str, int, int, int]]) -> None:
        """The sockets of lower-class jobs that the workload's last update did not list (its
        monitor's `opened`): each one's peer, read once it is connected. Those the update lists
        now leave, as do those gone."""
        joined, present = {}, set()
        for jobid, pid, inode, fd in opened:
            sock = (pid, inode)
            present.add(inode)
            if sock in self.joined:
                joined[sock] = self.joined[sock]
                continue
            if inode in self.not_flows:
                continue
            try:
                peer = sockpace.tcp_peer(pid, inode, fd)
            except sockpace.NeverAFlow:
                self.not_flows.add(inode)
                continue
            except (LookupError, OSError):
                continue
            if peer is not None:
                joined[sock] = (jobid, peer)
                self.joined_ever += 1
        self.joined = joined
        self.not_flows &= present

    def _actuate(self, sock: SocketId, bytes_per_s: int | None) -> None:
        rate = sockpace.UNLIMITED if bytes_per_s is None else bytes_per_s
        try:
            self.fds[sock] = sockpace.set_max_rate(*sock, rate, self.fds.get(sock))
            if bytes_per_s is None:
                del self.fds[sock]
        except LookupError:
            self.fds.pop(sock, None)
            raise
        except OSError as e:
            self.problem = f"cannot pace socket {sock[1]} of process {sock[0]}: {e}"
            raise LookupError(self.problem) from None  # not paced: tried again next period

    def _queue_s(self, f: JobFlow, owd: FlowOwd, fresh: bool) -> float | None:
        stats = owd.get(flow_label(f.rates.key), {}).get("out")
        if not fresh or stats is None or stats.source != INBAND:
            return None
        peer = f.rates.key.remote
        floor = self.floor_ns[peer] = min(self.floor_ns.get(peer, stats.min_ns), stats.min_ns)
        return max(0, stats.p50_ns - floor) / 1e9

    def step(self, flows: list[JobFlow], owd: FlowOwd, policies: list[Policy],
             shared: dict[str, Shared] | None = None) -> dict[SocketId, int]:
        """One period: the jobs' flows and their last window of delays, the policies in force, the
        other hosts' readings."""
        if self._nothing_to_pace(flows, owd, policies):
            self.wants = frozenset()
            return {}
        self.inputs = (flows, owd, policies)
        fresh, self.last_owd = owd is not self.last_owd, owd  # a new window is a new dict
        by_job = {p.jobid: p for p in policies}
        readings = [Flow((f.pid, f.rates.reading.inode), p.qos_class, p.weight, self.links_to(f.rates.key.remote),
                         f.rates.tx_bps or 0.0, self._queue_s(f, owd, fresh), f.rates.wanting or 0.0)
                    for f in flows if (p := by_job.get(f.jobid)) is not None]
        listed = {f.rates.reading.inode for f in flows}
        readings += [Flow(sock, p.qos_class, p.weight, self.links_to(peer), 0.0, None)
                     for sock, (jobid, peer) in self.joined.items()
                     if sock[1] not in listed and (p := by_job.get(jobid)) is not None]
        best = min((p.rank for p in policies), default=0)
        self.wants = frozenset(f.links[1] for f in readings if RANK[f.qos_class] > best)
        if not readings and not self.loop.paced:
            self.loop.views = {}
            return {}  # no job with a policy here: not even the qdiscs are read
        before = set(self.loop.paced)
        paced = self.loop.step(readings, self._nic_queues(readings), shared)
        self.ever_paced |= set(paced)
        self.limited_s += PERIOD_S if paced else 0.0
        if set(paced) != before:  # the file names the sockets to release, not their rates
            self._remember()
        return paced

    def _nothing_to_pace(self, flows: list[JobFlow], owd: FlowOwd, policies: list[Policy]) -> bool:
        """True where no flow here is below the best class in force, no socket was found between
        updates (only lower classes' are looked for) and none is paced, and the workload's flows,
        their window and the policies are those of the last step: then the loop would pace nothing
        and see nothing new (what it tells, its views, changes only with those), so it is not
        stepped; its last step's queue readings stop being new, as in a step without a new window."""
        if self.joined or self.loop.paced or not policies:
            return False
        if self.inputs is None or any(a is not b for a, b in zip(self.inputs, (flows, owd, policies), strict=True)):
            return False
        best, ranks = min(p.rank for p in policies), {p.jobid: p.rank for p in policies}
        if any(ranks.get(f.jobid, best) > best for f in flows):
            return False
        if any(v.queue_s is not None for v in self.loop.views.values()):
            self.loop.views = {link: replace(v, queue_s=None) for link, v in self.loop.views.items()}
        return True

    def _nic_queues(self, flows: list[Flow]) -> dict[str, float]:
        """The egress queue of each NIC a lower-class flow leaves by (only this host's flows cross
        it: with none of them lower, nothing there is paced or told, and the qdiscs are not read),
        as the higher class there meets it: where the root qdisc sorts packets into classes by
        DSCP, that class's own queue (a lower class's backlog there delays only itself), else the
        whole backlog."""
        top: dict[str, str] = {}  # NIC egress -> the best class with a flow across it
        for f in flows:
            if f.links[0] not in top or RANK[f.qos_class] < RANK[top[f.links[0]]]:
                top[f.links[0]] = f.qos_class
        lower = {f.links[0] for f in flows if RANK[f.qos_class] > RANK[top[f.links[0]]]}
        if not lower:
            return {}
        whole, by_dscp = self.backlog.read()
        out = {}
        for nic, queue_s in whole.items():
            if (link := f"{nic}>") in lower:
                out[link] = by_dscp.get(nic, {}).get(CLASSES[top[link]].dscp, queue_s)
        return out

    def tell(self, now_ns: int) -> list[Reading]:
        """What the other hosts should hear after this period: the last hops this host's higher
        class sees queueing on, and its lower-class weights where it paces (qos.shared); nothing
        when that is what was told less than REPEAT_S ago (`saying` holds it all the same)."""
        out, max_age_ns = [], 2 * self.remote.period_s * 1e9  # a reading two windows old is no news
        for link, v in self.loop.views.items():
            if not link.startswith(">"):  # a NIC's egress: only this host's flows cross it
                continue
            if v.queue_s is not None:
                hold = SHARE_HOLD + 1 if v.queue_s > self.remote.target_s else self.own.get(link, (0, 0, 0))[2] - 1
                self.own[link] = (v.queue_s, now_ns, hold)
            queue_s, read_ns, hold = self.own.get(link, (0.0, 0, 0))
            if hold > 0 and v.high_bps > 0 and now_ns - read_ns <= max_age_ns:
                out.append(Reading(link, CLASS_OF[v.rank], queue_s, v.high_bps, v.low_weight, read_ns))
            elif link in self.loop.limits and v.low_weight > 0:
                out.append(Reading(link, CLASS_OF[v.rank], None, 0.0, v.low_weight, now_ns))
        for link in set(self.own) - set(self.loop.views):
            del self.own[link]
        said = [(r.link, r.qos_class, r.queue_s, round(r.high_bps, -5), r.low_weight, r.queue_s is None or r.read_ns)
                for r in out]
        self.saying = out
        if said == self._told[0] and now_ns - self._told[1] < REPEAT_S * 1e9:
            return []
        self._told = (said, now_ns)
        return out

    def _remember(self) -> None:
        tmp = self.state_file.with_suffix(".tmp")
        tmp.write_text(json.dumps(sorted(self.loop.paced)))
        tmp.replace(self.state_file)

    def release(self) -> None:
        self.loop.release()
        self.state_file.unlink(missing_ok=True)
        self.backlog.close()


def release_left(state_file: Path) -> int:
    """Sockets an earlier agent paced back to no limit; how many were still open."""
    try:
        left = json.loads(state_file.read_text())
    except FileNotFoundError:
        return 0
    except ValueError:
        left = []
    released = 0
    for pid, inode in left:
        try:
            sockpace.set_max_rate(int(pid), int(inode), sockpace.UNLIMITED)
            released += 1
        except (LookupError, OSError):
            continue
    state_file.unlink(missing_ok=True)
    return released
