"""The NIC collector against a recorded sysfs tree, and against this machine's own /sys."""

from __future__ import annotations

from pathlib import Path

from clockfabric.serieswire import body
from clockfabric.telemetry.nic import NicCollector, NicRates
from clockfabric.workload.samples import nic_samples

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


def counters(root: Path, dev: str, tx: int, rx: int) -> None:
    stats = root / dev / "statistics"
    stats.mkdir(parents=True, exist_ok=True)
    (stats / "tx_bytes").write_text(f"{tx}\n")
    (stats / "rx_bytes").write_text(f"{rx}\n")


def test_nic_rates_from_the_byte_counters_between_reads(tmp_path):
    rates = NicRates(["eth0", "eth1"], root=tmp_path)
    counters(tmp_path, "eth0", 1_000, 5_000)
    assert rates.read(10.0) == {}  # a first read has nothing to compare with
    counters(tmp_path, "eth0", 1_000 + 12_500_000, 5_000 + 125_000)
    assert rates.read(12.0) == {"eth0": (50e6, 0.5e6)}  # bits a second over the 2 s between
    counters(tmp_path, "eth0", 10, 10)  # a reset NIC: counters back near zero
    assert rates.read(13.0) == {}
    counters(tmp_path, "eth0", 1_010, 10)
    assert rates.read(14.0) == {"eth0": (8_000.0, 0.0)}


def test_nic_samples_are_stamped_when_read_not_when_sent():
    got = nic_samples({"eth0": (50e6, 0.5e6)}, read_ns=1_234_000_000)
    assert got == [{"name": "nic_bps", "value": 50_000_000, "labels": {"device": "eth0", "direction": "tx"},
                    "t_ns": 1_234_000_000},
                   {"name": "nic_bps", "value": 500_000, "labels": {"device": "eth0", "direction": "rx"},
                    "t_ns": 1_234_000_000}]
    assert body(got, t_ms=9_999).decode().split()[-1] == "1234"  # not the push's time
