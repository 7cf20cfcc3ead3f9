"""Benchmark results with nccl-tests' definitions (GB = 1e9 bytes).

algbw = bytes / time. busbw scales algbw to what each link carried, so it compares with
link speeds whatever the rank count: all-reduce 2(n-1)/n; all-gather, reduce-scatter and
all-to-all (n-1)/n.
"""

from __future__ import annotations

from dataclasses import asdict, dataclass, field

BUS_FACTORS = {"allreduce": lambda n: 2 * (n - 1) / n, "allgather": lambda n: (n - 1) / n,
               "reducescatter": lambda n: (n - 1) / n, "alltoall": lambda n: (n - 1) / n}


def algbw_gbps(size_bytes: int, time_us: float) -> float:
    return size_bytes / (time_us * 1e-6) / 1e9


def busbw_gbps(size_bytes: int, time_us: float, ranks: int, collective: str = "allreduce") -> float:
    return algbw_gbps(size_bytes, time_us) * BUS_FACTORS[collective](ranks)


def job_time_us(times_per_rank: list[list[float]]) -> float:
    """A collective's time per iteration from each rank's iteration times. Iterations run back
    to back, so one rank's are skewed against another's (a rank ahead waits inside its next
    iteration): each rank's mean, then the slowest rank's, as nccl-tests times a loop."""
    return max(sum(times) / len(times) for times in times_per_rank)


COLLECTIVES = {"allreduce": "all-reduce", "alltoall": "all-to-all"}  # the benchmark's collectives, as written


@dataclass
class Row:
    size_bytes: int  # each rank's buffer (all-to-all: its send buffer)
    count: int  # float32 elements, as nccl-tests counts them: the buffer's (all-to-all: one block's, per peer)
    time_us: float  # per iteration: the slowest rank's mean over the timed iterations (job_time_us)
    algbw_gbps: float
    busbw_gbps: float
    wrong: int  # elements that differed from the exact result: per rank the worst iteration, summed over ranks


@dataclass
class CollectiveResult:
    fleet: str  # the fleet it ran on (a lab's name, or a fleet file)
    hosts: list[str]  # rank i on hosts[i]; the ring runs in this order
    algorithm: str  # all-reduce: "ring" | "hier"; all-to-all: "pairwise" | "oneshot"
    subflows: int  # TCP connections per peer pair
    planes: list[int]  # subflow i on planes[i % len(planes)]
    iters: int
    warmup: int
    port_base: int
    expected_busbw_gbps: float  # expected_(alltoall_)busbw_gbps() for these hosts, subflows, planes, algorithm
    rows: list[Row] = field(default_factory=list)
    connect_s: float = 0.0  # the slowest rank's time to start and connect its subflows
    scheduler: str = "ecmp"  # which subflow carries each chunk
    placement: str = "hashed"  # source ports: kernel-picked (hashed) or learned per spine
    subflow_stats: dict[str, list[dict]] = field(default_factory=dict)  # per host: Transport.stats()
    collective: str = "allreduce"  # a key of COLLECTIVES

    @property
    def ok(self) -> bool:
        return all(r.wrong == 0 for r in self.rows)

    def ratio(self, row: Row) -> float:
        """busbw over the expected busbw."""
        return row.busbw_gbps / self.expected_busbw_gbps if self.expected_busbw_gbps else 0.0

    def as_dict(self) -> dict:
        d = asdict(self)
        for rd, row in zip(d["rows"], self.rows, strict=True):
            rd["busbw_over_expected"] = round(self.ratio(row), 4)
        return d


AllreduceResult = CollectiveResult  # the name from before all-to-all joined
