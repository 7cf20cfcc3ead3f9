"""`clockfabric bench spares-launchers`: a killed rank's replacement under each launcher, in one run.

The same job (examples/ddp_spares.py) on the same lab, launched several ways, each rank killed
(SIGKILL of its training process) once the ranks are past step KILL_AT and the spares wait:

- lab: `train run` on the lab's hosts (the coordinator starts the members in their namespaces);
- ssh: `train run --fleet` from a login node, every host reached over a real sshd;
- torchrun: `train coordinator` on the login node, each rank a torchrun started over ssh, its
  rendezvous on the coordinator's store, each spare a torchrun of its own told to wait;
- slurm: a Slurm cluster on the lab (slurmctld on the login node, a slurmd per rank and spare
  host; started once per bench run), `train coordinator` on the login node and one srun step
  of ranks + spares tasks, one per node; the tasks past the ranks are the spares.

Figures per way: failure -> next completed step (every rank having completed a step that
started after the kill), p50 and p95, each way against the lab's from the same run; and the
time split by phase from the coordinator's events and the members' records: detect (kill ->
detected), re-form (detected -> the new group formed), transfer (the state carried and the
model wrapped), first step (the rest, to the next completed step).
"""

from __future__ import annotations

import json
import os
import shlex
import signal
import statistics
import subprocess
import sys
import tempfile
import time
from contextlib import nullcontext
from pathlib import Path
from typing import Any

import typer

from clockfabric.bench.harness import BENCHMARKS, RESULTS, Target, labs_removed, machine, record, targets_table
from clockfabric.console import out, print_json, require_root
from clockfabric.errors import ClockfabricError
from clockfabric.lab import build, sshd
from clockfabric.lab.lldp import speaker
from clockfabric.lab.slurm import Cluster, no_slurm
from clockfabric.lab.sshd import SshLab
from clockfabric.lab.state import Lab
from clockfabric.lab.training import train_job
from clockfabric.topology import multirail
from clockfabric.train import control, report

SCRIPT = Path("examples") / "ddp_spares.py"
KILL_AT, VICTIM, PORT = 8, 1, 29500
WAYS = ("lab", "ssh", "torchrun", "slurm")
DEFAULT_WAYS = tuple(w for w in WAYS if w != "slurm" or not no_slurm)
# --kill-on-bad-exit=0: a killed task does not end the step's other tasks; --wait=0: nor does srun
# end them some time after the first one exits
SRUN = ["srun", "--ntasks-per-node=1", "--kill-on-bad-exit=0", "--wait=0"]
BAR_S = 3.0  # p95 failure -> next step


def layout(ranks: int, spares: int) -> tuple[list[str], list[str], str]:
    """(rank hosts, spare hosts, the login node): h0.. in that order."""
    hosts = [f"h{i}" for i in range(ranks + spares + 1)]
    return hosts[:ranks], hosts[ranks:ranks + spares], hosts[-1]


def wait_until(what: str, ready: Any, timeout_s: float) -> None:
    deadline = time.monotonic() + timeout_s
    while not ready():
        if time.monotonic() > deadline:
            raise ClockfabricError(f"timed out waiting for {what}")
        time.sleep(0.05)


def ranks_at(folder: Path, ranks: int, step: int) -> bool:
    steps = report.steps_by_rank(report.records(folder))
    return len(steps) == ranks and min(max(s) for s in steps.values()) >= step


def spares_waiting(logs: list[Path]) -> bool:
    """Each spare's torch imported and registered: the wrapper logs its `spare` event then."""
    return all(any(r.get("event") == "spare" for r in report.read_log(log)) for log in logs)


def worker_of(log: Path) -> int:
    """The training process writing `log`: a Python whose command line names it (not the
    torchrun agent, nor ssh, setsid or env on the way)."""
    for entry in Path("/proc").iterdir():
        if not entry.name.isdigit():
            continue
        try:
            argv = (entry / "cmdline").read_bytes().split(b"\0")
        except OSError:
            continue
        agent = any(a.endswith(b"/torchrun") or a == b"torch.distributed.run" for a in argv)
        python = Path(argv[0].decode(errors="replace")).name.startswith("python")
        if str(log).encode() in argv and python and not agent:
            return int(entry.name)
    raise ClockfabricError(f"no process writes {log}")


def events(folder: Path) -> list[dict[str, Any]]:
    path = folder / "events.jsonl"
    return [json.loads(line) for line in path.read_text().splitlines()] if path.exists() else []


def phases(folder: Path, killed_at: float) -> dict[str, float]:
    """failure -> next step, and its split: detect, re-form, transfer, first step."""
    recs, evs = report.records(folder), events(folder)
    detected = next(e for e in evs if e["event"] == "detected")
    resumed = next(e for e in evs if e["event"] == "resumed")
    joins = [r for r in recs if r.get("event") == "joined" and r.get("generation") == resumed["generation"]]
    next_step = report.recovery_s(recs, killed_at)
    if next_step is None:
        raise ClockfabricError(f"the job took no step after the kill; see {folder}")
    formed = max(r["time"] - r["transfer_s"] - r["wrap_s"] for r in joins)  # the group formed, last member
    carried = max(r["time"] for r in joins)
    return {"next_step_s": next_step, "detect_s": detected["time"] - killed_at,
            "reform_s": formed - detected["time"], "transfer_s": carried - formed,
            "first_step_s": killed_at + next_step - carried, "bytes": float(max(r["bytes"] for r in joins))}


def check(folder: Path, steps: int, reference: dict[int, str]) -> None:
    recs = report.records(folder)
    if report.job_steps(recs) != list(range(steps)):
        raise ClockfabricError(f"a completed step was lost; see {folder}")
    if report.digests(recs) != reference:
        raise ClockfabricError(f"the final parameters differ from the failure-free run's; see {folder}")


def kill_and_wait(folder: Path, proc: subprocess.Popen, ranks: int, spare_logs: list[Path],
                  timeout_s: float = 180) -> float:
    wait_until("the spares waiting", lambda: spares_waiting(spare_logs), timeout_s)
    wait_until("the ranks at the step to fail at", lambda: ranks_at(folder, ranks, KILL_AT), timeout_s)
    killed_at = time.time()
    os.kill(worker_of(folder / f"rank{VICTIM}.jsonl"), signal.SIGKILL)
    if proc.wait(timeout_s) != 0:
        raise ClockfabricError(f"the job did not complete; see {folder}")
    return killed_at


def lab_run(lab: Lab, ranks: list[str], spares: list[str], args: list[str], folder: Path) -> float:
    job = train_job(lab, ranks, spares, [str(SCRIPT), *args], folder).start()
    try:
        logs = [folder / f"spare-{h}.jsonl" for h in spares]
        wait_until("the spares waiting", lambda: spares_waiting(logs), 180)
        wait_until("the ranks at the step to fail at", lambda: ranks_at(folder, len(ranks), KILL_AT), 180)
        killed_at = time.time()
        victim = job.ranks[VICTIM].proc
        assert victim is not None  # started by the job
        victim.signal(signal.SIGKILL)
        if not job.wait(180):
            raise ClockfabricError(f"the job did not complete; see {folder}")
        return killed_at
    finally:
        job.stop()


def fleet_run(sl: SshLab, ranks: list[str], spares: list[str], args: list[str], folder: Path) -> float:
    """`train run --fleet` from the login node."""
    argv = [sys.executable, "-m", "clockfabric.cli", "train", "run", "--fleet", str(sl.fleet_file), "--hosts",
            ",".join([*ranks, *spares]), "--spares", str(len(spares)), "--dir", str(folder), "--no-watch-gpus",
            "--no-readmit", "--", str(SCRIPT.resolve()), *args]
    folder.mkdir(parents=True, exist_ok=True)
    with open(folder / "run.log", "wb") as log:
        proc = subprocess.Popen(sl.client(argv), stdout=log, stderr=subprocess.STDOUT)
    try:
        return kill_and_wait(folder, proc, len(ranks), [folder / f"spare-{h}.jsonl" for h in spares])
    finally:
        stop([proc])


def torchrun_run(sl: SshLab, ranks: list[str], spares: list[str], args: list[str], folder: Path) -> float:
    """`train coordinator` on the login node; each rank and spare a torchrun started over ssh."""
    import yaml

    login = str(sl.lab.topology.hosts[sl.client_host].address)
    folder.mkdir(parents=True, exist_ok=True)
    *env, python = str(yaml.safe_load(sl.fleet_file.read_text())["ssh"]["python"]).split()
    torchrun, board = str(Path(python).parent / "torchrun"), f"{control.STORE_ENV}=tcp://{login}:{PORT}"
    script = str(SCRIPT.resolve())
    with open(folder / "coordinator.log", "wb") as log:
        coordinator = subprocess.Popen(sl.client([sys.executable, "-m", "clockfabric.cli", "train", "coordinator",
                                                  "--ranks", str(len(ranks)), "--listen", f"{login}:{PORT}",
                                                  "--dir", str(folder)]), stdout=log, stderr=subprocess.STDOUT)
    members: list[subprocess.Popen] = []
    try:
        wait_until("the coordinator serving", lambda: b"serving" in (folder / "coordinator.log").read_bytes(), 60)
        for i, host in enumerate([*ranks, *spares]):
            spare = i >= len(ranks)
            how = ["--standalone"] if spare else ["--nnodes", str(len(ranks)), "--rdzv-backend", "c10d",
                                                  "--rdzv-endpoint", f"{login}:{PORT}", "--rdzv-id", "job"]
            log_file = folder / (f"spare-{host}.jsonl" if spare else f"rank{i}.jsonl")
            # torchrun's own logs in the run's folder: by default it makes a folder in /tmp and leaves it
            argv = [*env, board, *([f"{control.SPARE_ENV}=1"] if spare else []), torchrun, *how,
                    "--nproc-per-node", "1", "--max-restarts", "0", "--log-dir", str(folder / f"torchrun-{host}"),
                    script, *args, "--log-file", str(log_file)]
            with open(folder / f"{host}.log", "wb") as log:
                members.append(subprocess.Popen(sl.client([*sl.ssh_argv(host), *argv]), stdout=log,
                                                stderr=subprocess.STDOUT))
        return kill_and_wait(folder, coordinator, len(ranks), [folder / f"spare-{h}.jsonl" for h in spares])
    finally:
        stop([*members, coordinator])


class SlurmLab:
    """The Slurm cluster the slurm way runs on, with the LLDP its prolog's audit reads."""

    def __init__(self, lab: Lab, nodes: list[str], login: str):
        self.cluster = Cluster(lab, tuple(nodes), SCRIPT.resolve().parents[1], controller=login)
        self.lldp = speaker(lab)

    def __enter__(self) -> Cluster:
        self.lldp.start()
        try:
            self.cluster.start()
        except BaseException:
            self.__exit__()
            raise
        return self.cluster

    def __exit__(self, *_: object) -> None:
        try:
            self.cluster.stop()
        finally:
            self.lldp.stop()


def member_script(cluster: Cluster, args: list[str], folder: Path) -> Path:
    """What each srun task runs: the script through lab.job, whose hostname (in a UTS namespace
    of its own) is its node's stable address, so gloo binds there (a task shares only its host's
    network namespace, and the machine's hostname resolves to no lab address); its log named
    as the other ways name them: rank{SLURM_PROCID} for a rank, spare-{node} past the ranks."""
    lab = cluster.lab
    cases = "".join(f"  {h}) a={lab.topology.hosts[h].address} ;;\n" for h in cluster.hosts)
    path = folder / "member.sh"
    path.write_text(f"#!/bin/sh\ncase \"$SLURMD_NODENAME\" in\n{cases}  *) exit 2 ;;\nesac\n"
                    f"if [ \"$SLURM_PROCID\" -lt \"${control.RANKS_ENV}\" ]; then\n"
                    f"  log={folder}/rank$SLURM_PROCID.jsonl\nelse\n  log={folder}/spare-$SLURMD_NODENAME.jsonl\nfi\n"
                    f"exec {sys.executable} -m clockfabric.lab.job --lab {lab.name} --hostname $a -- "
                    f"{shlex.join([str(SCRIPT.resolve()), *args])} --log-file \"$log\"\n")
    path.chmod(0o755)
    return path


def slurm_run(cluster: Cluster, login: str, ranks: list[str], spares: list[str], args: list[str],
              folder: Path) -> float:
    """`train coordinator` on the login node; the ranks and spares one srun step, a task per node."""
    address = str(cluster.lab.topology.hosts[login].address)
    folder.mkdir(parents=True, exist_ok=True)
    with open(folder / "coordinator.log", "wb") as log:
        coordinator = subprocess.Popen(cluster.on(login, [
            sys.executable, "-m", "clockfabric.cli", "train", "coordinator", "--ranks", str(len(ranks)),
            "--listen", f"{address}:{PORT}", "--dir", str(folder)]), stdout=log, stderr=subprocess.STDOUT,
            env=cluster.env)
    members: list[subprocess.Popen] = []
    try:
        wait_until("the coordinator serving", lambda: b"serving" in (folder / "coordinator.log").read_bytes(), 60)
        nodes = len(ranks) + len(spares)
        env = {**cluster.env, control.STORE_ENV: f"tcp://{address}:{PORT}", control.RANKS_ENV: str(len(ranks))}
        with open(folder / "srun.log", "wb") as log:
            members.append(subprocess.Popen(cluster.on(login, [
                *SRUN, f"-N{nodes}", f"-n{nodes}", "-o", str(folder / "task-%t.out"),
                str(member_script(cluster, args, folder))]), stdout=log, stderr=subprocess.STDOUT, env=env))
        killed_at = kill_and_wait(folder, coordinator, len(ranks), [folder / f"spare-{h}.jsonl" for h in spares])
        try:  # the tasks end once the job completed (a spare: once the board is gone), and srun with them
            members[0].wait(60)
        except subprocess.TimeoutExpired:
            pass
        return killed_at
    finally:
        stop([*members, coordinator])


def stop(procs: list[subprocess.Popen]) -> None:
    for p in procs:
        if p.poll() is None:
            p.send_signal(signal.SIGTERM)
    for p in procs:
        try:
            p.wait(15)
        except subprocess.TimeoutExpired:
            p.kill()
            p.wait()


def summarise(rows: list[dict[str, float]]) -> dict[str, float]:
    nexts = sorted(r["next_step_s"] for r in rows)
    p95 = nexts[min(len(nexts) - 1, round(0.95 * (len(nexts) - 1)))]
    split = {k: statistics.median(r[k] for r in rows) for k in ("detect_s", "reform_s", "transfer_s", "first_step_s")}
    return {"p50_s": statistics.median(nexts), "p95_s": p95, "runs": float(len(rows)), **split,
            "bytes": rows[0]["bytes"]}


@BENCHMARKS.register("spares-launchers")
def main(runs: int = typer.Option(3, min=1, help="Kills per way."),
         ranks: int = typer.Option(4, min=2, help="The job's ranks."),
         spares: int = typer.Option(2, min=1, help="Spares waiting."),
         steps: int = typer.Option(60, min=KILL_AT + 10, help="Training steps per run."),
         width: int = typer.Option(512, min=8, help="The MLP's hidden width (512: about 5 MB of state)."),
         ways: str = typer.Option(",".join(DEFAULT_WAYS),
                                  help=f"Ways to launch, comma-separated, of: {', '.join(WAYS)} "
                                       "(slurm by default where Slurm is installed)."),
         json_path: Path = typer.Option(RESULTS / "spares-launchers.json", "--out", help="Where the record goes."),
         as_json: bool = typer.Option(False, "--json", help="Print the report as JSON.")) -> None:
    require_root()
    if not SCRIPT.is_file():
        raise ClockfabricError(f"run from the repository root: {SCRIPT} is not here")
    chosen = [w.strip() for w in ways.split(",") if w.strip()]
    if not chosen or set(chosen) - set(WAYS) or "lab" not in chosen:
        raise ClockfabricError(f"--ways takes lab and some of: {', '.join(WAYS[1:])} (lab is the baseline)")
    if "slurm" in chosen and no_slurm:
        raise ClockfabricError(f"--ways slurm: {no_slurm}")
    args = ["--steps", str(steps), "--timeout", "30", "--width", str(width)]
    on, off, login = layout(ranks, spares)
    facts, name = machine(), f"launchers-bench-{os.getpid() % 10000}"
    rows: dict[str, list[dict[str, float]]] = {w: [] for w in chosen}
    with labs_removed(name), tempfile.TemporaryDirectory(prefix="launchers-bench-") as tmp:
        lab = build.up(multirail(ranks + spares + 1, 1, 2, 2, name="launchers-bench"), name)
        reference_dir = Path(tmp) / "reference"
        job = train_job(lab, on, [], [str(SCRIPT), *args], reference_dir).start()
        try:
            if not job.wait(300):
                raise ClockfabricError(f"the failure-free run did not complete; see {reference_dir}")
        finally:
            job.stop()
        reference = report.digests(report.records(reference_dir))
        sl = sshd.start(lab, Path(tmp) / "ssh", client_host=login)
        try:
            with SlurmLab(lab, on + off, login) if "slurm" in chosen else nullcontext() as cluster:

                def launch(way: str, folder: Path) -> float:
                    if way == "slurm":
                        assert cluster is not None  # started above when slurm is among the ways
                        return slurm_run(cluster, login, on, off, args, folder)
                    return (lab_run(lab, on, off, args, folder) if way == "lab" else
                            fleet_run(sl, on, off, args, folder) if way == "ssh" else
                            torchrun_run(sl, on, off, args, folder))

                for i in range(runs):
                    for way in chosen:  # the ways interleaved: the machine's drift falls on all alike
                        folder = Path(tmp) / f"{way}{i}"
                        killed_at = launch(way, folder)
                        check(folder, steps, reference)
                        rows[way].append(phases(folder, killed_at))
                        r = rows[way][-1]
                        out.print(f"{way} {i}: next step {r['next_step_s']:.2f} s (detect {r['detect_s']:.2f}, "
                                  f"re-form {r['reform_s']:.2f}, transfer {r['transfer_s']:.2f}, "
                                  f"first step {r['first_step_s']:.2f}; {r['bytes'] / 1e6:.1f} MB)")
        finally:
            sl.stop()
    result: dict[str, Any] = {"ways": {w: summarise(rs) for w, rs in rows.items()}, "runs": rows,
                              "ranks": ranks, "spares": spares, "steps": steps, "width": width}
    lab_p95 = result["ways"]["lab"]["p95_s"]
    targets = [Target(f"{w}: failure -> next step, p95", s["p95_s"], BAR_S, unit="s", better="lower",
                      baseline=lab_p95 if w != "lab" else None,
                      note=f"p50 {s['p50_s']:.2f} s; detect {s['detect_s']:.2f}, re-form {s['reform_s']:.2f}, "
                           f"transfer {s['transfer_s']:.2f}, first step {s['first_step_s']:.2f} s (medians); "
                           f"{s['bytes'] / 1e6:.1f} MB carried; {int(s['runs'])} kills")
               for w, s in result["ways"].items()]
    record("spares-launchers", targets, facts, result, path=json_path)
    if as_json:
        print_json(result)
        return
    out.print(targets_table("spares-launchers", targets))
