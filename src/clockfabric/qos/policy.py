"""A job's QoS policy: its class and weight; the classes' DSCP (what the fabric sees) and their
default weights (the share of a host link each is guaranteed when all are busy).

    critical   DSCP 26 (AF31: the collective class of a fabric with classes)   weight 70
    normal     DSCP  0 (best effort)                                          weight 25
    scavenger  DSCP  1 (LE, RFC 8622: lower effort than best effort)          weight  5

A policy may name a job no host runs yet: it waits until one does. It may also name a group of
jobs their scheduler already keeps, `slurm-qos:NAME` or `slurm-partition:NAME`: each job in the
group without a policy of its own takes it (its QOS's before its partition's), before the class
the job asks for itself.
"""

from __future__ import annotations

import re
from dataclasses import dataclass

from clockfabric.errors import ClockfabricError


@dataclass(frozen=True)
class QosClass:
    name: str
    dscp: int
    weight: int  # the default: the share of a link the class is guaranteed among busy classes
    rank: int  # 0 is the highest: who is protected from whom


CLASSES = {c.name: c for c in (QosClass("critical", 26, 70, 0), QosClass("normal", 0, 25, 1),
                                QosClass("scavenger", 1, 5, 2))}
MIN_WEIGHT, MAX_WEIGHT = 1, 100
JOBID = re.compile(r"^[A-Za-z0-9][A-Za-z0-9._:@+-]{0,127}$")  # what job ids look like (workload.jobs, job run)
GROUPS = ("slurm-qos:", "slurm-partition:")  # what a policy names when it names a group (workload.jobs.GROUP_ENV)


@dataclass(frozen=True)
class Ask:
    """What a running job carries that may give it a class: the class it asks for itself
    (CLOCKFABRIC_QOS, `job run --qos`) and its scheduler's groups, in the order they count."""

    own: str = ""
    groups: tuple[str, ...] = ()


def names_group(name: str) -> bool:
    return name.startswith(GROUPS)


@dataclass(frozen=True)
class Policy:
    jobid: str
    qos_class: str
    weight: int
    override_dscp: bool = False  # re-mark packets the job marks itself (else only its unmarked ones)

    @property
    def dscp(self) -> int:
        return CLASSES[self.qos_class].dscp

    @property
    def rank(self) -> int:
        return CLASSES[self.qos_class].rank

    def as_dict(self) -> dict:
        return {"jobid": self.jobid, "class": self.qos_class, "weight": self.weight,
                "override_dscp": self.override_dscp}


def check_jobid(jobid: str) -> str:
    if not JOBID.match(jobid):
        raise ClockfabricError(f"job id {jobid!r}: use 1 to 128 letters, digits and . _ : @ + -, "
                               "starting with a letter or digit (as `clockfabric jobs` lists them)")
    return jobid


def make(jobid: str, qos_class: str, weight: int | None = None, override_dscp: bool = False) -> Policy:
    """A valid policy, or one ClockfabricError line naming what is wrong and what is allowed."""
    check_jobid(jobid)
    if qos_class not in CLASSES:
        raise ClockfabricError(f"unknown class {qos_class!r}: use one of {', '.join(CLASSES)}")
    if weight is None:
        weight = CLASSES[qos_class].weight
    if isinstance(weight, bool) or not isinstance(weight, int) or not MIN_WEIGHT <= weight <= MAX_WEIGHT:
        raise ClockfabricError(f"weight {weight!r} is out of range: give a whole number from {MIN_WEIGHT} "
                               f"to {MAX_WEIGHT}")
    return Policy(jobid, qos_class, weight, bool(override_dscp))


def parse_asked(jobid: str, asked: str) -> Policy:
    """The policy a job asks for itself: CLASS or CLASS:WEIGHT (CLOCKFABRIC_QOS, `job run --qos`)."""
    cls, _, weight = asked.partition(":")
    if weight and not weight.strip().isdigit():
        raise ClockfabricError(f"QoS {asked!r}: give CLASS or CLASS:WEIGHT, the weight a whole number from "
                               f"{MIN_WEIGHT} to {MAX_WEIGHT}")
    return make(jobid, cls.strip(), int(weight) if weight else None)


def from_dict(raw: object) -> Policy:
    """A policy as the controller hands it out (Policy.as_dict); ClockfabricError if it is not one."""
    if not isinstance(raw, dict) or not isinstance(raw.get("jobid"), str) or not isinstance(raw.get("class"), str):
        raise ClockfabricError(f"not a QoS policy: {str(raw)[:100]}")
    return make(raw["jobid"], raw["class"], raw.get("weight"), bool(raw.get("override_dscp", False)))
