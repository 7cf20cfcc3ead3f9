"""Run the collective benchmark (all-reduce, all-to-all) on a fleet's hosts: one worker per host, results gathered.

run_collective(fleet, hosts, options, sizes=...) is the launcher (options: CollectiveOptions);
allreduce(...) and alltoall(...) are it with the collective named and the options as keywords.

Each host runs `python -m clockfabric.collective.worker` (started through its Host). The worker
is told every rank's name and its NIC address on each plane in use (the /31 routed over
that plane only), so subflow i, pinned to planes[i % len(planes)], connects NIC to NIC.
Ranks listen on port_base + rank; each call reserves its own port range, so calls from
several threads never collide, even on one host. The options travel to the workers as JSON.
"""

from __future__ import annotations

import json
import queue
import random
import sys
import threading
import time
from collections import deque
from collections.abc import Callable, Sequence
from dataclasses import replace
from typing import Any

from clockfabric.collective.expected import (
    common_planes,
    expected_alltoall_busbw_gbps,
    expected_busbw_gbps,
    leaf_groups,
)
from clockfabric.collective.options import CollectiveOptions
from clockfabric.collective.results import (
    COLLECTIVES,
    CollectiveResult,
    Row,
    algbw_gbps,
    busbw_gbps,
    job_time_us,
)
from clockfabric.collective.sizes import format_size
from clockfabric.collective.wire import PEER_CLOSED
from clockfabric.errors import ClockfabricError
from clockfabric.hosts import Fleet, Proc, stop
from clockfabric.topology import Port, interfaces

PORT_LOW, PORT_HIGH = 20000, 32000  # below the ephemeral range (32768+) that source ports come from
FAIL_GRACE_S = 3.0  # once a rank fails, the others get this long to notice (their links close) and exit
STALL_GRACE_S = 10.0  # beyond timeout_s: workers end themselves after timeout_s without progress
Progress = Callable[[str, int, int], None]  # (stage, done, total), as console.progress_bar takes

_ports_lock = threading.Lock()
_ports_used: set[int] = set()


def allreduce(fleet: Fleet, hosts: Sequence[str], *, sizes: Sequence[int], progress: Progress | None = None,
              gate: threading.Barrier | None = None, **knobs: Any) -> CollectiveResult:
    """All-reduce float32 buffers of each size (bytes, rounded down to whole floats) over hosts.

    Rank i runs on hosts[i]; the ring follows that order. knobs: any CollectiveOptions field
    but the collective (algorithm: "ring", or "hier", which groups by leaf switch). The rest:
    see run_collective.
    """
    return run_collective(fleet, hosts, CollectiveOptions(collective="allreduce", **knobs), sizes=sizes,
                          progress=progress, gate=gate)


def alltoall(fleet: Fleet, hosts: Sequence[str], *, sizes: Sequence[int], progress: Progress | None = None,
             gate: threading.Barrier | None = None, **knobs: Any) -> CollectiveResult:
    """All-to-all of float32 send buffers of each size over hosts: each rank sends 1/n of its
    buffer to each rank. Sizes are bytes per rank's send buffer, rounded down to a multiple of
    4 * len(hosts) (equal blocks of whole floats, as nccl-tests rounds). knobs: any
    CollectiveOptions field but the collective (algorithm: "pairwise" or "oneshot"). The
    rest: see run_collective.
    """
    return run_collective(fleet, hosts, CollectiveOptions(collective="alltoall", **knobs), sizes=sizes,
                          progress=progress, gate=gate)


def run_collective(fleet: Fleet, hosts: Sequence[str], options: CollectiveOptions = CollectiveOptions(), *,
                   sizes: Sequence[int], progress: Progress | None = None,
                   gate: threading.Barrier | None = None) -> CollectiveResult:
    """Run one collective (options.collective) over hosts, for each size.

    Rank i runs on hosts[i]. sizes: bytes per rank's buffer, rounded down to whole floats
    (all-to-all: to n equal blocks of them). options: every other knob (CollectiveOptions);
    the planes default to every plane all hosts share.
    gate: a barrier shared by jobs run side by side (with the same sizes), so they start, time
    and end together: once every rank is ready for a size (connected, buffers made), the call
    waits there, then lets its ranks begin that size's warmup, from which its timed iterations
    follow without a pause; once every rank has its timings, it waits there while its ranks
    keep the fabric loaded with untimed iterations, then lets them stop (a job that fails
    should abort() it).
    Raises ClockfabricError, naming the host, if a rank fails; its workers are stopped first.
    """
    topo, collective = fleet.topology, options.collective
    hosts, planes, sizes = _check(fleet, hosts, sizes, options)
    what, n = COLLECTIVES[collective], len(hosts)
    expect = expected_alltoall_busbw_gbps if collective == "alltoall" else expected_busbw_gbps
    expected = expect(topo, hosts, options.subflows, planes, algorithm=options.algorithm)
    itfs = interfaces(topo)
    addresses = [[str(itfs[Port(h, topo.hosts[h].nic_on(p).name)].address.ip) for p in planes] for h in hosts]
    group_of = {h: g for g, members in enumerate(leaf_groups(topo, hosts, planes[0])) for h in members}
    reserved = options.port_base is None
    base = _reserve_ports(n) if options.port_base is None else options.port_base
    ours = replace(options, planes=tuple(planes), port_base=base)
    argv = [sys.executable, "-m", "clockfabric.collective.worker", "--fleet", fleet.name, "--options", ours.to_json(),
            "--world", str(n), "--sizes", ",".join(map(str, sizes)), "--token", str(random.getrandbits(32)),
            "--groups", ",".join(str(group_of[h]) for h in hosts)] + (["--gate"] if gate else [])
    for h, addrs in zip(hosts, addresses, strict=True):
        argv += ["--peer", f"{h}={','.join(addrs)}"]
    try:
        records = _launch(fleet, hosts, argv, len(sizes) * (options.warmup + options.iters), options.timeout_s,
                          progress, what, gate)
    finally:
        if reserved:
            _release_ports(base, n)
    result = CollectiveResult(fleet=fleet.name, hosts=hosts, algorithm=ours.algorithm, subflows=ours.subflows,
                              planes=planes, iters=ours.iters, warmup=ours.warmup, port_base=base,
                              expected_busbw_gbps=expected,
                              connect_s=max(r["connect_s"] for r in records["connected"]),
                              scheduler=ours.scheduler, placement=ours.placement, collective=collective,
                              subflow_stats={hosts[r["rank"]]: r["subflows"] for r in records.get("subflows", [])})
    for size in sizes:
        per_rank = [r for r in records["result"] if r["size_bytes"] == size]
        if len(per_rank) != n:
            raise ClockfabricError(f"{what} of {format_size(size)}: only {len(per_rank)} of {n} "
                                   "ranks reported a result")
        t = job_time_us([r["times_us"] for r in per_rank])
        count = size // 4 // n if collective == "alltoall" else size // 4  # nccl-tests' count: per peer for a2a
        result.rows.append(Row(size_bytes=size, count=count, time_us=round(t, 1),
                               algbw_gbps=algbw_gbps(size, t), busbw_gbps=busbw_gbps(size, t, n, collective),
                               wrong=sum(r["wrong"] for r in per_rank)))
    return result


def _check(fleet: Fleet, hosts: Sequence[str], sizes: Sequence[int],
           options: CollectiveOptions) -> tuple[list[str], list[int], list[int]]:
    """What the options cannot check alone: the hosts, planes and sizes against the fleet."""
    topo = fleet.topology
    hosts = list(hosts)
    what = COLLECTIVES[options.collective]
    for h in hosts:
        if h not in topo.hosts:
            names = list(topo.hosts)
            sample = ", ".join(names[:4]) + (", ..." if len(names) > 4 else "")
            raise ClockfabricError(f"{h!r} is not a host of {fleet.name}; hosts are {sample}")
    if len(hosts) < 2:
        raise ClockfabricError(f"an {what} needs at least 2 hosts (got {len(hosts)})")
    if len(set(hosts)) != len(hosts):
        raise ClockfabricError("each host runs one rank; a host is named twice")
    shared = common_planes(topo, hosts)
    planes = list(options.planes) if options.planes is not None else shared
    if not planes:
        raise ClockfabricError("no plane is shared by all the hosts")
    if missing := [p for p in planes if p not in shared]:
        lacking = next(h for h in hosts if not topo.hosts[h].nic(missing[0]))
        raise ClockfabricError(f"{lacking} has no NIC on plane {missing[0]}; planes all hosts share: "
                               f"{', '.join(map(str, shared)) or 'none'}")
    if options.standby and options.subflows % len(planes):
        raise ClockfabricError(f"standby subflows need the subflows ({options.subflows}) to be a multiple of the "
                               f"planes ({len(planes)}): each stands by on its subflow's plane and spine")
    unit = 4 * len(hosts) if options.collective == "alltoall" else 4  # all-to-all: n equal blocks of whole floats
    sizes = sorted({s - s % unit for s in sizes})
    if not sizes or sizes[0] < unit:
        raise ClockfabricError(f"sizes must be at least {unit} bytes (one float32"
                               f"{f' per rank: {len(hosts)} ranks' if unit > 4 else ''})")
    if options.algorithm == "hier":
        counts = [len(g) for g in leaf_groups(topo, hosts, planes[0])]
        if len(set(counts)) > 1:
            raise ClockfabricError(f"hier needs the same number of hosts under each leaf; got {counts} "
                                   "(choose --hosts to match, or use --algorithm ring)")
    return hosts, planes, sizes


# ---- ports -------------------------------------------------------------------------------------
def _reserve_ports(n: int) -> int:
    with _ports_lock:
        while True:
            base = random.randrange(PORT_LOW, PORT_HIGH - n)
            if not _ports_used & set(range(base, base + n)):
                _ports_used.update(range(base, base + n))
                return base


def _release_ports(base: int, n: int) -> None:
    with _ports_lock:
        _ports_used.difference_update(range(base, base + n))


# ---- the workers -------------------------------------------------------------------------------
def _launch(fleet: Fleet, hosts: list[str], argv: list[str], total_iters: int, timeout_s: float,
            progress: Progress | None, what: str = "all-reduce",
            gate: threading.Barrier | None = None) -> dict[str, list[dict]]:
    """Start rank i on hosts[i]; wait; return their JSON records by event. Never leaves one running."""
    events: queue.Queue = queue.Queue()  # (rank, record) from every worker's stdout, in arrival order
    stderr: list[deque[str]] = [deque(maxlen=20) for _ in hosts]
    procs: list[Proc] = []
    readers: list[threading.Thread] = []
    try:
        for rank, host in enumerate(hosts):
            mine = [*argv, "--rank", str(rank), "--agent", str(fleet.topology.hosts[host].address)]  # if one runs there
            proc = fleet.host(host).spawn(mine, env={"PYTHONUNBUFFERED": "1"}, pipes=True)
            procs.append(proc)
            for target, args in ((_read_json, (proc.stdout, rank, events)), (stderr[rank].extend, (proc.stderr,))):
                reader = threading.Thread(target=target, args=args, daemon=True)
                reader.start()  # before it is listed: an interrupt in between must not leave one to join unstarted
                readers.append(reader)
        records = _watch(procs, hosts, events, stderr, total_iters, timeout_s, progress, fleet.name, what, gate)
    finally:
        stop(procs)
        for p in procs:
            if p.stdin:
                try:
                    p.stdin.close()
                except OSError:  # a line still buffered for a rank that has gone: nothing to flush it to
                    pass
        for t in readers:
            t.join(timeout=2)
    return records


def _read_json(stream, rank: int, events: queue.Queue) -> None:
    for line in stream:
        try:
            rec = json.loads(line)
        except json.JSONDecodeError:
            continue
        if isinstance(rec, dict):
            events.put((rank, rec))
    events.put((rank, {"event": "eof"}))


def _watch(procs: list[Proc], hosts: list[str], events: queue.Queue, stderr: list[deque],
           total_iters: int, timeout_s: float, progress: Progress | None, fleet: str,
           what: str = "all-reduce", gate: threading.Barrier | None = None) -> dict[str, list[dict]]:
    records: dict[str, list[dict]] = {"connected": [], "result": [], "error": []}
    failures: list[tuple[int, str]] = []  # (rank, why), first failure first
    last_activity, failed_at, done_iters, eofs = time.monotonic(), None, 0, 0
    report = progress or (lambda *_: None)
    report("connecting", 0, len(hosts))
    while eofs < len(procs) or any(p.poll() is None for p in procs):
        try:
            rank, rec = events.get(timeout=0.1)
        except queue.Empty:
            rank, rec = None, {}
        now = time.monotonic()
        kind = rec.get("event")
        if kind == "eof":
            eofs += 1
        elif kind:
            last_activity = now
            records.setdefault(kind, []).append(rec)
            if kind == "connected":
                report("connecting", len(records["connected"]), len(hosts))
            elif kind == "ready" and gate is not None:  # ready and holding come with --gate only
                if len(records["ready"]) % len(hosts) == 0:  # every rank, for this size
                    _open(gate, procs, timeout_s, f"{what} on {fleet}", "start")
            elif kind == "holding" and gate is not None:
                if len(records["holding"]) == len(hosts):
                    _open(gate, procs, timeout_s, f"{what} on {fleet}", "end")
            elif kind == "iter":
                done_iters += 1
                report(what, done_iters, total_iters)
            elif kind == "error":
                failures.append((rank, rec["error"]))
        if failed_at is None and (failures or any(p.poll() not in (None, 0) for p in procs)):
            failed_at = now
        if failed_at is not None and now - failed_at > FAIL_GRACE_S:
            break
        if now - last_activity > timeout_s + STALL_GRACE_S:
            running = [hosts[r] for r, p in enumerate(procs) if p.poll() is None]
            raise ClockfabricError(f"{what} on {fleet}: no progress for {timeout_s + STALL_GRACE_S:g} s; "
                                   f"stopped the ranks on {', '.join(running)}")
    for r, p in enumerate(procs):  # a rank that died without a word (killed, crashed)
        if p.poll() not in (None, 0) and all(r != f for f, _ in failures):
            failures.append((r, _exit_reason(p.poll(), stderr[r])))
    if failures:
        raise ClockfabricError(f"{what} on {fleet} failed on {headline(failures, hosts)}")
    return records


def headline(failures: list[tuple[int, str]], hosts: list[str]) -> str:
    """The ranks' failures in one line, led by a cause: a rank whose peer closed on it comes
    last, since that is the echo of the peer's own failure (a rank that could not connect
    exits, and its peers read the close)."""
    ordered = sorted(failures, key=lambda f: PEER_CLOSED in f[1] or "Connection reset by peer" in f[1])
    rank, why = ordered[0]
    others = sorted({hosts[r] for r, _ in failures} - {hosts[rank]})
    return f"{hosts[rank]} (rank {rank}): {why}" + (f" (also failed: {', '.join(others)})" if others else "")


def _open(gate: threading.Barrier, procs: list[Proc], timeout_s: float, what: str, to: str) -> None:
    """Wait for the jobs sharing the gate, then tell our ranks to go on (a line on their stdin):
    to "start" a size's iterations, or to "end" the untimed ones that keep the fabric loaded."""
    try:
        gate.wait(timeout_s)
    except threading.BrokenBarrierError:
        why = "never connected" if to == "start" else "did not finish its iterations"
        raise ClockfabricError(f"{what}: a job meant to {to} with it failed or {why} "
                               f"within {timeout_s:g} s") from None
    for p in procs:
        assert p.stdin is not None  # gated ranks read their go from a pipe
        try:
            p.stdin.write("go\n")
            p.stdin.flush()
        except OSError:  # that rank has died: its exit is reported as its failure
            pass


def _exit_reason(code: int | None, stderr: deque) -> str:
    lines = [ln.strip() for ln in stderr if ln.strip()]
    how = f"killed by signal {-code}" if code is not None and code < 0 else f"exited with status {code}"
    return f"{how}: {lines[-1]}" if lines else how
