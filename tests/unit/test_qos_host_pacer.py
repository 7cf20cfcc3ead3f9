"""The host's pacer (agent/qos_pace.py) on a NIC whose root qdisc sorts packets into classes: the
queue the loop steers by is the higher class's own class queue, not the whole backlog, which
holds the lower class's own waiting too; on a NIC without classes it is the whole backlog. A NIC
no lower-class flow leaves by is not read at all. A host where nothing can be paced steps only
on new readings."""

from __future__ import annotations

from dataclasses import replace

import pytest

from clockfabric.agent.qos_pace import HostPacer
from clockfabric.qos.pace_loop import Flow
from clockfabric.qos.policy import CLASSES, Policy
from clockfabric.workload.flows import FlowKey, FlowRates, SocketReading
from clockfabric.workload.monitor import JobFlow

C = 100e6


def test_the_higher_classs_own_class_queue_steers_on_a_nic_with_classes(tmp_path):
    pacer = HostPacer({"lo": int(C)}, tmp_path / "h0.paced", window_s=2.0)
    try:
        critical, scavenger = CLASSES["critical"].dscp, CLASSES["scavenger"].dscp
        flows = [Flow((1, 1), "critical", 70, ("eth0>", ">10.0.0.2"), 30e6, None),
                 Flow((2, 2), "scavenger", 5, ("eth0>", ">10.0.0.3"), 60e6, None),
                 Flow((3, 3), "scavenger", 5, ("eth1>", ">10.0.0.3"), 60e6, None)]
        pacer.backlog.read = lambda: ({"eth0": 0.050, "eth1": 0.040, "eth2": 0.030},  # type: ignore[method-assign]
                                      {"eth0": {critical: 0.0001, scavenger: 0.049}})
        assert pacer._nic_queues(flows) == {"eth0>": 0.0001}  # eth1: the scavenger is the best class there
        pacer.backlog.read = lambda: ({"eth0": 0.050}, {})  # type: ignore[method-assign]
        assert pacer._nic_queues(flows) == {"eth0>": 0.050}
    finally:
        pacer.release()


def test_without_a_lower_class_flow_on_a_nic_its_qdiscs_are_not_read(tmp_path):
    pacer = HostPacer({"lo": int(C)}, tmp_path / "h0.paced", window_s=2.0)
    try:
        def unread():
            raise AssertionError("the qdiscs were read")
        pacer.backlog.read = unread  # type: ignore[method-assign]
        only_critical = [Flow((1, 1), "critical", 70, ("eth0>", ">10.0.0.2"), 30e6, None),
                         Flow((3, 3), "scavenger", 5, ("eth1>", ">10.0.0.3"), 60e6, None)]
        assert pacer._nic_queues(only_critical) == {}
    finally:
        pacer.release()


def job_flow(jobid: str, inode: int) -> JobFlow:
    reading = SocketReading(FlowKey("127.0.0.1", 40000 + inode, "127.0.0.1", 5201), inode, inode, 0, 0, 0, 200, 10, 0.0)
    return JobFlow(jobid, 100 + inode, FlowRates(reading, 30e6, 0.0, 0))


POLICIES = [Policy("ddp", "critical", 70), Policy("bulk", "scavenger", 5)]


@pytest.fixture
def pacer(tmp_path):
    p = HostPacer({"lo": int(C)}, tmp_path / "h0.paced", window_s=2.0)
    p.backlog.read = lambda: ({"lo": 0.0}, {})  # type: ignore[method-assign]
    steps = []
    real = p.loop.step
    p.loop.step = lambda *a: (steps.append(a), real(*a))[1]  # type: ignore[method-assign]
    p.steps = steps  # type: ignore[attr-defined]
    yield p
    p.release()


def test_where_nothing_can_be_paced_the_loop_steps_only_on_new_readings(pacer):
    flows, owd = [job_flow("ddp", 1)], {}
    pacer.step(flows, owd, POLICIES)
    link = next(iter(pacer.loop.views))
    pacer.loop.views[link] = replace(pacer.loop.views[link], queue_s=0.002)  # a new reading, told once
    assert pacer.step(flows, owd, POLICIES) == {} and len(pacer.steps) == 1
    assert pacer.loop.views[link].queue_s is None and pacer.loop.views[link].high_bps == 30e6
    pacer.step(list(flows), owd, POLICIES)  # the next update
    pacer.step(list(flows), {}, POLICIES)  # the next window
    pacer.step(flows, owd, list(POLICIES))  # the policies taken again
    assert len(pacer.steps) == 4


def test_a_lower_class_flow_here_is_stepped_every_period(pacer):
    flows, owd = [job_flow("ddp", 1), job_flow("bulk", 2)], {}
    for _ in range(3):
        pacer.step(flows, owd, POLICIES)
    assert len(pacer.steps) == 3


def test_a_socket_found_between_updates_is_stepped_every_period(pacer):
    flows, owd = [job_flow("ddp", 1)], {}
    pacer.joined = {(7, 7): ("bulk", "127.0.0.1")}
    for _ in range(3):
        pacer.step(flows, owd, POLICIES)
    assert len(pacer.steps) == 3


def test_a_host_wants_the_readings_of_the_last_hops_its_lower_classes_cross(pacer):
    pacer.step([job_flow("ddp", 1)], {}, POLICIES)
    assert pacer.wants == frozenset()  # the critical job alone: nothing to pace, nothing wanted
    pacer.step([job_flow("ddp", 1), job_flow("bulk", 2)], {}, POLICIES)
    assert pacer.wants == {">127.0.0.1"}
    pacer.step([job_flow("bulk", 2)], {}, [Policy("bulk", "scavenger", 5)])
    assert pacer.wants == frozenset()  # the best class in force: none below it here
