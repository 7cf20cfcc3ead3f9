"""The contention lab and what its link rates allow: the topology, the jobs each scenario
runs, the bytes a collective puts on the wire, and the ideal time (every byte placed perfectly).
Why each constant has its value: docs/notes/2026-11-26-contention.md."""

from __future__ import annotations

from dataclasses import dataclass

from clockfabric.collective.options import CollectiveOptions
from clockfabric.collective.results import BUS_FACTORS
from clockfabric.errors import ClockfabricError
from clockfabric.topology import (
    Topology,
    leafspine,
    multirail,
    parse_rate,
)

SCENARIOS = ("none", "two-alltoall", "two-allreduce", "elephants", "degraded")
FABRICS = ("leafspine", "dualplane")
JOB_A = ["h0", "h4", "h1", "h5"]
JOB_B = ["h2", "h6", "h3", "h7"]
ELEPHANTS = [("h2", "h6"), ("h7", "h3")]
HOST_RATE, FABRIC_RATE = "50mbit", "25mbit"
# owd's targets: where flows collide, ratios to each baseline and the share of the ideal;
# with nothing to fix, at most this much slower than the best baseline
TARGETS = {"vs_ecmp": 1.5, "vs_least_outstanding": 1.2, "of_ideal": 0.9}
QUIET_SLACK = 1.03
# untimed iterations first, after the jobs' common start: past the start's transient into the
# steady state the timed iterations measure; nccl-tests' default too
WARMUP = 5
MTU = 1500
MTUS = (1500, 9000)  # Ethernet's, and the jumbo frames AI back-end fabrics run
BUFFER_BYTES = 200 * 1514  # each port's FIFO: the lab's default 200 full-sized frames at MTU 1500
# how long the elephants may run: iperf3's longest (a day); the bench stops them once the
# scenario is done, so every seed runs loaded
ELEPHANT_SECONDS = 86400
# The elephants' TCP, named rather than inherited from the machine's sysctl (which would change
# the scenario with the host): CUBIC, Linux's own default and what the job's subflows run.
ELEPHANT_CONGESTION = "cubic"
# Before each run with elephants: let them regain the spine (SETTLE_S), then read their rate
# alone over ALONE_S, the baseline of what each run leaves them.
SETTLE_S, ALONE_S = 3.0, 2.0
# Each subflow's receive window, fixed (tcpinfo.fixed_rcvbuf): autotuned windows overflow the
# uplinks' FIFOs.
RCVBUF = 40 << 10
# The window bytes that the subflows on one spine from under a leaf share (claims.share): about
# 0.8 of an uplink's FIFO (BUFFER_BYTES), room left for what the ledger does not count (a ring's
# barrier bytes, probes).
RCVBUF_BUDGET = 240 << 10
# NCCL's all-to-all posts every send and receive in one group. Pairwise steps would leave the
# spines idle while each rank sends to its leaf-mate, which no scheduler can fix.
ALLTOALL_ALGORITHM = "oneshot"


@dataclass
class Run:
    scenario: str
    scheduler: str
    seed: int
    jobs: list[dict]  # per job: hosts, time_us, busbw_gbps, wrong, bytes (its subflows carried), standby_bytes
    cpu_steal: float | None = None  # share of this machine's CPU time the hypervisor took meanwhile
    outside_mbps: float | None = None  # with elephants: their rate over the timed iterations, Mbit/s (all of them)
    outside_alone_mbps: float | None = None  # ... and just before it, alone on the fabric

    @property
    def time_us(self) -> float:
        return max(j["time_us"] for j in self.jobs)


SPINES = (2, 3, 4)  # the leaf-spine lab: 2-4 spines; more spines make ECMP's collisions costlier


ACK_FRAME = 66  # bytes on the wire of a bare TCP ack: Ethernet, IP, and TCP with timestamps


def tcp_payload(mtu: int) -> float:
    """Data bytes per byte on the wire where a link carries data both ways, as every link that
    binds a scenario here does: per full-sized segment, the MSS (IP and TCP headers with
    timestamps: 52 bytes) in an Ethernet frame (14 more), and half an ack for the other way's
    data, since TCP acks at least every second full-sized segment (RFC 5681, and Linux's
    delayed acks; the lab's uplinks carried 0.58 acks per segment, docs/notes/2026-11-23-contention.md)."""
    return (mtu - 52) / (mtu + 14 + ACK_FRAME / 2)


def topology(fabric: str = "leafspine", spines: int = 2, mtu: int = MTU) -> Topology:
    buffer = round(BUFFER_BYTES / (mtu + 14))
    if fabric == "dualplane":
        return multirail(8, 2, 2, 2, host_rate=HOST_RATE, fabric_rate=FABRIC_RATE, mtu=mtu, buffer=buffer,
                         name="contention-dualplane")
    return leafspine(8, 2, spines, host_rate=HOST_RATE, fabric_rate=FABRIC_RATE, mtu=mtu, buffer=buffer,
                     name="contention-leafspine")


def plane0(topo: Topology, name: str) -> str:
    """A switch of plane 0 by its leaf-spine name: leaf0 is p0-leaf0 on a dual-plane lab."""
    return name if name in topo.switches else f"p0-{name}"


def leaf_of(topo: Topology, host: str, plane: int) -> str:
    nic = topo.hosts[host].nic_on(plane)
    return next(lk.other(host).node for lk in topo.links_of(host) if lk.port(host).iface == nic.name)


def jobs_of(scenario: str) -> list[tuple[str, list[str]]]:
    """(collective, hosts) of each job the scenario runs at once."""
    if scenario == "two-alltoall":
        return [("alltoall", JOB_A), ("alltoall", JOB_B)]
    return [("allreduce", JOB_A), ("allreduce", JOB_B)] if scenario == "two-allreduce" else [("allreduce", JOB_A)]


# ---- the ideal -----------------------------------------------------------------------------------
def flows(collective: str, hosts: list[str], size: int) -> list[tuple[str, str, float]]:
    """(src, dst, bytes) a collective of `size` bytes per rank puts on the wire: a ring
    all-reduce 2(n-1)/n of it per hop, an all-to-all 1/n of it per ordered pair."""
    n = len(hosts)
    if collective == "alltoall":
        return [(a, b, size / n) for a in hosts for b in hosts if a != b]
    return [(h, hosts[(i + 1) % n], size * 2 * (n - 1) / n) for i, h in enumerate(hosts)]


def ideal_time_s(topo: Topology, scenario: str, size: int, jobs: list[tuple[str, list[str]]] | None = None,
                 *, fair: bool = True) -> float:
    """How long the scenario's jobs take at best, all at once, with every byte placed
    perfectly: the busiest of each host's NICs (its bytes over its NICs' rate) and each leaf
    pair's spines on every plane (the bytes crossing over their capacity: per spine its
    narrower link; on the elephants' spine the jobs claim only a TCP-fair share, flows /
    (flows + elephants) of it, or with fair=False all of it: a bound no scheduler can beat,
    where the fair share is what a good one should reach). jobs: (collective, hosts), by
    default the scenario's."""
    planes = sorted({n.plane for h in topo.hosts.values() for n in h.nics})
    hot = {plane0(topo, "leaf0"), plane0(topo, "spine0")}
    host_bps = parse_rate(HOST_RATE)

    def rate(a: str, b: str) -> float:
        r = topo.find_link(a, b).rate_bps
        return r / 4 if scenario == "degraded" and {a, b} == hot else r

    wire = [f for collective, hosts in jobs or jobs_of(scenario) for f in flows(collective, hosts, size)]
    worst = 0.0
    for h in {a for a, _, _ in wire}:
        worst = max(worst, sum(b for a, _, b in wire if a == h) * 8 / (host_bps * len(topo.hosts[h].nics)))
    group = {h: leaf_of(topo, h, planes[0]) for h in topo.hosts}  # hosts share a leaf on every plane alike
    for ga, gb in {(group[a], group[b]) for a, b, _ in wire if group[a] != group[b]}:
        crossing = [(a, b, n) for a, b, n in wire if (group[a], group[b]) == (ga, gb)]
        a0, b0 = crossing[0][:2]
        capacity = 0.0
        for p in planes:
            la, lb = leaf_of(topo, a0, p), leaf_of(topo, b0, p)
            for s in (sw.name for sw in topo.switches.values() if sw.role == "spine" and sw.plane == p):
                share = min(rate(la, s), rate(s, lb))
                if fair and scenario == "elephants" and s in hot:
                    big = sum(1 for x, y in ELEPHANTS if (group[x], group[y]) == (ga, gb))
                    share *= len(crossing) / (len(crossing) + big)
                capacity += share
        worst = max(worst, sum(n for _, _, n in crossing) * 8 / capacity)
    return worst


def busbw_gbps(collective: str, size: int, ranks: int, seconds: float) -> float:
    return size / seconds / 1e9 * BUS_FACTORS[collective](ranks)


def spine_paths(topo: Topology) -> int:
    """The distinct paths between hosts under different leaves: one through each spine, of every plane."""
    return sum(1 for sw in topo.switches.values() if sw.role == "spine")


@dataclass(frozen=True)
class Plan:
    """What one contention run does, checked once: a bad choice is one clear line before any lab
    is built. subflows: per peer pair, for every scheduler; None: one per spine path, so that
    `owd` on learned ports can reach every path (with fewer, a fault leaves it fewer to move
    to). placement: "" (each scheduler's own), or "hashed"/"learned" for all. rcvbuf: every
    subflow's receive buffer, bytes, fixed, or None for the kernel's autotuning. rcvbuf_budget:
    what the subflows the agents placed on one spine share instead (None: they keep rcvbuf).
    standby: subflows on learned ports (owd's) get standbys (collective/standby.py)."""

    scenarios: tuple[str, ...]
    schedulers: tuple[str, ...]
    seeds: int
    size: int
    iters: int
    subflows: int | None = None
    fabric: str = "leafspine"
    spines: int = 2
    mtu: int = MTU
    placement: str = ""
    rcvbuf: int | None = RCVBUF
    rcvbuf_budget: int | None = RCVBUF_BUDGET
    warmup: int = WARMUP
    standby: bool = True

    def __post_init__(self) -> None:
        if self.fabric not in FABRICS:
            raise ClockfabricError(f"unknown fabric {self.fabric!r}; choose from {', '.join(FABRICS)}")
        if self.spines not in SPINES or (self.fabric == "dualplane" and self.spines != 2):
            raise ClockfabricError(f"--spines must be one of {', '.join(map(str, SPINES))} on the leafspine "
                                   f"fabric (the dualplane fabric has 2 per plane); got {self.spines}")
        if bad := [s for s in self.scenarios if s not in SCENARIOS]:
            raise ClockfabricError(f"unknown scenario {bad[0]!r}; choose from {', '.join(SCENARIOS)}")
        if self.seeds < 1 or self.iters < 1 or (self.subflows is not None and self.subflows < 1):
            raise ClockfabricError("--seeds, --iters and --subflows must be at least 1")
        if self.warmup < 0:
            raise ClockfabricError(f"--warmup must be at least 0; got {self.warmup}")
        for scheduler in self.schedulers:  # each scheduler's options as its runs will make them
            self.options(scheduler)
        if self.mtu not in MTUS:
            raise ClockfabricError(f"--mtu must be one of {', '.join(map(str, MTUS))}; got {self.mtu}")

    def options(self, scheduler: str, collective: str = "allreduce") -> CollectiveOptions:
        """The collective's options for one job of a run under `scheduler`."""
        return CollectiveOptions(collective=collective,
                                 algorithm=ALLTOALL_ALGORITHM if collective == "alltoall" else "",
                                 subflows=self.subflows or 1, scheduler=scheduler, placement=self.placement,
                                 rcvbuf=self.rcvbuf, rcvbuf_budget=self.rcvbuf_budget, standby=self.standby,
                                 iters=self.iters, warmup=self.warmup, timeout_s=60.0)
