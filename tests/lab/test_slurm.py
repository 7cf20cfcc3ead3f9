"""Slurm for real on a lab: slurmctld in h0's namespace, one slurmd per host in its own, the
shipped prolog auditing each node. A host with a planted MTU mismatch is drained with the
audit's reason before any step runs on it, and the job is requeued and runs on healthy hosts,
whose processes carry the Slurm job id that workload monitoring names jobs by."""

from __future__ import annotations

import os
import re
import secrets
import shutil
import socket
import statistics
import subprocess
import sys
import time
from pathlib import Path

import pytest

from clockfabric.lab import netns, process
from clockfabric.lab.lldp import speaker
from clockfabric.lab.naming import netns_prefix
from clockfabric.topology import multirail
from clockfabric.workload.jobs import identify, parse_environ

ROOT = Path(__file__).resolve().parents[2]
DAEMONS = ("munged", "slurmctld", "slurmd", "sbatch", "scontrol")
missing = [d for d in DAEMONS if shutil.which(d) is None and not Path("/usr/sbin", d).exists()]
pytestmark = pytest.mark.skipif(bool(missing), reason=f"Slurm not installed (no {', '.join(missing)}): "
                                                      "apt-get install slurmctld slurmd slurm-client munge")
HOSTS = ("h0", "h1", "h2")
FAULTY = "h1"  # the lowest hosts are allocated first: h0 and h1 get the job before the fault is found
CTLD = "h0"
# The target is 2 s a healthy prolog, judged by `bench slurm-prolog`; here two prologs run at once
# beside slurmctld, the slurmds and whatever else loads the machine (1.4-1.7 s measured), so the
# test prints the figures and bounds them only against a prolog that waits out a timeout.
PROLOG_BOUND_S = 10.0


def slurm_conf(lab, folder: Path) -> str:
    addresses = {h: lab.topology.hosts[h].address for h in HOSTS}
    nodes = "\n".join(f"NodeName={h} NodeAddr={a} CPUs=1 RealMemory=100 State=UNKNOWN" for h, a in addresses.items())
    return f"""ClusterName=lab
SlurmctldHost={socket.gethostname().split('.')[0]}({addresses[CTLD]})
SlurmUser=root
SlurmdUser=root
AuthType=auth/munge
AuthInfo=socket={folder}/munge/munge.socket,cred_expire=10
CredType=cred/munge
StateSaveLocation={folder}/state/ctld
SlurmdSpoolDir={folder}/state/%n
SlurmctldPidFile={folder}/state/slurmctld.pid
SlurmdPidFile={folder}/state/slurmd-%n.pid
SlurmctldLogFile={folder}/log/slurmctld.log
SlurmdLogFile={folder}/log/slurmd-%n.log
ProctrackType=proctrack/linuxproc
TaskPlugin=task/none
JobAcctGatherType=jobacct_gather/none
AccountingStorageType=accounting_storage/none
MpiDefault=none
SelectType=select/cons_tres
SchedulerParameters=nohold_on_prolog_fail
ReturnToService=2
Prolog={ROOT}/deploy/slurm/prolog
Epilog={ROOT}/deploy/slurm/epilog
PrologFlags=Alloc
PrologEpilogTimeout=60
{nodes}
PartitionName=lab Nodes={','.join(HOSTS)} Default=YES MaxTime=INFINITE State=UP
"""


def settings(lab, folder: Path) -> str:
    """clockfabric.conf: the CLI under test, the lab's topology as the fleet file, hosts reached
    through their namespaces with this interpreter's environment."""
    cli = folder / "clockfabric"
    cli.write_text(f"#!/bin/sh\nPYTHONPATH={ROOT / 'src'} exec {sys.executable} -m clockfabric.cli \"$@\"\n")
    cli.chmod(0o755)
    via = (f"ip netns exec {netns_prefix(lab.name)}{{host}} env "
           f"PATH={Path(sys.executable).parent}:/usr/bin:/bin PYTHONPATH={ROOT / 'src'}")
    return (f"CLOCKFABRIC={cli}\nFLEET={lab.dir / 'topology.yaml'}\nAUDIT_ARGS=--via '{via}'\n"
            f"LOG={folder / 'log' / 'node-audit.log'}\nTIMEOUT_S=30\n")


class Cluster:
    """munged, slurmctld and the slurmds of a lab; everything under the lab's folder."""

    def __init__(self, lab):
        self.lab, self.dir = lab, lab.dir / "slurm"
        self.procs: list[subprocess.Popen] = []
        for sub in ("munge", "log", "state/ctld", *(f"state/{h}" for h in HOSTS)):
            (self.dir / sub).mkdir(parents=True, exist_ok=True)
        key = self.dir / "munge" / "munge.key"
        key.write_bytes(secrets.token_bytes(1024))
        key.chmod(0o400)
        (self.dir / "slurm.conf").write_text(slurm_conf(lab, self.dir))
        (self.dir / "clockfabric.conf").write_text(settings(lab, self.dir))
        self.env = {**os.environ, "SLURM_CONF": str(self.dir / "slurm.conf")}

    def start(self) -> None:
        m = self.dir / "munge"
        self.procs.append(process.spawn(["munged", "--foreground", "--force", f"--key-file={m}/munge.key",
                                         f"--socket={m}/munge.socket", f"--pid-file={m}/munged.pid",
                                         f"--seed-file={m}/seed", f"--log-file={self.dir}/log/munged.log"],
                                        log=self.dir / "log" / "munged.out"))
        self.wait(lambda: (m / "munge.socket").exists(), "munged's socket")
        self.procs.append(process.spawn(self.on(CTLD, ["slurmctld", "-D", "-f", str(self.dir / "slurm.conf")]),
                                        log=self.dir / "log" / "slurmctld.out", env=self.env))
        for h in HOSTS:
            # the network namespace only: `ip netns exec` would hide /sys/fs/cgroup, which slurmd needs;
            # the audit reads each host's own sysfs through its --via
            self.procs.append(process.spawn(["nsenter", f"--net=/run/netns/{self.lab.ns(h)}", "slurmd", "-D",
                                             "-N", h, "-f", str(self.dir / "slurm.conf")],
                                            log=self.dir / "log" / f"slurmd-{h}.out", env=self.env))
        self.wait(lambda: self.states() == dict.fromkeys(HOSTS, "idle"), "every node idle")

    def stop(self) -> None:
        process.stop(reversed(self.procs), grace_s=5)

    def on(self, host: str, argv: list[str]) -> list[str]:
        return ["ip", "netns", "exec", self.lab.ns(host), *argv]

    def run(self, *argv: str) -> str:
        return subprocess.run(self.on(CTLD, list(argv)), capture_output=True, text=True, check=True,
                              env=self.env, timeout=30).stdout

    def states(self) -> dict[str, str]:
        try:
            lines = self.run("sinfo", "-N", "-h", "-o", "%N %T").split("\n")
        except subprocess.CalledProcessError:
            return {}
        return dict(line.split() for line in lines if line.strip())

    def job(self, jobid: str) -> dict[str, str]:
        return dict(re.findall(r"(\w+)=(\S*)", self.run("scontrol", "show", "job", jobid)))

    def wait(self, ready, what: str, timeout_s: float = 60) -> None:
        deadline = time.monotonic() + timeout_s
        while not ready():
            dead = [p.args[0] for p in self.procs if p.poll() is not None]
            assert not dead and time.monotonic() < deadline, f"no {what}; exited: {dead}; logs in {self.dir}/log"
            time.sleep(0.3)


@pytest.fixture
def cluster(make_lab):
    lab = make_lab(multirail(hosts=len(HOSTS), planes=1, leaves=1, spines=1))
    found = Cluster(lab)
    lldp = speaker(lab)  # the lab's switches announce themselves, as real ones do
    lldp.start()
    try:
        found.start()
        yield found
    finally:
        found.stop()
        lldp.stop()


def prolog_seconds(log: str) -> dict[str, list[float]]:
    """Each healthy prolog's own measure of itself, by host."""
    out: dict[str, list[float]] = {}
    for host, seconds in re.findall(r"prolog on (\w+) \(job \d+\): passes.*\[([\d.]+) s\]", log):
        out.setdefault(host, []).append(float(seconds))
    return out


def test_a_faulty_node_is_drained_and_the_job_runs_on_healthy_ones(cluster):
    with netns.ipr(cluster.lab.ns(FAULTY)) as ipr:
        ipr.link("set", index=ipr.link_lookup(ifname="eth0")[0], mtu=9000)  # the fabric runs 1500
    out = cluster.dir / "job"
    out.mkdir()
    script = cluster.dir / "job.sh"
    script.write_text(f"#!/bin/sh\nsrun sh -c 'cat /proc/$$/environ > {out}/environ-$SLURMD_NODENAME'\n")
    started = time.monotonic()
    jobid = cluster.run("sbatch", "--parsable", "-N2", "-o", str(out / "slurm-%j.out"), str(script)).strip()
    cluster.wait(lambda: cluster.job(jobid).get("JobState") == "COMPLETED", f"job {jobid} completed", 120)
    job = cluster.job(jobid)
    log = (cluster.dir / "log" / "node-audit.log").read_text()
    assert job["NodeList"] == "h[0,2]" and job["Restarts"] == "1", (job, log)
    reason = cluster.run("sinfo", "-N", "-h", "-n", FAULTY, "-o", "%T|%E").strip()
    assert reason == "drained|clockfabric audit: frontend.mtu eth0: MTU 9000; plane 0 uses 1500", log
    assert cluster.states() == {"h0": "idle", FAULTY: "drained", "h2": "idle"}
    # no step ever ran on the faulty node; each step on a healthy one carries the job id
    assert sorted(p.name for p in out.glob("environ-*")) == ["environ-h0", "environ-h2"]
    for path in out.glob("environ-*"):
        tag = identify(parse_environ(path.read_bytes()))
        assert tag is not None and (tag.jobid, tag.source) == (f"slurm:{jobid}", "slurm")
    seconds = prolog_seconds(log)
    healthy = [s for host in ("h0", "h2") for s in seconds.get(host, [])]
    print(f"\njob {jobid} done in {time.monotonic() - started:.1f} s; healthy prologs took {healthy} s")
    assert len(healthy) >= 3  # h0 before and after the requeue, h2 after
    assert statistics.median(healthy) <= PROLOG_BOUND_S, log
