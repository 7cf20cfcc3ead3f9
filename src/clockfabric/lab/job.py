"""Run a real distributed training job on lab hosts, and judge how it went.

`start` launches one rank per host (rank i on hosts[i]) with torchrun-style rendezvous
by environment (MASTER_ADDR = the first host's stable address, a free MASTER_PORT, RANK,
WORLD_SIZE). The program is a Python script that takes `--log FILE` and writes JSON lines
as examples/ddp_train.py does; `parse` reads those logs into a `JobResult`.

Address binding: gloo binds to the address the hostname resolves to (unless
GLOO_SOCKET_IFNAME names an interface, whose first IPv4 address on lo would be 127.0.0.1).
So each rank runs through this module (`python -m clockfabric.lab.job --lab NAME
--hostname ADDR -- SCRIPT ARGS`), which moves itself into a new UTS namespace, sets the
hostname to the host's stable address (10.0.0.N on lo; a numeric name resolves to itself,
without /etc/hosts) and then runs the script in the same process. Every gloo connection
is then between stable addresses and survives a NIC going down when routes move, as on
real clusters where a host's name resolves to its loopback address. Running the script
in-process (not exec) keeps `clockfabric` and the lab's name on the rank's command line,
which is how `lab down` recognises a registered process as its own.
"""

from __future__ import annotations

import ctypes
import importlib.util
import math
import os
import random
import socket
import statistics
import subprocess
import sys
import time
from dataclasses import asdict, dataclass, field
from itertools import pairwise
from pathlib import Path

from clockfabric.errors import ClockfabricError
from clockfabric.lab import process
from clockfabric.lab.exec import command
from clockfabric.lab.state import Lab
from clockfabric.train.report import read_log

CLONE_NEWUTS = 0x04000000
DEFAULT_STALL_S = 120.0  # above the collective timeouts jobs use (30 s), so a timeout reads as a crash


# ---- judging a job from its logs -----------------------------------------------------------
@dataclass
class JobResult:
    outcome: str  # "completed" | "crashed" | "stalled"
    ranks: int
    steps: int  # steps that every rank finished
    step_s: list[float] = field(default_factory=list)  # per step: the slowest rank's duration
    total_s: float | None = None  # launch (or the first rank's start) to the last rank's end
    startup_s: float | None = None  # launch to the last rank starting step 0
    longest_stall_s: float = 0.0  # largest gap between step ends (every rank done), or to the end
    error: str | None = None  # the first crash's message
    missing: dict[int, list[int]] = field(default_factory=dict)  # rank -> steps it did not log

    @property
    def median_step_s(self) -> float | None:
        return statistics.median(self.step_s) if self.step_s else None

    def as_dict(self) -> dict:
        return asdict(self) | {"median_step_s": self.median_step_s}


def parse(logs: list[Path] | list[list[dict]], *, launched_at: float | None = None,
          ended_at: float | None = None) -> JobResult:
    """Judge a job from its ranks' logs (paths, or already-read records; one per rank, in order).

    completed: every rank wrote outcome "completed". crashed: some rank wrote "crashed".
    stalled: otherwise (a rank never finished: it hung and was killed, or still runs).
    `ended_at` (when the job ended or was killed) makes the time since the last step count
    as a stall for a job that did not complete.
    """
    ranks = [read_log(p) if isinstance(p, (str, Path)) else p for p in logs]
    if not ranks:
        raise ClockfabricError("no job logs to parse")
    outcomes = [next((r["outcome"] for r in recs if "outcome" in r), None) for recs in ranks]
    crashes = sorted((r.get("time", math.inf), r.get("error") or "unknown error")
                     for recs in ranks for r in recs if r.get("outcome") == "crashed")
    if crashes:
        outcome = "crashed"
    elif all(o == "completed" for o in outcomes):
        outcome = "completed"
    else:
        outcome = "stalled"

    steps_by_rank = [{r["step"]: r for r in recs if "step" in r and "duration_s" in r} for recs in ranks]
    top = max((max(s, default=-1) for s in steps_by_rank), default=-1)
    done = 0  # steps every rank finished, counted from step 0
    while done <= top and all(done in s for s in steps_by_rank):
        done += 1
    step_s = [max(s[i]["duration_s"] for s in steps_by_rank) for i in range(done)]
    ends = [max(s[i]["start"] + s[i]["duration_s"] for s in steps_by_rank) for i in range(done)]
    missing = {rank: [i for i in range(top + 1) if i not in s] for rank, s in enumerate(steps_by_rank)}
    missing = {rank: m for rank, m in missing.items() if m}
    if outcome == "completed":
        expected = max((r.get("steps", 0) for recs in ranks for r in recs if "outcome" in r), default=0)
        for rank, s in enumerate(steps_by_rank):
            lost = [i for i in range(expected) if i not in s]
            if lost:
                missing[rank] = lost

    gaps = [b - a for a, b in pairwise(ends)]
    if ends:
        gaps.append(step_s[0])  # the first step, from its start to every rank done
    if outcome != "completed":
        last = ends[-1] if ends else (launched_at if launched_at is not None else _first_time(ranks))
        end = ended_at if ended_at is not None else _last_time(ranks)
        if last is not None and end is not None:
            gaps.append(max(0.0, end - last))

    first_start = [s[0]["start"] for s in steps_by_rank if 0 in s]
    startup = max(first_start) - launched_at if launched_at is not None and first_start else None
    begin = launched_at if launched_at is not None else _first_time(ranks)
    end = _last_time(ranks) if outcome != "stalled" or ended_at is None else ended_at
    total = end - begin if begin is not None and end is not None else None
    return JobResult(outcome=outcome, ranks=len(ranks), steps=done, step_s=step_s, total_s=total,
                     startup_s=startup, longest_stall_s=max(gaps, default=0.0),
                     error=crashes[0][1] if crashes else None, missing=missing)


def _times(rec: dict) -> list[float]:
    out = [rec[k] for k in ("launched", "time", "start") if isinstance(rec.get(k), (int, float))]
    if "start" in rec and "duration_s" in rec:
        out.append(rec["start"] + rec["duration_s"])
    return out


def _first_time(ranks: list[list[dict]]) -> float | None:
    return min((t for recs in ranks for r in recs for t in _times(r)), default=None)


def _last_time(ranks: list[list[dict]]) -> float | None:
    return max((t for recs in ranks for r in recs for t in _times(r)), default=None)


# ---- running a job on lab hosts --------------------------------------------------------------
@dataclass
class Job:
    lab: Lab
    hosts: list[str]
    logs: list[Path]  # rank i's JSON lines
    outputs: list[Path]  # rank i's stdout and stderr
    procs: list[subprocess.Popen]
    launched_at: float  # time.time() just before the first rank started
    port: int
    ended_at: float | None = None
    killed: bool = False  # stop() had to end ranks that were still running
    exited_before_stop: list[int | None] = field(default_factory=list)

    @property
    def pids(self) -> list[int]:
        return [p.pid for p in self.procs]

    def running(self) -> bool:
        return any(p.poll() is None for p in self.procs)

    def wait(self, timeout: float, *, stall_s: float = DEFAULT_STALL_S, crash_grace_s: float = 5.0) -> JobResult:
        """Wait for the job to end; stop it (and call it stalled) if no rank logged anything
        for stall_s, or if it still runs after timeout. Once a rank has failed, the others get
        crash_grace_s to notice before they are stopped."""
        deadline = time.monotonic() + timeout
        failed_at = None
        while self.running():
            now = time.monotonic()
            if failed_at is None and any(p.poll() not in (None, 0) for p in self.procs):
                failed_at = now
            if failed_at is not None and now - failed_at > crash_grace_s:
                break
            quiet = time.time() - self._last_activity()
            if quiet > stall_s or now > deadline:
                break
            time.sleep(0.1)
        if self.running():
            self.stop()
        elif self.ended_at is None:
            self.ended_at = time.time()
        return self.result()

    def stop(self, grace_s: float = 3.0) -> None:
        """Stop this job's ranks (SIGTERM, then SIGKILL), by their own pids only."""
        if self.running():
            self.killed = True
            self.ended_at = time.time()
            self.exited_before_stop = [p.poll() for p in self.procs]
        process.stop(self.procs, grace_s)

    def result(self) -> JobResult:
        """Judge the job from its logs, and from how its ranks exited where the logs are silent."""
        res = parse(self.logs, launched_at=self.launched_at, ended_at=self.ended_at)
        if res.outcome == "stalled":
            # a rank that died on its own without a word (a segfault, the OOM killer, a kill from
            # outside) crashed the job; the ranks stopped by stop() only show that it hung
            codes = self.exited_before_stop if self.killed else [p.poll() for p in self.procs]
            died = [(rank, c) for rank, c in enumerate(codes) if c not in (None, 0)]
            if died:
                rank, code = died[0]
                how = f"signal {-code}" if code < 0 else f"status {code}"
                res.outcome = "crashed"
                res.error = f"rank {rank} exited with {how} without logging an outcome; see {self.outputs[rank]}"
        return res

    def connections(self) -> dict[str, list[tuple[str, str]]]:
        """Each host's established TCP connections of this job's rank, as (local, peer)."""
        out = {}
        for host, pid in zip(self.hosts, self.pids, strict=True):
            proc = subprocess.run(command(self.lab, host, ["ss", "-tnpH", "state", "established"]),
                                  capture_output=True, text=True)
            conns = []
            for line in proc.stdout.splitlines():
                if f"pid={pid}," not in line:
                    continue
                fields = line.split()
                conns.append((fields[2], fields[3]))  # Recv-Q Send-Q Local Peer Process
            out[host] = conns
        return out

    def _last_activity(self) -> float:
        times = [self.launched_at]
        for p in self.logs:
            try:
                times.append(p.stat().st_mtime)
            except FileNotFoundError:
                pass
        return max(times)


def start(lab: Lab, hosts: list[str], argv: list[str], log_dir: Path | str, *,
          env: dict[str, str] | None = None) -> Job:
    """Start argv (a Python script and its arguments) as rank i on hosts[i].

    Each rank gets `--log LOG_DIR/rankI.jsonl` appended to its arguments; its output goes to
    LOG_DIR/rankI.out. The ranks are registered with the lab, so `lab down` stops them.
    """
    if not hosts:
        raise ClockfabricError("a job needs at least one host")
    for h in hosts:
        if h not in lab.topology.hosts:
            names = list(lab.topology.hosts)
            sample = ", ".join(names[:4]) + (", ..." if len(names) > 4 else "")
            raise ClockfabricError(f"{h!r} is not a host of lab {lab.name}; hosts are {sample}")
    if len(set(hosts)) != len(hosts):
        raise ClockfabricError("each host runs one rank; a host is named twice")
    if not argv:
        raise ClockfabricError("no program to run: give a Python script and its arguments")
    if not Path(argv[0]).is_file():
        raise ClockfabricError(f"no script {argv[0]!r} (run from the repository root, or give a full path)")
    if importlib.util.find_spec("torch") is None:
        raise ClockfabricError("torch is not installed; run make setup")
    folder = Path(log_dir)
    folder.mkdir(parents=True, exist_ok=True)
    addresses = [str(lab.topology.hosts[h].address) for h in hosts]
    port = free_port(lab, hosts[0])
    logs = [folder / f"rank{i}.jsonl" for i in range(len(hosts))]
    outputs = [folder / f"rank{i}.out" for i in range(len(hosts))]
    for p in logs:
        p.unlink(missing_ok=True)
    base = os.environ | (env or {}) | {"MASTER_ADDR": addresses[0], "MASTER_PORT": str(port),
                                       "WORLD_SIZE": str(len(hosts)), "LOCAL_RANK": "0",
                                       "LOCAL_WORLD_SIZE": "1", "PYTHONUNBUFFERED": "1"}
    base.pop("GLOO_SOCKET_IFNAME", None)  # it would win over the hostname
    launched = time.time()
    procs: list[subprocess.Popen] = []
    job = Job(lab, list(hosts), logs, outputs, procs, launched, port)
    try:
        for rank, (host, address) in enumerate(zip(hosts, addresses, strict=True)):
            rank_argv = [sys.executable, "-m", "clockfabric.lab.job", "--lab", lab.name, "--hostname", address,
                         "--", *argv, "--log", str(logs[rank])]
            procs.append(process.spawn(command(lab, host, rank_argv), log=outputs[rank],
                                       env=base | {"RANK": str(rank)}, new_session=True,
                                       stdin=subprocess.DEVNULL))
        # Register each rank once `ip netns exec` and `env` have exec'd into the rank itself: while
        # the pid is between programs its command line reads empty, and the lab (`lab status`)
        # would drop the record as not its own. A lab's `down` kills its namespaces' processes anyway.
        deadline = time.monotonic() + 10
        for rank, proc in enumerate(procs):
            while proc.poll() is None and not _is_rank(proc.pid) and time.monotonic() < deadline:
                time.sleep(0.005)
            lab.register(proc.pid, f"job rank {rank} on {hosts[rank]}")
    except BaseException:
        job.stop()
        raise
    return job


def _is_rank(pid: int) -> bool:
    """Whether pid now runs `python -m clockfabric.lab.job` (its command line stays so)."""
    try:
        argv = Path(f"/proc/{pid}/cmdline").read_bytes().split(b"\0")
    except OSError:
        return False
    return argv[1:3] == [b"-m", b"clockfabric.lab.job"]


def free_port(lab: Lab, host: str) -> int:
    """A TCP port nothing listens on in the host's namespace."""
    proc = subprocess.run(command(lab, host, ["ss", "-tlnH"]), capture_output=True, text=True)
    used = {int(f.rsplit(":", 1)[1]) for line in proc.stdout.splitlines()
            for f in line.split()[3:4] if f.rsplit(":", 1)[-1].isdigit()}
    while True:
        port = random.randrange(20000, 30000)  # under the ephemeral range (32768+): never a pair's port
        if port not in used:
            return port


# ---- one rank: the hostname made the stable address, then the script ---------------------------
def _rank_main(argv: list[str]) -> None:
    import argparse
    import runpy

    p = argparse.ArgumentParser(prog="python -m clockfabric.lab.job")
    p.add_argument("--lab", required=True)
    p.add_argument("--hostname", required=True)
    p.add_argument("script")
    p.add_argument("args", nargs=argparse.REMAINDER)
    args = p.parse_args(argv)
    libc = ctypes.CDLL(None, use_errno=True)
    if libc.unshare(CLONE_NEWUTS) != 0:  # this process only: the machine's hostname stays
        err = ctypes.get_errno()
        sys.exit(f"clockfabric job: cannot make a UTS namespace: {os.strerror(err)} (needs root)")
    socket.sethostname(args.hostname)
    script = os.path.abspath(args.script)
    sys.argv = [args.script, *args.args]
    sys.path[0] = os.path.dirname(script)  # as `python SCRIPT` would have it
    runpy.run_path(script, run_name="__main__")


if __name__ == "__main__":
    _rank_main(sys.argv[1:])
