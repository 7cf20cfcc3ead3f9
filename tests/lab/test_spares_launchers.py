"""Spares off the lab: lab hosts reached only as real hosts are (a real sshd in each, a fleet
file with addresses), the job launched by torchrun and by `clockfabric train run --fleet`.
Nothing on the product's side is handed a lab: the coordinator runs on a login node (h4's
namespace) and reaches the others over ssh; a killed rank's place goes to a spare, no
completed step lost, the parameters bit-equal to a failure-free run."""

from __future__ import annotations

import json
import os
import signal
import subprocess
import sys
import time
from pathlib import Path

import pytest

from clockfabric.lab import sshd
from clockfabric.lab.training import train_job
from clockfabric.topology import multirail
from clockfabric.train import control, report
from tests.waiting import wait_for

pytest.importorskip("torch", reason="torch is not installed (make setup installs the job extra)")

ROOT = Path(__file__).resolve().parents[2]
SCRIPT = ROOT / "examples" / "ddp_spares.py"
STEPS, KILL_AT = 60, 8  # steps enough that a spare still importing torch is ready in time
ARGS = ["--steps", str(STEPS), "--timeout", "30", "--width", "256"]
RANKS, SPARE, LOGIN = ["h0", "h1", "h2"], "h3", "h4"
PORT = 29500


@pytest.fixture(scope="module")
def fleet(make_module_lab, tmp_path_factory):
    lab = make_module_lab(multirail(5, 1, 1, 0))
    folder = tmp_path_factory.mktemp("fleet")
    reference = folder / "reference"
    job = train_job(lab, RANKS, [], [str(SCRIPT), *ARGS], reference).start()
    try:
        assert job.wait(120), job.events
    finally:
        job.stop()
    digests = report.digests(report.records(reference))
    assert sorted(digests) == [0, 1, 2] and len(set(digests.values())) == 1
    sl = sshd.start(lab, folder / "ssh", client_host=LOGIN)
    try:
        yield lab, sl, digests
    finally:
        sl.stop()


def python_command(sl) -> list[str]:
    """How the fleet file runs Python on the hosts (this venv's, with this checkout's PYTHONPATH)."""
    import yaml

    return str(yaml.safe_load(sl.fleet_file.read_text())["ssh"]["python"]).split()


def ranks_at(folder: Path, step: int) -> bool:
    steps = report.steps_by_rank(report.records(folder))
    return len(steps) == len(RANKS) and min(max(s) for s in steps.values()) >= step


def spare_waiting(log: Path) -> bool:
    """Its torch imported and registered: the elastic wrapper logs the `spare` event then."""
    return any(r.get("event") == "spare" for r in report.read_log(log))


def worker_of(log: Path) -> int:
    """The training process writing `log` (not the torchrun agent whose command line names it too)."""
    for entry in Path("/proc").iterdir():
        if not entry.name.isdigit():
            continue
        try:
            argv = (entry / "cmdline").read_bytes().split(b"\0")
        except OSError:
            continue
        agent = any(a.endswith(b"/torchrun") or a == b"torch.distributed.run" for a in argv)
        python = Path(argv[0].decode(errors="replace")).name.startswith("python")  # not ssh, setsid or env
        if str(log).encode() in argv and python and not agent:
            return int(entry.name)
    raise AssertionError(f"no process writes {log}")


def events(folder: Path) -> list[dict]:
    return [json.loads(line) for line in (folder / "events.jsonl").read_text().splitlines()]


def check(folder: Path, digests: dict[int, str], killed_at: float) -> dict[str, float]:
    recs = report.records(folder)
    assert report.job_steps(recs) == list(range(STEPS)), "a completed step was lost"
    assert report.digests(recs) == digests  # bit-equal to the failure-free run
    kinds = [e["event"] for e in events(folder)]
    assert kinds.index("detected") < kinds.index("spare chosen") < kinds.index("resumed") < kinds.index("completed")
    chosen = next(e for e in events(folder) if e["event"] == "spare chosen")
    assert chosen["rank"] == 1
    took = report.recovery_s(recs, killed_at)
    assert took is not None and took < 10, took
    return {"next_step_s": took}


def test_torchrun_ranks_and_a_waiting_spare_over_ssh(fleet, tmp_path):
    lab, sl, digests = fleet
    login = str(lab.topology.hosts[LOGIN].address)
    board = f"tcp://{login}:{PORT}"
    coordinator = subprocess.Popen(sl.client([sys.executable, "-m", "clockfabric.cli", "train", "coordinator",
                                              "--ranks", "3", "--listen", f"{login}:{PORT}", "--dir", str(tmp_path)]),
                                   stdout=open(tmp_path / "coordinator.out", "wb"), stderr=subprocess.STDOUT)
    *env, python = python_command(sl)
    torchrun = str(Path(python).parent / "torchrun")
    members = []
    try:
        wait_for("the coordinator serving", lambda: b"serving" in (tmp_path / "coordinator.out").read_bytes(), 30)
        for rank, host in enumerate(RANKS):
            argv = [*env, f"{control.STORE_ENV}={board}", torchrun, "--nnodes", "3", "--nproc-per-node", "1",
                    "--rdzv-backend", "c10d", "--rdzv-endpoint", f"{login}:{PORT}", "--rdzv-id", "job",
                    "--max-restarts", "0", str(SCRIPT), *ARGS, "--log-file", str(tmp_path / f"rank{rank}.jsonl")]
            members.append(subprocess.Popen(sl.client([*sl.ssh_argv(host), *argv]),
                                            stdout=open(tmp_path / f"{host}.out", "wb"), stderr=subprocess.STDOUT))
        spare = [*env, f"{control.STORE_ENV}={board}", f"{control.SPARE_ENV}=1", torchrun, "--standalone",
                 "--nproc-per-node", "1", str(SCRIPT), *ARGS, "--log-file", str(tmp_path / "spare.jsonl")]
        members.append(subprocess.Popen(sl.client([*sl.ssh_argv(SPARE), *spare]),
                                        stdout=open(tmp_path / f"{SPARE}.out", "wb"), stderr=subprocess.STDOUT))
        wait_for("the ranks at the step to fail at", lambda: ranks_at(tmp_path, KILL_AT), 120)
        wait_for("the spare waiting", lambda: spare_waiting(tmp_path / "spare.jsonl"), 60)
        killed_at = time.time()
        os.kill(worker_of(tmp_path / "rank1.jsonl"), signal.SIGKILL)
        assert coordinator.wait(120) == 0, (tmp_path / "coordinator.out").read_text()[-2000:]
        figures = check(tmp_path, digests, killed_at)
        detected = next(e for e in events(tmp_path) if e["event"] == "detected")
        assert "connection to the coordinator closed" in detected["why"]  # presence: known at once
        assert detected["time"] - killed_at < 1.0
        print(f"torchrun: {figures}")
    finally:
        for p in [*members, coordinator]:
            if p.poll() is None:
                p.send_signal(signal.SIGTERM)
        for p in [*members, coordinator]:
            try:
                p.wait(10)
            except subprocess.TimeoutExpired:
                p.kill()
                p.wait()


def test_train_run_over_ssh_from_a_fleet_file(fleet, tmp_path):
    lab, sl, digests = fleet
    run = subprocess.Popen(sl.client([sys.executable, "-m", "clockfabric.cli", "train", "run", "--fleet",
                                      str(sl.fleet_file), "--hosts", ",".join([*RANKS, SPARE]), "--spares", "1",
                                      "--dir", str(tmp_path), "--no-watch-gpus", "--no-readmit", "--",
                                      str(SCRIPT), *ARGS]),
                           stdout=open(tmp_path / "run.log", "wb"), stderr=subprocess.STDOUT)
    try:
        wait_for("the ranks at the step to fail at", lambda: ranks_at(tmp_path, KILL_AT), 120)
        wait_for("the spare waiting", lambda: spare_waiting(tmp_path / f"spare-{SPARE}.jsonl"), 60)
        killed_at = time.time()
        os.kill(worker_of(tmp_path / "rank1.jsonl"), signal.SIGKILL)
        assert run.wait(120) == 0, (tmp_path / "run.log").read_text()[-2000:]
        figures = check(tmp_path, digests, killed_at)
        print(f"ssh: {figures}")
    finally:
        if run.poll() is None:
            run.send_signal(signal.SIGTERM)
            run.wait(20)
