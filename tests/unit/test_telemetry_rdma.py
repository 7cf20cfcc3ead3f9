"""RDMA collector against a recorded /sys/class/infiniband: a ConnectX-6 Dx RoCE port that is up,
and a ConnectX-6 InfiniBand port that is down (cable out)."""

import shutil
from pathlib import Path

import pytest

from clockfabric.telemetry.base import Collectors
from clockfabric.telemetry.rdma import RdmaCollector

FIXTURE = Path(__file__).parent.parent / "fixtures" / "sysfs" / "infiniband"


def by_key(metrics):
    """(name, device, port) -> value, for metrics with no labels beyond device and port."""
    return {(m.name, m.labels["device"], m.labels["port"]): m.value
            for m in metrics if set(m.labels) == {"device", "port"}}


@pytest.fixture
def tree(tmp_path):
    """A writable copy of the recorded tree, to break."""
    return Path(shutil.copytree(FIXTURE, tmp_path / "infiniband"))


def test_reads_state_rate_and_counters():
    c = RdmaCollector(FIXTURE)
    assert c.absent() is None
    got = by_key(c.collect())
    roce, ib = ("mlx5_0", "1"), ("mlx5_1", "1")
    assert got[("clockfabric_rdma_port_state", *roce)] == 4
    assert got[("clockfabric_rdma_port_phys_state", *roce)] == 5
    assert got[("clockfabric_rdma_port_state", *ib)] == 1
    assert got[("clockfabric_rdma_port_phys_state", *ib)] == 2
    assert got[("clockfabric_rdma_port_rate_bytes_per_second", *roce)] == 100e9 / 8
    assert got[("clockfabric_rdma_port_rate_bytes_per_second", *ib)] == 10e9 / 8
    assert got[("clockfabric_rdma_link_downed_total", *ib)] == 3
    assert got[("clockfabric_rdma_symbol_error_total", *ib)] == 17
    assert got[("clockfabric_rdma_port_rcv_errors_total", *ib)] == 2
    assert got[("clockfabric_rdma_port_xmit_discards_total", *ib)] == 5
    assert got[("clockfabric_rdma_vl15_dropped_total", *roce)] == 0
    # data counters are 4-byte words in sysfs
    assert got[("clockfabric_rdma_port_rcv_data_bytes_total", *roce)] == 2913547318562 * 4
    assert got[("clockfabric_rdma_port_xmit_data_bytes_total", *roce)] == 2877761103311 * 4
    assert ("clockfabric_rdma_port_rcv_data_total", *roce) not in got
    assert got[("clockfabric_rdma_hw_np_cnp_sent_total", *roce)] == 18237
    assert got[("clockfabric_rdma_hw_rp_cnp_handled_total", *roce)] == 17980
    assert not any("lifespan" in name for name, *_ in got)  # a cache setting, not a count


def test_counters_are_counters_named_total():
    for m in RdmaCollector(FIXTURE).collect():
        assert m.name.startswith("clockfabric_rdma_")
        assert (m.kind == "counter") == m.name.endswith("_total"), m.name


def test_port_info_carries_the_text():
    info = {m.labels["device"]: m.labels for m in RdmaCollector(FIXTURE).collect()
            if m.name == "clockfabric_rdma_port_info"}
    assert info["mlx5_0"] == {"device": "mlx5_0", "port": "1", "state": "ACTIVE", "phys_state": "LinkUp",
                              "rate": "100 Gb/sec (4X EDR)", "link_layer": "Ethernet"}
    assert info["mlx5_1"]["state"] == "DOWN"
    assert info["mlx5_1"]["phys_state"] == "Polling"
    assert info["mlx5_1"]["link_layer"] == "InfiniBand"


def test_gid_table():
    table = RdmaCollector(FIXTURE).gid_table()
    assert table == [
        {"device": "mlx5_0", "port": "1", "index": 0, "gid": "fe80:0000:0000:0000:0ac0:ebff:fe4e:1f2a",
         "type": "IB/RoCE v1", "netdev": "enp65s0f0np0"},
        {"device": "mlx5_0", "port": "1", "index": 1, "gid": "fe80:0000:0000:0000:0ac0:ebff:fe4e:1f2a",
         "type": "RoCE v2", "netdev": "enp65s0f0np0"},
        {"device": "mlx5_0", "port": "1", "index": 2, "gid": "0000:0000:0000:0000:0000:ffff:0a00:000b",
         "type": "IB/RoCE v1", "netdev": "enp65s0f0np0"},
        {"device": "mlx5_0", "port": "1", "index": 3, "gid": "0000:0000:0000:0000:0000:ffff:0a00:000b",
         "type": "RoCE v2", "netdev": "enp65s0f0np0"},
        {"device": "mlx5_1", "port": "1", "index": 0, "gid": "fe80:0000:0000:0000:b83f:d203:00a1:b2c4",
         "type": "IB/RoCE v1", "netdev": None},
    ]


def test_gid_info_metrics():
    gids = [m.labels for m in RdmaCollector(FIXTURE).collect() if m.name == "clockfabric_rdma_gid_info"]
    assert len(gids) == 5
    assert {"device": "mlx5_0", "port": "1", "gid_index": "3", "gid": "0000:0000:0000:0000:0000:ffff:0a00:000b",
            "type": "RoCE v2", "netdev": "enp65s0f0np0"} in gids
    ib = next(g for g in gids if g["device"] == "mlx5_1")
    assert ib["netdev"] == ""  # same label set on every sample of a name


def test_absent_tree(tmp_path):
    missing = tmp_path / "nope"
    assert RdmaCollector(missing).absent() == f"no {missing}"
    assert RdmaCollector(missing).gid_table() == []
    assert RdmaCollector(tmp_path).absent() == f"no RDMA ports under {tmp_path}"
    report = Collectors([RdmaCollector(missing)]).collect()
    assert report.status == {"rdma": f"not present: no {missing}"}
    assert report.metrics == []


def test_broken_files_drop_only_their_sample(tree):
    port = tree / "mlx5_1" / "ports" / "1"
    (port / "counters" / "symbol_error").write_text("garbage\n")
    (port / "counters" / "link_downed").unlink()
    (port / "counters" / "link_downed").mkdir()  # unreadable: EISDIR
    (port / "state").write_bytes(b"\xff\xfe\x00")  # not text
    (port / "rate").write_text("\n")
    (port / "hw_counters" / "out_of_buffer").unlink()
    (port / "hw_counters" / "out_of_buffer").symlink_to(port / "nowhere")  # dangling
    (port / "gids" / "0").write_bytes(b"\xff")

    report = Collectors([RdmaCollector(tree)]).collect()
    assert report.status == {"rdma": "ok"}
    got = by_key(report.metrics)
    ib = ("mlx5_1", "1")
    for gone in ("symbol_error_total", "link_downed_total", "port_state", "port_rate_bytes_per_second",
                 "hw_out_of_buffer_total"):
        assert ("clockfabric_rdma_" + gone, *ib) not in got
    assert got[("clockfabric_rdma_port_phys_state", *ib)] == 2
    assert got[("clockfabric_rdma_port_rcv_errors_total", *ib)] == 2
    assert got[("clockfabric_rdma_link_downed_total", "mlx5_0", "1")] == 1
    info = next(m for m in report.metrics if m.name == "clockfabric_rdma_port_info" and m.labels["device"] == "mlx5_1")
    assert info.labels["state"] == "" and info.labels["rate"] == ""
    assert [g["device"] for g in RdmaCollector(tree).gid_table()] == ["mlx5_0"] * 4


def test_port_without_counters(tree):
    shutil.rmtree(tree / "mlx5_0" / "ports" / "1" / "counters")
    shutil.rmtree(tree / "mlx5_0" / "ports" / "1" / "hw_counters")
    got = by_key(RdmaCollector(tree).collect())
    assert got[("clockfabric_rdma_port_state", "mlx5_0", "1")] == 4
    assert not any(dev == "mlx5_0" and name.endswith("_total") for name, dev, _ in got)
