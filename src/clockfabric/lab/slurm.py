"""A real Slurm cluster on a lab: munged, slurmctld in one host's namespace (h0's unless told),
one slurmd per host in its own, the shipped prolog (deploy/slurm/prolog of a repository
checkout) auditing each node. Used by the Slurm lab tests and `bench spares-launchers`."""

from __future__ import annotations

import os
import re
import secrets
import shutil
import socket
import subprocess
import sys
import time
from pathlib import Path

import clockfabric
from clockfabric.errors import ClockfabricError
from clockfabric.lab import process
from clockfabric.lab.naming import netns_prefix
from clockfabric.lab.state import Lab

CTLD = "h0"
DAEMONS = ("munged", "slurmctld", "slurmd", "sbatch", "srun", "scontrol")
PROLOG = Path("deploy") / "slurm"  # the prolog and epilog, relative to a repository checkout
SOURCE = Path(clockfabric.__file__).resolve().parents[1]  # the folder that holds this clockfabric
_missing = [d for d in DAEMONS if shutil.which(d) is None and not Path("/usr/sbin", d).exists()]
no_slurm = (f"Slurm not installed (no {', '.join(_missing)}): apt-get install slurmctld slurmd slurm-client munge"
            if _missing else "")


def slurm_conf(lab: Lab, folder: Path, hosts: tuple[str, ...], root: Path, controller: str = CTLD) -> str:
    addresses = {h: lab.topology.hosts[h].address for h in hosts}
    nodes = "\n".join(f"NodeName={h} NodeAddr={a} CPUs=1 RealMemory=100 State=UNKNOWN" for h, a in addresses.items())
    return f"""ClusterName=lab
SlurmctldHost={socket.gethostname().split('.')[0]}({lab.topology.hosts[controller].address})
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
Prolog={root / PROLOG / 'prolog'}
Epilog={root / PROLOG / 'epilog'}
PrologFlags=Alloc
PrologEpilogTimeout=60
{nodes}
PartitionName=lab Nodes={','.join(hosts)} Default=YES MaxTime=INFINITE State=UP
"""


def settings(lab: Lab, folder: Path) -> str:
    """clockfabric.conf: this clockfabric's CLI, the lab's topology as the fleet file, hosts
    reached through their namespaces with this interpreter's environment."""
    cli = folder / "clockfabric"
    cli.write_text(f"#!/bin/sh\nPYTHONPATH={SOURCE} exec {sys.executable} -m clockfabric.cli \"$@\"\n")
    cli.chmod(0o755)
    via = (f"ip netns exec {netns_prefix(lab.name)}{{host}} env "
           f"PATH={Path(sys.executable).parent}:/usr/bin:/bin PYTHONPATH={SOURCE}")
    return (f"CLOCKFABRIC={cli}\nFLEET={lab.dir / 'topology.yaml'}\nAUDIT_ARGS=--via '{via}'\n"
            f"LOG={folder / 'log' / 'node-audit.log'}\nTIMEOUT_S=30\n")


class Cluster:
    """munged, slurmctld and the slurmds of a lab; everything under the lab's folder.

    `hosts` are the nodes (a slurmd each); slurmctld runs in `controller`'s namespace, which
    need not be a node. `root` is the repository checkout whose deploy/slurm prolog and epilog
    slurmd runs."""

    def __init__(self, lab: Lab, hosts: tuple[str, ...], root: Path, controller: str = CTLD):
        if not (root / PROLOG / "prolog").is_file():
            raise ClockfabricError(f"no {root / PROLOG / 'prolog'}: give the root of a clockfabric checkout")
        self.lab, self.dir, self.hosts, self.controller = lab, lab.dir / "slurm", hosts, controller
        self.procs: list[subprocess.Popen] = []
        for sub in ("munge", "log", "state/ctld", *(f"state/{h}" for h in hosts)):
            (self.dir / sub).mkdir(parents=True, exist_ok=True)
        key = self.dir / "munge" / "munge.key"
        key.write_bytes(secrets.token_bytes(1024))
        key.chmod(0o400)
        (self.dir / "slurm.conf").write_text(slurm_conf(lab, self.dir, hosts, root.resolve(), controller))
        (self.dir / "clockfabric.conf").write_text(settings(lab, self.dir))
        self.env = {**os.environ, "SLURM_CONF": str(self.dir / "slurm.conf")}

    def start(self) -> None:
        m = self.dir / "munge"
        self.procs.append(process.spawn(["munged", "--foreground", "--force", f"--key-file={m}/munge.key",
                                         f"--socket={m}/munge.socket", f"--pid-file={m}/munged.pid",
                                         f"--seed-file={m}/seed", f"--log-file={self.dir}/log/munged.log"],
                                        log=self.dir / "log" / "munged.out"))
        self.wait(lambda: (m / "munge.socket").exists(), "munged's socket")
        ctld = self.on(self.controller, ["slurmctld", "-D", "-f", str(self.dir / "slurm.conf")])
        self.procs.append(process.spawn(ctld, log=self.dir / "log" / "slurmctld.out", env=self.env))
        for h in self.hosts:
            # the network namespace only: `ip netns exec` would hide /sys/fs/cgroup, which slurmd needs;
            # the audit reads each host's own sysfs through its --via
            self.procs.append(process.spawn(["nsenter", f"--net=/run/netns/{self.lab.ns(h)}", "slurmd", "-D",
                                             "-N", h, "-f", str(self.dir / "slurm.conf")],
                                            log=self.dir / "log" / f"slurmd-{h}.out", env=self.env))
        self.wait(lambda: self.states() == dict.fromkeys(self.hosts, "idle"), "every node idle")

    def stop(self) -> None:
        process.stop(reversed(self.procs), grace_s=5)

    def on(self, host: str, argv: list[str]) -> list[str]:
        return ["ip", "netns", "exec", self.lab.ns(host), *argv]

    def run(self, *argv: str) -> str:
        return subprocess.run(self.on(self.controller, list(argv)), capture_output=True, text=True, check=True,
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
            dead = [daemon(p) for p in self.procs if p.poll() is not None]
            if dead or time.monotonic() >= deadline:
                raise ClockfabricError(f"no {what}; exited: {dead}; logs in {self.dir}/log")
            time.sleep(0.3)


def daemon(proc: subprocess.Popen) -> str:
    """Which of the cluster's daemons proc is (past `ip netns exec` or nsenter)."""
    argv = [str(a) for a in proc.args] if isinstance(proc.args, list) else [str(proc.args)]
    return next((a for a in argv if a in DAEMONS), argv[0])
