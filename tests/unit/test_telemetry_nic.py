"""The NIC collector against a recorded sysfs tree, and against this machine's own /sys."""

from __future__ import annotations

from pathlib import Path

from clockfabric.telemetry.nic import NicCollector

TREE = Path(__file__).parent.parent / "fixtures" / "sysfs" / "net"


def by_name(metrics) -> dict[tuple[str, str], float]:
    return {(m.name, m.labels["device"]): m.value for m in metrics}


def test_counters_state_and_speed_from_a_recorded_tree():
    got = by_name(NicCollector(root=TREE).collect())
    assert got[("node_network_receive_bytes_total", "eth0")] == 123456789
    assert got[("node_network_receive_drop_total", "eth0")] == 7
    assert got[("node_network_carrier_changes_total", "eth0")] == 6
    assert got[("node_network_up", "eth0")] == 1 and got[("node_network_up", "eth1")] == 0
    assert got[("node_network_carrier", "eth1")] == 0
    assert got[("node_network_speed_bytes", "eth0")] == 100_000 * 1e6 / 8  # 100 Gbit/s
    assert ("node_network_speed_bytes", "eth1") not in got  # a link that is down has no speed
    assert not any(dev == "lo" for _, dev in got)


def test_chosen_devices_only_and_missing_ones_skipped():
    got = by_name(NicCollector(["eth1", "ib9"], root=TREE).collect())
    assert {dev for _, dev in got} == {"eth1"}


def test_absent_without_sysfs_or_devices(tmp_path):
    assert NicCollector(root=tmp_path / "nope").absent() == f"no {tmp_path / 'nope'}"
    assert NicCollector(root=tmp_path).absent() == "no network devices"
    assert NicCollector(root=TREE).absent() is None


def test_this_machines_own_sysfs_reads():
    metrics = NicCollector().collect()  # every host has some device besides lo in CI and here
    assert any(m.name == "node_network_receive_bytes_total" and m.value >= 0 for m in metrics)
