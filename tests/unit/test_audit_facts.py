"""Audit facts (clockfabric.audit.facts) against recorded trees, a fake NVML, and this machine.

tests/fixtures/audit/ holds two hosts as their files show them (sysfs with its symlinks, procfs,
os-release, library file names):
- gpu-node: Ubuntu 22.04, 16 x 32 GiB DDR5 (EDAC), an H100, a ConnectX-6 Dx whose slot trained
  at x8 8 GT/s (x16 16 GT/s capable) with a VF (link 'Unknown'); eth0 (mlx5_0) has a RoCE v2
  GID for 10.64.0.2 at index 3, eth1 (mlx5_1) has only link-local GIDs; rdma-core 50.0, NCCL 2.21.5.
- cpu-node: Rocky 9.3, 15 x 32 GiB DDR4 (one DIMM gone), an E810 (no RDMA) with eth1 not
  cabled, rdma-core 46.0, no NVIDIA driver.
"""

import json
import os
import platform
import shutil
import socket
import subprocess
import sys
import time
from pathlib import Path

import pynvml
import pytest

import clockfabric
from clockfabric.audit import facts
from clockfabric.audit.facts import __main__ as facts_main
from clockfabric.audit.facts import addrs, gpus, memory, names, nics, pcie, software
from tests.fakes.fake_nvml import FakeGpu, FakeNvml

FIXTURES = Path(__file__).parent.parent / "fixtures" / "audit"
GPU_NODE, CPU_NODE = FIXTURES / "gpu-node", FIXTURES / "cpu-node"
GIB = 2**30
ZERO = "0000:0000:0000:0000:0000:0000:0000:0000"
CORRECTED, UNCORRECTED = pynvml.NVML_MEMORY_ERROR_TYPE_CORRECTED, pynvml.NVML_MEMORY_ERROR_TYPE_UNCORRECTED
VOLATILE, AGGREGATE = pynvml.NVML_VOLATILE_ECC, pynvml.NVML_AGGREGATE_ECC
NOT_SUPPORTED = pynvml.NVML_ERROR_NOT_SUPPORTED
SPEC = {"host": "h3", "nics": [{"name": "eth0", "plane": 0}, {"name": "eth1", "plane": 1}, {"name": "eth9", "plane": 2}],
        "names": {"localhost": "127.0.0.1"}}


def copy(tree: Path, tmp_path: Path) -> Path:
    """A writable copy of a recorded tree, symlinks kept as links."""
    return Path(shutil.copytree(tree, tmp_path / tree.name, symlinks=True))


def fixed_ipv4(table):
    return lambda names: {n: table[n] for n in names if n in table}


# -- software ------------------------------------------------------------------------------------

def test_software_gpu_node():
    s = software.read(GPU_NODE)
    assert s["os"] == "Ubuntu 22.04.4 LTS"  # through etc/os-release -> ../usr/lib/os-release
    assert s["nvidia_driver"] == "550.54.15"
    assert s["rdma_core"] == "50.0"  # libibverbs.so.1 -> libibverbs.so.1.14.50.0
    assert s["kernel"] == platform.release()
    assert s["python"] == platform.python_version()
    assert set(s["packages"]) == {"torch", "numpy", "nvidia-ml-py", "clockfabric", "nvidia-nccl-cu12",
                                  "nvidia-nccl-cu13"}
    assert s["packages"]["clockfabric"] == clockfabric.__version__
    assert s["packages"]["nvidia-ml-py"] is not None  # a dependency: installed here
    assert "torch" not in sys.modules or s["packages"]["torch"] is not None


def test_nccl_from_wheel_then_library_file():
    assert software._nccl(GPU_NODE, {}) == ("2.21.5", "/usr/lib/x86_64-linux-gnu/libnccl.so.2.21.5")
    assert software._nccl(GPU_NODE, {"nvidia-nccl-cu12": "2.26.2"}) == ("2.26.2", "wheel nvidia-nccl-cu12")
    assert software._nccl(CPU_NODE, {}) == (None, None)  # not "/": the loader is not asked


def test_software_cpu_node_takes_driver_from_nvml():
    s = software.read(CPU_NODE)
    assert s["os"] == "Rocky Linux 9.3 (Blue Onyx)"
    assert s["rdma_core"] == "46.0"  # usr/lib64
    assert s["nvidia_driver"] is None
    assert software.read(CPU_NODE, nvml_driver="535.161.08")["nvidia_driver"] == "535.161.08"
    assert software.read(GPU_NODE, nvml_driver="535.161.08")["nvidia_driver"] == "550.54.15"  # /proc first


def test_software_on_an_empty_tree(tmp_path):
    s = software.read(tmp_path)
    assert (s["os"], s["nvidia_driver"], s["nccl"], s["rdma_core"]) == (None, None, None, None)


def test_nvidia_driver_version_both_module_flavours():
    proprietary = "NVRM version: NVIDIA UNIX x86_64 Kernel Module  535.161.07  Sat Feb 17 22:55:48 UTC 2024\n"
    assert software.nvidia_driver(proprietary) == "535.161.07"
    assert software.nvidia_driver((GPU_NODE / "proc/driver/nvidia/version").read_text()) == "550.54.15"
    assert software.nvidia_driver("GCC version:  gcc version 12.3.0") is None


def test_rdma_core_without_the_link_or_from_doc_dir(tmp_path):
    lib = tmp_path / "a" / "usr/lib64"
    lib.mkdir(parents=True)
    for v in ("39.0", "44.0"):  # no libibverbs.so.1 link: the newest file
        (lib / f"libibverbs.so.1.14.{v}").write_text("")
    assert software.rdma_core(tmp_path / "a") == "44.0"
    (tmp_path / "b" / "usr/share/doc/rdma-core-17.2").mkdir(parents=True)
    assert software.rdma_core(tmp_path / "b") == "17.2"


@pytest.mark.skipif(shutil.which("dpkg-query") is None, reason="no dpkg here")
def test_package_version_from_dpkg():
    v = software.package_version("bash")
    assert v and v[0].isdigit() and "-" not in v  # upstream version, Debian revision dropped
    assert software.package_version("no-such-package-clockfabric") is None


# -- memory --------------------------------------------------------------------------------------

def test_memory_sixteen_dimms():
    m = memory.read(GPU_NODE)
    assert m["total_bytes"] == 527937460 * 1024
    assert m["source"] == "edac"
    assert m["dimms"] == 16
    assert m["dimm_bytes"] == [32 * GIB] * 16
    assert m["dimm_labels"][0] == "CPU_SrcID#0_MC#0_Chan#0_DIMM#0"
    assert m["dimm_labels"][-1] == "CPU_SrcID#1_MC#3_Chan#1_DIMM#0"


def test_memory_fifteen_dimms_names_the_missing_slot_by_absence():
    m = memory.read(CPU_NODE)
    assert m["dimms"] == 15
    assert sum(m["dimm_bytes"]) == 15 * 32 * GIB
    assert "CPU_SrcID#1_MC#1_Chan#1_DIMM#0" not in m["dimm_labels"]
    assert "CPU_SrcID#1_MC#1_Chan#0_DIMM#0" in m["dimm_labels"]
    assert m["total_bytes"] < memory.read(GPU_NODE)["total_bytes"]


DMIDECODE = """# dmidecode 3.4
Getting SMBIOS data from sysfs.
SMBIOS 3.3.0 present.

Handle 0x0040, DMI type 17, 92 bytes
Memory Device
\tArray Handle: 0x003F
\tTotal Width: 72 bits
\tData Width: 64 bits
\tSize: 32 GB
\tForm Factor: DIMM
\tLocator: CPU0_DIMM_A1
\tBank Locator: NODE 0
\tType: DDR4
\tVolatile Size: 32 GB
\tCache Size: None

Handle 0x0041, DMI type 17, 92 bytes
Memory Device
\tSize: No Module Installed
\tLocator: CPU0_DIMM_A2

Handle 0x0042, DMI type 17, 40 bytes
Memory Device
\tSize: 16384 MB
\tLocator: CPU0_DIMM_B1

Handle 0x0043, DMI type 17, 92 bytes
Memory Device
\tSize: 64 GB
\tLocator: CPU1_DIMM_A1
"""


def test_memory_from_dmidecode_when_no_edac(tmp_path):
    (tmp_path / "proc").mkdir()
    shutil.copy(CPU_NODE / "proc/meminfo", tmp_path / "proc/meminfo")
    m = memory.read(tmp_path, dmidecode=lambda: DMIDECODE)
    assert m["source"] == "dmidecode"
    assert m["dimms"] == 3
    assert m["dimm_bytes"] == [32 * GIB, 16 * GIB, 64 * GIB]
    assert m["dimm_labels"] == ["CPU0_DIMM_A1", "CPU0_DIMM_B1", "CPU1_DIMM_A1"]


def test_memory_without_any_dimm_source(tmp_path):
    (tmp_path / "proc").mkdir()
    (tmp_path / "proc/meminfo").write_text("MemTotal:        1024 kB\n")
    m = memory.read(tmp_path, dmidecode=lambda: None)  # not installed, or not root
    assert m == {"total_bytes": 1024 * 1024, "dimms": None, "dimm_bytes": None, "dimm_labels": None, "source": None}
    assert memory.read(tmp_path)["dimms"] is None  # a recorded tree never runs the real dmidecode


def test_memory_ranks_are_not_dimms(tmp_path):
    """csrow-based EDAC drivers list ranks (rankN): two per dual-rank DIMM, so they count nothing."""
    for rank in range(4):
        d = tmp_path / f"sys/devices/system/edac/mc/mc0/rank{rank}"
        d.mkdir(parents=True)
        (d / "size").write_text("8192\n")
    assert memory.edac_dimms(tmp_path) == []
    assert memory.read(tmp_path, dmidecode=lambda: DMIDECODE)["source"] == "dmidecode"


# -- PCIe ----------------------------------------------------------------------------------------

def test_pcie_degraded_nic_link():
    by_addr = {d["address"]: d for d in pcie.read(GPU_NODE)}
    assert "0000:00:00.0" not in by_addr  # host bridge: no link files
    assert by_addr["0000:3b:00.0"] == {
        "address": "0000:3b:00.0", "class": "0x020000", "vendor": "0x15b3", "device": "0x101d",
        "driver": "mlx5_core", "current_speed_gts": 8.0, "max_speed_gts": 16.0, "current_width": 8,
        "max_width": 16, "numa_node": 0}
    gpu = by_addr["0000:18:00.0"]
    assert (gpu["driver"], gpu["current_speed_gts"], gpu["current_width"]) == ("nvidia", 32.0, 16)
    vf = by_addr["0000:3b:00.2"]  # 'Unknown' speeds are null, not errors
    assert (vf["current_speed_gts"], vf["max_speed_gts"], vf["current_width"]) == (None, None, 0)
    assert sorted(by_addr) == ["0000:17:01.0", "0000:18:00.0", "0000:3a:01.0", "0000:3b:00.0", "0000:3b:00.1",
                               "0000:3b:00.2"]


def test_pcie_healthy_links():
    devices = pcie.read(CPU_NODE)
    assert len(devices) == 3
    for d in devices:
        assert (d["current_speed_gts"], d["current_width"]) == (d["max_speed_gts"], d["max_width"]) == (16.0, 16)
        assert d["numa_node"] == 1


def test_pcie_device_without_driver(tmp_path):
    root = copy(CPU_NODE, tmp_path)
    (root / "sys/bus/pci/devices/0000:4b:00.1/driver").unlink()
    assert {d["address"]: d["driver"] for d in pcie.read(root)}["0000:4b:00.1"] is None


@pytest.mark.parametrize("text, gts", [("8.0 GT/s PCIe", 8.0), ("2.5 GT/s PCIe", 2.5), ("8 GT/s", 8.0),
                                       ("64.0 GT/s PCIe", 64.0), ("Unknown", None), ("Unknown speed", None),
                                       (None, None)])
def test_pcie_speed_text(text, gts):
    assert pcie.speed_gts(text) == gts


# -- NICs ----------------------------------------------------------------------------------------

def test_nics_rdma_port_with_ipv4_gid():
    got = nics.read(SPEC["nics"], GPU_NODE, ipv4=fixed_ipv4({"eth0": ["10.64.0.2/31"], "eth1": []}))
    assert got["eth0"] == {
        "present": True, "operstate": "up", "carrier": True, "admin_up": True, "mtu": 9000, "speed_mbps": 100000,
        "mac": "10:70:fd:3c:5e:7a", "carrier_changes": 4, "ipv4": ["10.64.0.2/31"],
        "rdma": {"device": "mlx5_0", "port": 1, "state": "ACTIVE", "phys_state": "LinkUp", "link_layer": "Ethernet",
                 "rate": "100 Gb/sec (4X EDR)", "fw_ver": "22.39.1002",
                 "gids": [
                     {"index": 0, "gid": "fe80:0000:0000:0000:1270:fdff:fe3c:5e7a", "type": "IB/RoCE v1", "ndev": "eth0"},
                     {"index": 1, "gid": "fe80:0000:0000:0000:1270:fdff:fe3c:5e7a", "type": "RoCE v2", "ndev": "eth0"},
                     {"index": 2, "gid": "0000:0000:0000:0000:0000:ffff:0a40:0002", "type": "IB/RoCE v1",
                      "ndev": "eth0"},
                     {"index": 3, "gid": "0000:0000:0000:0000:0000:ffff:0a40:0002", "type": "RoCE v2",
                      "ndev": "eth0"}]}}
    assert got["eth9"] == {"present": False}


def test_nics_rdma_port_without_ipv4_gid():
    eth1 = nics.read([{"name": "eth1"}], GPU_NODE, ipv4=fixed_ipv4({"eth1": []}))["eth1"]
    assert eth1["ipv4"] == []
    assert eth1["rdma"]["device"] == "mlx5_1"
    assert [g["index"] for g in eth1["rdma"]["gids"]] == [0, 1]
    assert not [g for g in eth1["rdma"]["gids"] if ":ffff:" in g["gid"]]  # no RoCE GID for an IPv4 address
    assert all(g["gid"] != ZERO for g in eth1["rdma"]["gids"])


def test_nics_without_rdma_and_without_carrier():
    got = nics.read([{"name": "eth0"}, {"name": "eth1"}], CPU_NODE, ipv4=fixed_ipv4({"eth0": ["10.1.0.7/24"]}))
    assert got["eth0"]["rdma"] is None
    assert got["eth0"]["speed_mbps"] == 100000
    eth1 = got["eth1"]
    assert (eth1["admin_up"], eth1["operstate"], eth1["carrier"], eth1["speed_mbps"]) == (True, "down", False, None)
    assert eth1["ipv4"] is None and eth1["ipv4_error"] == "not in this network namespace"


def test_nic_administratively_down(tmp_path):
    root = copy(CPU_NODE, tmp_path)
    d = root / "sys/class/net/eth1"
    (d / "flags").write_text("0x1002\n")
    for f in ("carrier", "speed"):  # the kernel answers EINVAL for both while the device is down
        (d / f).unlink()
    eth1 = nics.link(d)
    assert (eth1["admin_up"], eth1["carrier"], eth1["speed_mbps"]) == (False, None, None)


def test_rdma_port_found_through_pci_when_gids_do_not_name_the_nic(tmp_path):
    root = copy(GPU_NODE, tmp_path)
    shutil.rmtree(root / "sys/class/infiniband/mlx5_1/ports/1/gid_attrs/ndevs")
    rdma = nics.read([{"name": "eth1"}], root, ipv4=fixed_ipv4({"eth1": []}))["eth1"]["rdma"]
    assert (rdma["device"], rdma["port"], rdma["state"]) == ("mlx5_1", 1, "ACTIVE")
    assert [g["ndev"] for g in rdma["gids"]] == [None, None]


def test_address_reader_failing_keeps_link_facts():
    def broken(names):
        raise OSError("netlink socket: permission denied")
    eth0 = nics.read([{"name": "eth0"}], GPU_NODE, ipv4=broken)["eth0"]
    assert eth0["ipv4"] is None
    assert eth0["ipv4_error"] == "OSError: netlink socket: permission denied"
    assert eth0["mtu"] == 9000 and eth0["rdma"]["device"] == "mlx5_0"


def test_netlink_addresses_in_this_namespace():
    assert addrs.ipv4(["lo", "no-such-nic0"]) == {"lo": ["127.0.0.1/8"]}
    assert addrs.ipv4([]) == {}


def test_netlink_addresses_agree_with_pyroute2():
    import socket as sock

    from pyroute2 import IPRoute

    names = [name for _, name in sock.if_nameindex()]
    with IPRoute() as ipr:
        want: dict[str, list[str]] = {name: [] for name in names}
        for msg in ipr.get_addr(family=sock.AF_INET):
            name = sock.if_indextoname(msg["index"])
            want[name].append(f"{msg.get_attr('IFA_LOCAL') or msg.get_attr('IFA_ADDRESS')}/{msg['prefixlen']}")
    assert addrs.ipv4(names) == want


def test_netlink_framing_stops_at_a_malformed_length():
    good = addrs.HEADER.pack(addrs.HEADER.size + 4, addrs.NLMSG_DONE, 0, 1, 0) + b"\0" * 4
    bad = addrs.HEADER.pack(3, addrs.RTM_NEWADDR, 0, 1, 0)
    assert list(addrs.messages(good + bad + good)) == [(addrs.NLMSG_DONE, b"\0" * 4)]
    attr = addrs.ATTR.pack(8, addrs.IFA_LOCAL) + bytes([10, 0, 0, 1])
    assert addrs.attributes(attr + addrs.ATTR.pack(2, 9)) == {addrs.IFA_LOCAL: bytes([10, 0, 0, 1])}


# -- GPUs ----------------------------------------------------------------------------------------

def hopper_pair():
    """GPU 0: healthy but a row remap pending; GPU 1: ECC errors, persistence off, no serial or power reading."""
    return FakeNvml([
        FakeGpu(pci_bus_id="00000000:18:00.0", remapped_rows=(3, 0, 1, 0),
                fail={"nvmlDeviceGetRetiredPages": NOT_SUPPORTED, "nvmlDeviceGetRetiredPagesPendingStatus": NOT_SUPPORTED}),
        FakeGpu(uuid="GPU-0f3e9c44-1d2b-4a55-8e0f-7b6c5d4e3a21", pci_bus_id="00000000:2A:00.0", temperature=67,
                persistence=pynvml.NVML_FEATURE_DISABLED,
                ecc={(UNCORRECTED, VOLATILE): 2, (UNCORRECTED, AGGREGATE): 5, (CORRECTED, AGGREGATE): 310},
                clocks={pynvml.NVML_CLOCK_SM: 1410, pynvml.NVML_CLOCK_MEM: 2619},
                clock_reasons=pynvml.nvmlClocksThrottleReasonHwSlowdown | pynvml.nvmlClocksThrottleReasonSwPowerCap,
                pcie_link=(5, 5, 8, 16),
                fail={"nvmlDeviceGetSerial": NOT_SUPPORTED, "nvmlDeviceGetPowerUsage": NOT_SUPPORTED,
                      "nvmlDeviceGetRetiredPages": NOT_SUPPORTED}),
    ], driver="550.54.15", cuda_driver=12040)


def test_gpus_healthy_with_pending_remap():
    g = gpus.read(hopper_pair())
    assert (g["present"], g["driver"], g["cuda_driver"], g["count"]) == (True, "550.54.15", 12040, 2)
    d = g["devices"][0]
    assert d["pci_bus_id"] == "0000:18:00.0"  # as sysfs spells it, to join the pcie section
    assert d["uuid"] == "GPU-5b2a1d0e-8c3f-4f7e-9a61-0c2d9e4b7a10" and d["name"] == "NVIDIA H100 80GB HBM3"
    assert d["serial"] == "1654922012345"
    assert (d["persistence_mode"], d["ecc_mode_current"]) == (True, True)
    assert (d["ecc_uncorrected_volatile"], d["ecc_uncorrected_aggregate"]) == (0, 0)
    assert d["retired_pages"] is None  # Hopper: NotSupported
    assert d["remapped_rows"] == {"correctable": 3, "uncorrectable": 0, "pending": True, "failure": False}
    assert d["clocks"] == {"sm_mhz": 1980, "max_sm_mhz": 1980, "mem_mhz": 2619, "max_mem_mhz": 2619}
    assert d["throttle_reasons"] == ["gpu_idle"]
    assert d["pcie"] == {"gen": 5, "max_gen": 5, "width": 16, "max_width": 16}
    assert (d["temperature_c"], d["power_w"]) == (41, pytest.approx(118.54))
    assert set(d["unread"]) == {"retired_pages"}


def test_gpus_errors_persistence_off_and_unsupported_fields():
    d = gpus.read(hopper_pair())["devices"][1]
    assert d["pci_bus_id"] == "0000:2a:00.0"
    assert (d["ecc_uncorrected_volatile"], d["ecc_uncorrected_aggregate"]) == (2, 5)
    assert d["ecc_corrected_aggregate"] == 310
    assert d["persistence_mode"] is False
    assert d["serial"] is None and d["power_w"] is None  # NotSupported: that field only
    assert d["unread"]["serial"] == "Not Supported"
    assert d["temperature_c"] == 67 and d["clocks"]["sm_mhz"] == 1410
    assert set(d["throttle_reasons"]) == {"hw_slowdown", "sw_power_cap"}
    assert (d["pcie"]["width"], d["pcie"]["max_width"]) == (8, 16)
    json.dumps(d)  # plain data


def test_gpus_pre_ampere_retired_pages():
    nvml = FakeNvml([FakeGpu(name="Tesla V100-SXM2-32GB",
                             retired_pages={pynvml.NVML_PAGE_RETIREMENT_CAUSE_MULTIPLE_SINGLE_BIT_ECC_ERRORS: 2,
                                            pynvml.NVML_PAGE_RETIREMENT_CAUSE_DOUBLE_BIT_ECC_ERROR: 1},
                             retired_pending=pynvml.NVML_FEATURE_ENABLED,
                             fail={"nvmlDeviceGetRemappedRows": NOT_SUPPORTED})])
    d = gpus.read(nvml)["devices"][0]
    assert d["retired_pages"] == {"single_bit": 2, "double_bit": 1, "pending": True}
    assert d["remapped_rows"] is None


def test_gpus_ecc_disabled_and_old_driver():
    nvml = FakeNvml([FakeGpu(ecc_mode=(pynvml.NVML_FEATURE_DISABLED, pynvml.NVML_FEATURE_ENABLED),
                             clock_reasons=pynvml.nvmlClocksThrottleReasonSwThermalSlowdown,
                             fail={"nvmlDeviceGetCurrentClocksEventReasons": pynvml.NVML_ERROR_FUNCTION_NOT_FOUND})])
    d = gpus.read(nvml)["devices"][0]
    assert d["ecc_mode_current"] is False
    assert d["throttle_reasons"] == ["sw_thermal_slowdown"]  # through the pre-535 call


def test_gpu_lost_from_the_bus_is_listed():
    nvml = hopper_pair()
    real = nvml.nvmlDeviceGetHandleByIndex

    def handle(i):
        if i == 1:
            raise pynvml.NVMLError(pynvml.NVML_ERROR_GPU_IS_LOST)
        return real(i)
    nvml.nvmlDeviceGetHandleByIndex = handle
    g = gpus.read(nvml)
    assert g["devices"][1] == {"index": 1, "error": "nvmlDeviceGetHandleByIndex: GPU is lost"}
    assert g["devices"][0]["temperature_c"] == 41


def test_gpus_absent():
    nvml = FakeNvml([FakeGpu()], init_error=pynvml.NVML_ERROR_DRIVER_NOT_LOADED)
    assert gpus.read(nvml) == {"present": False, "reason": "nvmlInit: Driver Not Loaded"}
    none = FakeNvml([])
    assert gpus.read(none) == {"present": False, "reason": "NVML sees no GPUs"}
    assert none.calls[-1] == "nvmlShutdown"


def test_gpus_driver_version_unreadable():
    nvml = FakeNvml([FakeGpu()], fail={"nvmlSystemGetDriverVersion": pynvml.NVML_ERROR_UNKNOWN})
    g = gpus.read(nvml)
    assert g["driver"] is None and g["unread"] == {"driver": "Unknown Error"}
    assert g["devices"][0]["uuid"]


# -- names ---------------------------------------------------------------------------------------

def test_names_localhost_and_a_name_that_does_not_exist():
    got = names.read({"localhost": "127.0.0.1", "no-such-host.invalid": "10.0.0.9"})
    assert "127.0.0.1" in got["localhost"]["addresses"]
    assert set(got["no-such-host.invalid"]) == {"error"}  # RFC 6761: .invalid never resolves
    assert got["no-such-host.invalid"]["error"]


def test_names_bounded_in_time():
    def resolve(host, *args):
        if host == "slow":
            time.sleep(5)
        return [(socket.AF_INET, socket.SOCK_STREAM, 6, "", ("10.0.0.1", 0))] * 2

    start = time.monotonic()
    got = names.read(["slow", "fast"], timeout=0.3, resolve=resolve)
    assert time.monotonic() - start < 2
    assert got == {"slow": {"error": "no answer within 0.3 s"}, "fast": {"addresses": ["10.0.0.1"]}}


def test_a_stuck_lookup_does_not_hold_up_exit():
    code = ("import time; from clockfabric.audit.facts import names; "
            "print(names.read(['stuck'], timeout=0.2, resolve=lambda *a: time.sleep(60)))")
    start = time.monotonic()
    proc = subprocess.run([sys.executable, "-c", code], capture_output=True, text=True, timeout=60, check=True)
    assert "no answer within 0.2 s" in proc.stdout
    assert time.monotonic() - start < 20


# -- collect -------------------------------------------------------------------------------------

def test_collect_gpu_node():
    f = facts.collect(SPEC, root=GPU_NODE, nvml=hopper_pair(), ipv4=fixed_ipv4({"eth0": ["10.64.0.2/31"]}))
    assert list(f) == ["host", "collected_ns", "hostname", "software", "memory", "pcie", "nics", "gpus", "names",
                       "errors"]
    assert f["errors"] == {}
    assert f["host"] == "h3" and f["hostname"] == socket.gethostname()
    assert abs(f["collected_ns"] - time.time_ns()) < 60e9
    assert f["memory"]["dimms"] == 16
    assert f["nics"]["eth0"]["rdma"]["gids"][3]["type"] == "RoCE v2"
    assert f["nics"]["eth9"] == {"present": False}
    assert f["gpus"]["devices"][1]["ecc_uncorrected_volatile"] == 2
    assert "127.0.0.1" in f["names"]["localhost"]["addresses"]
    assert json.loads(json.dumps(f)) == f


def test_collect_takes_driver_from_nvml_without_proc():
    f = facts.collect({"host": "h1"}, root=CPU_NODE, nvml=FakeNvml([FakeGpu()], driver="535.161.08"))
    assert f["software"]["nvidia_driver"] == "535.161.08"
    assert f["nics"] == {} and f["names"] == {}


def test_a_reader_that_raises_costs_only_its_section(monkeypatch):
    def boom(root):
        raise OSError("sysfs went away")
    monkeypatch.setattr(pcie, "read", boom)
    f = facts.collect(SPEC, root=GPU_NODE, nvml=FakeNvml([]), ipv4=fixed_ipv4({}))
    assert f["pcie"] == {"error": "OSError: sysfs went away"}
    assert f["errors"] == {"pcie": "OSError: sysfs went away"}
    assert f["memory"]["dimms"] == 16 and f["nics"]["eth0"]["present"]
    assert f["gpus"] == {"present": False, "reason": "NVML sees no GPUs"}


def test_malformed_spec_costs_only_its_sections():
    f = facts.collect({"host": "h1", "nics": 5, "names": 7}, root=CPU_NODE, nvml=FakeNvml([]))
    assert set(f["errors"]) == {"nics", "names"}
    assert f["nics"]["error"].startswith("TypeError") and f["names"]["error"].startswith("TypeError")
    assert f["memory"]["dimms"] == 15


def test_spec_that_is_not_an_object_still_reports():
    f = facts.collect(["eth0"], root=CPU_NODE, nvml=FakeNvml([]))
    assert f["errors"] == {"spec": "spec must be an object, not list"}
    assert f["host"] is None and f["memory"]["dimms"] == 15


def test_collect_on_this_machine():
    f = facts.collect({"host": "here", "nics": [{"name": "lo"}], "names": {"localhost": "127.0.0.1"}})
    assert f["errors"] == {}
    if f["gpus"]["present"]:
        pytest.skip("an NVIDIA GPU is here")
    assert f["gpus"]["reason"].startswith(("nvmlInit:", "pynvml not installed"))
    phys = os.sysconf("SC_PAGE_SIZE") * os.sysconf("SC_PHYS_PAGES")
    assert abs(f["memory"]["total_bytes"] - phys) <= 0.01 * phys
    assert f["software"]["kernel"] == platform.release() and f["software"]["os"]
    assert f["software"]["packages"]["clockfabric"] == clockfabric.__version__
    lo = f["nics"]["lo"]
    assert lo["present"] and lo["ipv4"] == ["127.0.0.1/8"] and lo["admin_up"] and lo["rdma"] is None
    assert isinstance(f["pcie"], list)
    for d in f["pcie"]:
        assert d["address"].count(":") == 2 and d["class"].startswith("0x")
    assert "127.0.0.1" in f["names"]["localhost"]["addresses"]
    assert json.loads(json.dumps(f)) == f


def test_collect_is_quick_and_imports_nothing_heavy():
    code = ("import sys, time, json; from clockfabric.audit.facts import collect; t = time.perf_counter(); "
            "f = collect({'host': 'h', 'nics': [{'name': 'lo'}], 'names': {'localhost': ''}}); "
            "print(json.dumps([time.perf_counter() - t, "
            "[m for m in ('torch', 'scipy', 'typer', 'rich', 'numpy') if m in sys.modules]]))")
    proc = subprocess.run([sys.executable, "-c", code], capture_output=True, text=True, timeout=60, check=True)
    took, heavy = json.loads(proc.stdout)
    assert heavy == []
    assert took < 1.0


# -- python -m clockfabric.audit.facts -----------------------------------------------------------

def test_main_prints_facts_as_json():
    spec = json.dumps({"host": "h9", "nics": [{"name": "lo", "plane": 0}], "names": {"localhost": "127.0.0.1"}})
    proc = subprocess.run([sys.executable, "-m", "clockfabric.audit.facts", spec], capture_output=True, text=True,
                          timeout=60)
    assert proc.returncode == 0, proc.stderr
    f = json.loads(proc.stdout)
    assert f["host"] == "h9" and f["nics"]["lo"]["present"] and f["errors"] == {}


def test_main_with_a_malformed_spec_exits_2_with_one_line():
    proc = subprocess.run([sys.executable, "-m", "clockfabric.audit.facts", '{"host": "h1",'], capture_output=True,
                          text=True, timeout=60)
    assert proc.returncode == 2
    assert proc.stdout == ""
    assert len(proc.stderr.splitlines()) == 1 and proc.stderr.startswith("facts: spec is not JSON")


@pytest.mark.parametrize("argv, says", [
    ([], "give the spec as one argument"),
    (["{}", "extra"], "give the spec as one argument"),
    (["[1, 2]"], "must be a JSON object"),
    (['{"nics": []}'], 'needs "host"'),
    (['{"host": "h1", "nics": "eth0"}'], '"nics" must be a list'),
    (['{"host": "h1", "nics": [{"plane": 0}]}'], '"nics" must be a list'),
    (['{"host": "h1", "names": "h0"}'], '"names" must map'),
])
def test_main_bad_specs(argv, says, capsys):
    assert facts_main.main(argv) == 2
    out, err = capsys.readouterr()
    assert out == "" and len(err.splitlines()) == 1 and says in err


def test_main_reads_spec_from_stdin(monkeypatch, capsys):
    monkeypatch.setattr(sys, "stdin", __import__("io").StringIO('{"host": "h2", "nics": []}'))
    assert facts_main.main(["-"]) == 0
    assert json.loads(capsys.readouterr().out)["host"] == "h2"
