"""A job's QoS class from where the job carries it: `job run --qos CLASS[:WEIGHT]` puts
CLOCKFABRIC_QOS in its environment, the workload monitor reads it with the job, and the agent
takes it for a job that no policy names (a policy set at the controller wins)."""

from __future__ import annotations

import pytest

from clockfabric.agent.services.qos import effective
from clockfabric.errors import ClockfabricError
from clockfabric.qos.policy import Ask, make, parse_asked
from clockfabric.workload.jobs import QOS_ENV, Job, JobProcess, identify, parse_environ


def test_the_class_a_job_asks_for_rides_with_its_processes():
    environ = parse_environ(b"CLOCKFABRIC_JOB=bulk\0" + f"{QOS_ENV}=scavenger:3\0".encode() + b"HOME=/root\0")
    tag = identify(environ)
    assert tag is not None and tag.qos == "scavenger:3"
    job = Job("bulk", "clockfabric", [JobProcess(1, tag, 0.0), JobProcess(2, identify({"CLOCKFABRIC_JOB": "bulk"}),
                                                                          0.0)])
    assert job.qos == "scavenger:3"


def test_a_policy_set_wins_over_what_the_job_asks_and_a_bad_ask_is_one_line():
    policies, problems = effective([make("a", "critical")], {"a": Ask("scavenger"), "b": Ask("scavenger:3"),
                                                             "c": Ask("gold")})
    assert [(p.jobid, p.qos_class, p.weight) for p in policies] == [("a", "critical", 70), ("b", "scavenger", 3)]
    assert problems == ["job c: unknown class 'gold': use one of critical, normal, scavenger"]


def test_a_slurm_jobs_qos_and_partition_ride_with_its_processes_qos_first():
    environ = parse_environ(b"SLURM_JOB_ID=12\0SLURM_JOB_PARTITION=gpu\0SLURM_JOB_QOS=high\0HOME=/root\0")
    tag = identify(environ)
    assert tag is not None and (tag.jobid, tag.groups) == ("slurm:12", ("slurm-qos:high", "slurm-partition:gpu"))
    step = identify({"SLURM_JOB_ID": "12", "SLURM_JOB_PARTITION": "gpu"})  # a step that lost its QOS variable
    assert Job("slurm:12", "slurm", [JobProcess(2, step, 0.0), JobProcess(1, tag, 0.0)]).groups == (
        "slurm-qos:high", "slurm-partition:gpu")
    assert identify({"SLURM_JOB_QOS": "high"}) is None  # a group alone makes no job


def test_a_groups_policy_reaches_its_jobs_after_their_own_and_before_what_they_ask():
    set_ = [make("slurm-qos:high", "critical", 80), make("slurm-partition:gpu", "normal"),
            make("slurm:3", "scavenger")]
    asks = {"slurm:1": Ask("scavenger", ("slurm-qos:high", "slurm-partition:gpu")),  # its QOS, over its own ask
            "slurm:2": Ask("", ("slurm-qos:low", "slurm-partition:gpu")),  # no policy for its QOS: its partition's
            "slurm:3": Ask("", ("slurm-qos:high",)),  # its own policy, over its QOS's
            "slurm:4": Ask("normal:9", ("slurm-qos:low",)),  # no group's policy: what it asks
            "slurm:5": Ask("", ("slurm-qos:low",))}  # nothing: no policy, no change to its packets
    policies, problems = effective(set_, asks)
    assert [(p.jobid, p.qos_class, p.weight) for p in policies] == [
        ("slurm:3", "scavenger", 5), ("slurm:1", "critical", 80), ("slurm:2", "normal", 25), ("slurm:4", "normal", 9)]
    assert problems == []


@pytest.mark.parametrize("ask, says", [("critical:x", "give CLASS or CLASS:WEIGHT"),
                                       ("critical:0", "weight 0 is out of range"), ("", "unknown class ''")])
def test_a_bad_ask_names_the_problem(ask, says):
    with pytest.raises(ClockfabricError, match=says):
        parse_asked("J", ask)


def test_the_hosts_qos_on_metrics():
    from clockfabric.agent.metrics import qos_metrics

    state = {"qos": {"refused": "", "jobs": {"bulk": {"class": "scavenger", "sockets": 2, "marked_packets": 40}}}}
    found = {(m.name, tuple(sorted(m.labels.items()))): m.value for m in qos_metrics(state)}
    assert found == {("clockfabric_qos_refused", ()): 0.0,
                     ("clockfabric_qos_marked_packets_total", (("class", "scavenger"), ("jobid", "bulk"))): 40.0,
                     ("clockfabric_qos_sockets", (("class", "scavenger"), ("jobid", "bulk"))): 2.0}
    assert qos_metrics({"qos": {}}) == []  # before the service's first update
