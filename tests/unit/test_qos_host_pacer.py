"""The host's pacer (agent/qos_pace.py) on a NIC whose root qdisc sorts packets into classes: the
queue the loop steers by is the higher class's own class queue, not the whole backlog, which
holds the lower class's own waiting too; on a NIC without classes it is the whole backlog. A NIC
no lower-class flow leaves by is not read at all."""

from __future__ import annotations

from clockfabric.agent.qos_pace import HostPacer
from clockfabric.qos.pace_loop import Flow
from clockfabric.qos.policy import CLASSES

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
