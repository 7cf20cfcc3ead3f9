"""Spares under srun, on a real Slurm cluster of lab hosts: 3 ranks and a spare node in one step,
`clockfabric train coordinator --slurm --fleet` on the controller's host. A rank's task is killed;
the spare takes its index with no completed step lost, the parameters bit-equal to a
failure-free run, and the lost node is drained in Slurm with the reason, then resumed once its
audit over ssh passes."""

from __future__ import annotations

import os
import re
import signal
import subprocess
import sys
import threading
import time
from pathlib import Path

import pytest

from clockfabric.lab import netns, process, sshd
from clockfabric.lab.lldp import speaker
from clockfabric.lab.slurm import CTLD, Cluster, no_slurm
from clockfabric.topology import multirail
from clockfabric.train import report
from tests.waiting import wait_for

pytest.importorskip("torch", reason="torch is not installed (make setup installs the job extra)")
pytestmark = pytest.mark.skipif(bool(no_slurm) or not os.path.exists(sshd.SSHD), reason=no_slurm or "no sshd")

ROOT = Path(__file__).resolve().parents[2]
HOSTS = ("h0", "h1", "h2", "h3")
RANKS = 3
STEPS = 300  # long enough that the lost node's audit passes while the job still runs
KILL_AT = 20
PORT = 29400
SCRIPT = ROOT / "examples" / "ddp_spares.py"
# --kill-on-bad-exit=0: a task that dies (SIGKILL here) does not end the step's other tasks;
# --wait=0: nor does srun end them some time after the first one exits
SRUN = ["srun", "--kill-on-bad-exit=0", "--wait=0", "--ntasks-per-node=1"]


@pytest.fixture
def cluster(make_lab, tmp_path):
    lab = make_lab(multirail(hosts=len(HOSTS), planes=1, leaves=1, spines=1))
    found = Cluster(lab, HOSTS, ROOT)
    lldp = speaker(lab)  # the prolog's audit reads the switches' LLDP, as on real ones
    lldp.start()
    ssh = None
    try:
        found.start()
        ssh = sshd.start(lab, tmp_path / "ssh", client_host=CTLD)
        found.ssh = ssh
        yield found
    finally:
        if ssh:
            ssh.stop()
        found.stop()
        lldp.stop()


def member_script(cluster: Cluster, folder: Path) -> Path:
    """What each srun task runs. slurmd shares only the host's network namespace, so a task's
    hostname is the machine's, which resolves to no lab address; gloo binds to the address the
    hostname resolves to (GLOO_SOCKET_IFNAME would take an interface's first address: 127.0.0.1
    on lo, or a NIC's, lost when that NIC goes down). So each task goes through lab.job, which
    sets its hostname, in a UTS namespace of its own, to its node's stable address (on lo): gloo
    and the heartbeats bind there, and the member's name is still SLURMD_NODENAME."""
    cases = "".join(f"  {h}) a={cluster.lab.topology.hosts[h].address} ;;\n" for h in HOSTS)
    path = folder / "member.sh"
    path.write_text(f"#!/bin/sh\ncase \"$SLURMD_NODENAME\" in\n{cases}  *) exit 2 ;;\nesac\n"
                    f"exec {sys.executable} -m clockfabric.lab.job --lab {cluster.lab.name} --hostname $a -- "
                    f"{SCRIPT} --steps {STEPS} --timeout 30 --width 256 --log {folder}/$SLURMD_NODENAME.jsonl\n")
    path.chmod(0o755)
    return path


class Run:
    """The coordinator on the controller's host, and one srun step of the members."""

    def __init__(self, cluster: Cluster, folder: Path, nodes: int):
        folder.mkdir(parents=True)
        self.cluster, self.folder = cluster, folder
        address = cluster.lab.topology.hosts[CTLD].address
        env = {**cluster.env, "PYTHONPATH": str(ROOT / "src"), "PYTHONUNBUFFERED": "1"}
        self.coordinator = process.spawn(cluster.on(CTLD, [
            sys.executable, "-m", "clockfabric.cli", "train", "coordinator", "--ranks", str(RANKS),
            "--listen", f"{address}:{PORT}", "--dir", str(folder), "--slurm", "--fleet", str(cluster.ssh.fleet_file),
            "--start-timeout", "120", "--timeout", "300"]), log=folder / "coordinator.out", env=env)
        member = {**env, "CLOCKFABRIC_TRAIN_STORE": f"tcp://{address}:{PORT}", "CLOCKFABRIC_TRAIN_RANKS": str(RANKS)}
        self.command = [*SRUN, f"-N{nodes}", f"-n{nodes}", "-o", str(folder / "task-%t.out"),
                        str(member_script(cluster, folder))]
        self.srun = process.spawn(cluster.on(CTLD, self.command), log=folder / "srun.out", env=member)

    def events(self) -> list[dict]:
        return report.read_log(self.folder / "events.jsonl")

    def wait(self, timeout_s: float = 300) -> None:
        try:
            code = self.coordinator.wait(timeout_s)
            self.srun.wait(60)  # the members end once the job completed (a spare: once the board is gone)
        finally:
            process.stop([self.srun, self.coordinator])
        assert code == 0, ((self.folder / "coordinator.out").read_text()[-3000:],
                           [p.read_text()[-1500:] for p in self.folder.glob("task-*.out")])


def task_pid(cluster: Cluster, host: str) -> int:
    """The training process srun started on host, found through the host's namespace."""
    for pid in netns.pids(cluster.lab.ns(host)):
        try:
            argv = Path(f"/proc/{pid}/cmdline").read_bytes().split(b"\0")
        except OSError:
            continue
        if b"clockfabric.lab.job" in argv and str(SCRIPT).encode() in argv:
            return pid
    raise AssertionError(f"no training task on {host}")


class NodeStates(threading.Thread):
    """(time, state, reason) of a node each time it changes, as slurmctld tells it."""

    def __init__(self, cluster: Cluster, node: str):
        super().__init__(daemon=True)
        self.cluster, self.node, self.seen = cluster, node, []
        self.stopping = threading.Event()

    def run(self) -> None:
        while not self.stopping.wait(0.3):
            try:
                shown = self.cluster.run("scontrol", "show", "node", self.node)
            except subprocess.SubprocessError:
                continue
            state = re.search(r"State=(\S+)", shown)
            reason = re.search(r"Reason=(.*?)(?: \[|$)", shown, re.M)
            now = (state.group(1) if state else "", reason.group(1).strip() if reason else "")
            if not self.seen or self.seen[-1][1:] != now:
                self.seen.append((time.time(), *now))

    def stop(self) -> None:
        self.stopping.set()
        self.join(35)


def test_a_killed_task_is_replaced_by_the_spare_node_which_slurm_drains_and_resumes(cluster, tmp_path, failure_free):
    digests = failure_free([str(SCRIPT), "--steps", str(STEPS), "--timeout", "30", "--width", "256"])

    run = Run(cluster, tmp_path / "killed", len(HOSTS))
    deadline = time.monotonic() + 180
    while True:  # every rank past KILL_AT, and the spare waiting with torch loaded
        recs = report.records(run.folder)
        steps = report.steps_by_rank(recs)
        if len(steps) == RANKS and min(max(s) for s in steps.values()) >= KILL_AT \
                and any(r.get("event") == "spare" for r in recs):
            break
        assert time.monotonic() < deadline and run.coordinator.poll() is None, run.events()
        time.sleep(0.1)
    started = next(e for e in run.events() if e["event"] == "started")
    victim = started["hosts"][1]
    states = NodeStates(cluster, victim)
    states.start()
    killed_at = time.time()
    os.kill(task_pid(cluster, victim), signal.SIGKILL)
    try:
        run.wait()
    finally:
        states.stop()
    events = run.events()
    kinds = [e["event"] for e in events]
    recs = report.records(run.folder)

    # the spare took the lost rank's index; no completed step lost; bit-equal to the failure-free run
    spare = next(h for h in HOSTS if h not in started["hosts"])
    chosen = next(e for e in events if e["event"] == "spare chosen")
    assert (chosen["rank"], chosen["host"]) == (1, spare), events
    assert kinds.index("detected") < kinds.index("spare chosen") < kinds.index("resumed") < kinds.index("completed")
    assert report.job_steps(recs) == list(range(STEPS)), "a completed step was lost"
    assert report.digests(recs) == digests

    # drained in Slurm with the reason, then resumed once its audit over ssh passed
    detected = next(e for e in events if e["event"] == "detected")
    drained = next(e for e in events if e["event"] == "slurm drained")
    passed = next(e for e in events if e["event"] == "audit passed")
    resumed = next(e for e in events if e["event"] == "slurm resumed")
    assert drained["node"] == resumed["node"] == victim and passed["host"] == victim
    assert drained["reason"] == f"clockfabric: {detected['why']}"[:200]
    assert drained["time"] < passed["time"] < resumed["time"]
    assert "slurm failed" not in kinds, events
    reasons = {reason for _, state, reason in states.seen if "DRAIN" in state}
    assert drained["reason"] in reasons, states.seen  # as slurmctld showed it
    assert "DRAIN" not in states.seen[-1][1], states.seen
    # back in service: idle, once slurmd has finished the killed step's clean-up (COMPLETING)
    wait_for(f"{victim} idle in Slurm", lambda: cluster.states()[victim] == "idle", timeout_s=30, every_s=0.5)
    print(f"\nsrun: {' '.join(run.command[:-1])} member.sh\nkill -> detected {detected['time'] - killed_at:.2f} s, "
          f"-> drained in Slurm {drained['time'] - killed_at:.2f} s, -> job resumed "
          f"{next(e for e in events if e['event'] == 'resumed')['time'] - killed_at:.2f} s, -> audit passed "
          f"{passed['time'] - killed_at:.2f} s, -> node resumed {resumed['time'] - killed_at:.2f} s; "
          f"node states {[(round(t - killed_at, 1), s) for t, s, _ in states.seen]}")
