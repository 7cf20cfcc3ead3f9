"""Each update: the host's processes into jobs, its sockets into those jobs' flows, with rates.

Where a process lives decides what we can see of it. The agent runs in the host's network
namespace, and sock_diag answers for that namespace only:
  - a process in our network namespace: its job, and its flows;
  - one in a network namespace *and* a PID namespace of its own (a container): its job, marked
    `visible=False`: its flows are not read from here (the job says how many such processes);
  - one in another network namespace but our PID namespace is what `ip netns exec` makes: on
    a lab, another host's processes. Not this host's: skipped.

Cost: a process's job variables are read once (a young one again for a few seconds, as it may
still exec with a new environment; one that cannot be read, a kernel thread, not again); /proc
is listed only when the kernel's last pid moved further than the pids since can be looked at one
by one, and every LIST_EVERY_S (which lets go of the exited processes of no job); the job
processes' fds are listed only when a socket no listing has seen appears, or the job
processes change: a steady job's flows cost one sock_diag read an update. That read walks the
kernel's whole table of established sockets, however few the host holds (about 2 ms for its
262,144 buckets on a 24 GiB machine, more on a larger one): with no job here and the fabric NICs
sending too little for any flow to be busy, it is made only every REFRESH_S.
"""

from __future__ import annotations

import math
import time
from collections.abc import Callable, Collection
from dataclasses import dataclass, field

from clockfabric.traffic.steer_decide import FlowKey
from clockfabric.workload.flows import FlowRates, FlowTracker, SocketReading
from clockfabric.workload.jobs import Job, JobProcess, group, identify
from clockfabric.workload.procfs import ProcFs

YOUNG_S = 5.0  # a process this new is read again: `env X=1 cmd` and `ip netns exec` exec after we may look
# an exec that makes a process a job's (`env X=1 cmd`, `ip netns exec`) comes milliseconds after its
# start: `opened`, called ten times as often as an update, reads a process of no job again this long
OPENED_YOUNG_S = 1.5
REFRESH_S = 10.0  # with no job here and the NICs quiet, the sockets are read this often (the count of others)
LIST_EVERY_S = 10.0  # /proc is listed at least this often, however still the kernel's last pid


@dataclass(frozen=True)
class JobFlow:
    jobid: str
    pid: int
    rates: FlowRates


@dataclass
class WorkloadView:
    """One update's jobs and their flows."""

    jobs: dict[str, Job] = field(default_factory=dict)
    flows: list[JobFlow] = field(default_factory=list)
    ended: list[FlowKey] = field(default_factory=list)  # flows gone since the last update
    other_flows: int = 0  # established flows of no job
    busy_others: list[FlowRates] = field(default_factory=list)  # those of them sending: load on the links
    flows_readable: bool = True  # False: sock_diag could not be read (jobs only)


def owners(inodes_by_pid: dict[int, set[int]], job_of: dict[int, str]) -> dict[int, tuple[int, str]]:
    """Socket inode -> (pid, job id). A socket shared by a parent and its children (fork keeps the
    fds) goes to the lowest pid: the one that most likely made it."""
    out: dict[int, tuple[int, str]] = {}
    for pid in sorted(inodes_by_pid):
        for inode in inodes_by_pid[pid]:
            out.setdefault(inode, (pid, job_of[pid]))
    return out


BUSY_BPS = 1e6  # a flow of no job sending this fast is reported: it loads the links it crosses


def attribute(rates: list[FlowRates], owner: dict[int, tuple[int, str]]) -> tuple[list[JobFlow], list[FlowRates]]:
    """(the flows of jobs, the flows of no job)."""
    flows, other = [], []
    for r in rates:
        if (found := owner.get(r.reading.inode)) is None:
            other.append(r)
        else:
            flows.append(JobFlow(found[1], found[0], r))
    return flows, other


class WorkloadMonitor:
    def __init__(self, proc: ProcFs, read_sockets: Callable[[], list[SocketReading]] | None,
                 clock: Callable[[], float] = time.monotonic):
        """`read_sockets`: the host's established TCP sockets (None where they cannot be read)."""
        self.proc = proc
        self.read_sockets = read_sockets
        self.clock = clock
        self.netns, self.pidns = proc.own_namespaces()
        self.known: dict[int, tuple[float, JobProcess | None]] = {}  # by pid: its start, its job (or None)
        self.tracker = FlowTracker()
        # the last fd listing: socket inode -> (pid, job); the inodes it looked for; whose fds it listed
        self.owner: dict[int, tuple[int, str]] = {}
        self.listed_inodes: set[int] = set()
        self.listed_jobs: dict[int, str] = {}
        # for `opened`: the kernel's last pid and when it moved; the job processes known; the fds
        # it last read, by pid, with their stamp
        self.last_pid: int | None = None
        self.made_at = self.listed_at = -math.inf
        self.job_processes: list[JobProcess] = []
        self.fds: dict[int, tuple[tuple[int, int] | None, dict[int, int]]] = {}
        self.read_at = -math.inf  # when the sockets were last read; how many were a job's, how many not
        self.job_flows = self.other_flows = 0

    def _classify(self, pid: int) -> tuple[float, JobProcess | None] | None:
        """(its start, its job or None: no job, or not this host's); None if it is gone."""
        facts = self.proc.process(pid)
        if facts is None:
            return None
        tag = identify(facts.environ, facts.cgroup)
        if tag is None or (facts.netns != self.netns and facts.pidns == self.pidns):
            return facts.start_s, None
        return facts.start_s, JobProcess(pid, tag, facts.start_s, visible=facts.netns == self.netns)

    def _tagged(self, pid: int) -> bool:
        marks = self.proc.job_marks(pid)
        return marks is not None and identify(*marks) is not None

    def processes(self, young_s: float = YOUNG_S, listed: bool = True, new: Collection[int] = ()) -> list[JobProcess]:
        """This host's job processes now; a process of no job younger than `young_s` read again.
        `listed` False: /proc is not listed, only the processes known and `new` are looked at."""
        now_s = time.time()
        new = set(new)
        if listed:
            pids = set(self.proc.pids())
        else:  # a job process that exited is let go now; one of no job at the next listing
            pids = {pid for pid, (_, job) in self.known.items() if job is None or self.proc.alive(pid)} | new
        self.known = {pid: k for pid, k in self.known.items() if pid in pids}
        for pid in pids:
            before = self.known.get(pid)
            # a young process of no job is read again, first only what an exec changes to make it
            # a job's (its environment, its cgroup); one that cannot be read (a kernel thread, or
            # gone: then not listed next time) is not tried again; a pid made since the last look
            # is read whatever it was before (the kernel may have handed it out again)
            if before is None or pid in new or (before[1] is None and now_s - before[0] < young_s
                                                and self._tagged(pid)):
                self.known[pid] = self._classify(pid) or (-math.inf, None)
        self.job_processes = [p for _, p in self.known.values() if p is not None]
        return self.job_processes

    def opened(self, jobids: Collection[str]) -> list[tuple[str, int, int, int]]:
        """The sockets these jobs' processes hold now that the last update's fd listing did not
        have, as (job id, pid, inode, descriptor number): read between updates, a process too new
        for the last one included. A socket shared by several processes is the lowest pid's, as in
        `owners`. Made to be called often: /proc is listed again only when a process was made since
        the last call (the kernel's last pid moved), and then only the pids handed out since where
        they are few (ProcFs.made), a process of no job read again only in the OPENED_YOUNG_S after
        (later, an exec is left to the update), and a process's fds only when it opened or closed
        one."""
        now_s = self.clock()
        made = self._made_since(now_s)
        if made is None or made:
            procs = self.processes(OPENED_YOUNG_S, listed=made is None, new=made or ())
        elif now_s - self.made_at < OPENED_YOUNG_S:
            procs = self.processes(OPENED_YOUNG_S, listed=False)
        else:
            procs = self.job_processes
        out, taken, fds = [], set(self.owner), {}
        for p in sorted(procs, key=lambda p: p.pid):
            if p.visible and p.tag.jobid in jobids:
                fds[p.pid] = self._socket_fds(p.pid)
                for inode, fd in fds[p.pid][1].items():
                    if inode not in taken:
                        taken.add(inode)
                        out.append((p.tag.jobid, p.pid, inode, fd))
        self.fds = fds
        return out

    def _made_since(self, now_s: float) -> list[int] | None:
        """The processes made since the last look (ProcFs.made; [] if none was), or None where
        /proc is to be listed instead: the kernel's last pid cannot be read or moved too far, or
        the last listing is LIST_EVERY_S old. Read before the listing or the reading that follows,
        so that a process made between the two is looked at again next time."""
        last = self.proc.last_pid()
        made: list[int] | None = []
        if last is None or self.last_pid is None or now_s - self.listed_at >= LIST_EVERY_S:
            made = None
        elif last != self.last_pid:
            made = self.proc.made(self.last_pid, last)
        if last != self.last_pid:
            self.last_pid, self.made_at = last, now_s
        if made is None:
            self.listed_at = now_s
        return made

    def _socket_fds(self, pid: int) -> tuple[tuple[int, int] | None, dict[int, int]]:
        """The process's sockets (procfs.socket_fds) with the stamp they were read at, read again
        only if its stamp moved since `opened`'s last call."""
        stamp = self.proc.fds_stamp(pid)
        if (last := self.fds.get(pid)) is not None and stamp is not None and last[0] == stamp:
            return last
        return stamp, self.proc.socket_fds(pid)

    def update(self, fabric_tx_bps: float | None = None) -> WorkloadView:
        """`fabric_tx_bps`: what the fabric NICs sent a second since the last update, every flow
        together (None: not known). Below BUSY_BPS, with no job process here and no job's flow at
        the last read (so a job's end is read at once), no flow this view would report is
        sending: the sockets are not read (but every REFRESH_S). A flow that starts sending is
        seen at the next update, its first rate the mean since the last read."""
        now_s = self.clock()
        made = self._made_since(now_s)
        procs = self.processes(listed=made is None, new=made or ())
        view = WorkloadView(jobs=group(procs))
        if self.read_sockets is None:
            view.flows_readable = False
            return view
        quiet = (fabric_tx_bps is not None and fabric_tx_bps < BUSY_BPS and not self.job_flows
                 and not any(p.visible for p in procs))
        if quiet and now_s - self.read_at < REFRESH_S:
            view.other_flows = self.other_flows
            return view
        readings = self.read_sockets()
        self.read_at = now_s
        jobs = {p.pid: p.tag.jobid for p in procs if p.visible}
        if jobs != self.listed_jobs or any(r.inode not in self.listed_inodes for r in readings):
            self.owner = owners({pid: self.proc.socket_inodes(pid) for pid in jobs}, jobs)
            self.listed_inodes, self.listed_jobs = {r.inode for r in readings}, jobs
        rates, view.ended = self.tracker.update(readings, now_s)
        view.flows, others = attribute(rates, self.owner)
        self.job_flows, view.other_flows = len(view.flows), len(others)
        self.other_flows = view.other_flows
        view.busy_others = [r for r in others if (r.tx_bps or 0) >= BUSY_BPS]
        return view
