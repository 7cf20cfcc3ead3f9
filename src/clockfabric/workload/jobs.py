"""Which job a process belongs to, from what it carries: its environment and its cgroup.

Sources, in the order they win: an explicit `CLOCKFABRIC_JOB` (what `clockfabric job run`
sets), Slurm's `SLURM_JOB_ID`, torchrun's `TORCHELASTIC_RUN_ID`, and a Kubernetes pod (its
UID in the cgroup path). A job id is the explicit name as given, else "<source>:<id>", so a
Slurm job 12 and a pod that happens to be called 12 never merge. The rank is `RANK`, else
`SLURM_PROCID`. Pure: the readings come from procfs.py (or a test's fixtures).
"""

from __future__ import annotations

import re
from collections.abc import Iterable
from dataclasses import dataclass, field

JOB_ENV = "CLOCKFABRIC_JOB"
RUN_ENV = "CLOCKFABRIC_JOB_RUN"
QOS_ENV = "CLOCKFABRIC_QOS"  # the QoS class the job asks for, CLASS or CLASS:WEIGHT (`job run --qos`)
# (variable, source name); the first one a process has names its job
JOB_SOURCES = ((JOB_ENV, "clockfabric"), ("SLURM_JOB_ID", "slurm"), ("TORCHELASTIC_RUN_ID", "torchelastic"))
RANK_ENV = ("RANK", "SLURM_PROCID")
# (variable, group): the scheduler's groups a job is in, which a QoS policy may name ("slurm-qos:high")
GROUP_ENV = (("SLURM_JOB_QOS", "slurm-qos"), ("SLURM_JOB_PARTITION", "slurm-partition"))
WANTED_ENV = frozenset([v for v, _ in JOB_SOURCES] + list(RANK_ENV) + [RUN_ENV, QOS_ENV] + [v for v, _ in GROUP_ENV])
# kubepods-burstable-pod1b2c..._..slice (systemd driver) or /kubepods/burstable/pod1b2c-... (cgroupfs)
POD_UID = re.compile(r"pod([0-9a-f]{8}[-_][0-9a-f]{4}[-_][0-9a-f]{4}[-_][0-9a-f]{4}[-_][0-9a-f]{12})")


@dataclass(frozen=True)
class JobTag:
    """What marks a process as part of a job."""

    jobid: str
    source: str  # "clockfabric" | "slurm" | "torchelastic" | "kubernetes"
    rank: int | None = None
    run: str = ""  # CLOCKFABRIC_JOB_RUN: one run of a named job
    qos: str = ""  # CLOCKFABRIC_QOS: the QoS class (and weight) it asks for, as given
    groups: tuple[str, ...] = ()  # its scheduler's groups, in GROUP_ENV's order: "slurm-qos:high", ...


def parse_environ(data: bytes) -> dict[str, str]:
    """The variables of a /proc/PID/environ that say which job, run and rank (the rest is skipped)."""
    out = {}
    for item in data.split(b"\0"):
        name, sep, value = item.partition(b"=")
        if sep and name.decode(errors="replace") in WANTED_ENV:
            out[name.decode()] = value.decode(errors="replace")
    return out


def pod_uid(cgroup: str) -> str | None:
    """The Kubernetes pod UID in a /proc/PID/cgroup, or None outside a pod."""
    found = POD_UID.search(cgroup)
    return found.group(1).replace("_", "-") if found else None


def _rank(environ: dict[str, str]) -> int | None:
    for name in RANK_ENV:
        value = environ.get(name, "")
        if value.isdigit():
            return int(value)
    return None


def identify(environ: dict[str, str], cgroup: str = "") -> JobTag | None:
    """The job a process with this environment and cgroup belongs to; None for no job."""
    rank, run, qos = _rank(environ), environ.get(RUN_ENV, ""), environ.get(QOS_ENV, "").strip()[:64]
    groups = tuple(f"{group}:{value}" for name, group in GROUP_ENV if (value := environ.get(name, "").strip()[:64]))
    for name, source in JOB_SOURCES:
        if value := environ.get(name, "").strip():
            return JobTag(value if source == "clockfabric" else f"{source}:{value}", source, rank, run, qos, groups)
    if uid := pod_uid(cgroup):
        return JobTag(f"kubernetes:{uid}", "kubernetes", rank, run, qos, groups)
    return None


@dataclass(frozen=True)
class JobProcess:
    pid: int
    tag: JobTag
    start_s: float  # when it started, seconds since the epoch
    visible: bool = True  # its sockets are in our network namespace, so its flows can be read


@dataclass
class Job:
    jobid: str
    source: str
    processes: list[JobProcess] = field(default_factory=list)

    @property
    def ranks(self) -> list[int]:
        return sorted({p.tag.rank for p in self.processes if p.tag.rank is not None})

    @property
    def start_s(self) -> float:
        return min(p.start_s for p in self.processes)

    @property
    def runs(self) -> list[str]:
        return sorted({p.tag.run for p in self.processes if p.tag.run})

    @property
    def qos(self) -> str:
        """The QoS class its processes ask for (CLOCKFABRIC_QOS); "" where none does."""
        return min((p.tag.qos for p in self.processes if p.tag.qos), default="")

    @property
    def groups(self) -> tuple[str, ...]:
        """Its processes' scheduler groups, each once, in GROUP_ENV's order (its QOS before its partition)."""
        found = {g for p in self.processes for g in p.tag.groups}
        order = [group for _, group in GROUP_ENV]
        return tuple(sorted(found, key=lambda g: (order.index(g.partition(":")[0]), g)))

    @property
    def hidden(self) -> int:
        """Its processes in network namespaces of their own (containers): flows not seen from here."""
        return sum(not p.visible for p in self.processes)


def group(processes: Iterable[JobProcess]) -> dict[str, Job]:
    """Processes into their jobs, by job id; each job's processes by pid."""
    jobs: dict[str, Job] = {}
    for p in sorted(processes, key=lambda p: p.pid):
        jobs.setdefault(p.tag.jobid, Job(p.tag.jobid, p.tag.source)).processes.append(p)
    return jobs
