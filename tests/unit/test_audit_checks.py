"""Every audit check (clockfabric.audit.checks) but collective.allreduce, on synthetic fleets.

Each host's report is shaped like the real thing: the facts schema (clockfabric.audit.facts;
GPUs come from the fake NVML through the real reader), "reach" as audit/reach.py writes it
(nic -> {peer address: {sent, received, rtt_us}}) for the rail peers gather.specs asks for,
and "lldp" as lldp.listen returns it (nic -> {chassis, port, system, ...} or None). A clean
fleet passes every check; each test then breaks one thing and looks for the verdict, the host
and the device named, and nothing else.
"""

from __future__ import annotations

import copy
import ipaddress

import pynvml
import pytest

from clockfabric.audit import expect
from clockfabric.audit.context import Context
from clockfabric.audit.facts import gpus as gpu_facts
from clockfabric.audit.gather import specs
from clockfabric.audit.model import Verdict
from clockfabric.audit.registry import all_checks, get_check
from clockfabric.topology import interfaces, leafspine, multirail
from tests.fakes.fake_nvml import FakeGpu, FakeNvml

GIB = 2**30
PINGS = 5
SOFTWARE = {"kernel": "6.8.0-45-generic", "os": "Ubuntu 22.04.4 LTS", "python": "3.11.7",
            "packages": {"torch": "2.3.1", "numpy": "1.26.4", "nvidia-ml-py": "12.550.52", "clockfabric": "0.1.0",
                         "nvidia-nccl-cu12": "2.21.5", "nvidia-nccl-cu13": None},
            "nvidia_driver": "550.54.15", "nccl": "2.21.5", "nccl_source": "wheel nvidia-nccl-cu12",
            "rdma_core": "50.0"}
GPU_CLASS, NIC_CLASS, BRIDGE_CLASS, NVME_CLASS = "0x030200", "0x020000", "0x060400", "0x010802"
CHECKS = [c for c in all_checks() if c.id != "collective.allreduce"]


def gid(address: str) -> str:
    """An IPv4-mapped GID as sysfs writes it: eight 4-digit groups."""
    return ipaddress.IPv6Address(f"::ffff:{address}").exploded


def rdma_port(nic: str, index: int, address: str, v2_index: int = 3) -> dict:
    """A ConnectX port as facts/nics.py reports it: link-local GIDs at 0/1, the IPv4 ones after."""
    link_local = "fe80:0000:0000:0000:1270:fdff:fe3c:5e7a"
    gids = [{"index": 0, "gid": link_local, "type": "IB/RoCE v1", "ndev": nic},
            {"index": 1, "gid": link_local, "type": "RoCE v2", "ndev": nic},
            {"index": 2, "gid": gid(address), "type": "IB/RoCE v1", "ndev": nic},
            {"index": v2_index, "gid": gid(address), "type": "RoCE v2", "ndev": nic}]
    return {"device": f"mlx5_{index}", "port": 1, "state": "ACTIVE", "phys_state": "LinkUp", "link_layer": "Ethernet",
            "rate": "100 Gb/sec (4X EDR)", "fw_ver": "22.39.1002", "gids": gids}


def gpu_section(n: int, faults: dict[int, dict] | None = None) -> dict:
    """n healthy H100s through the real NVML reader; faults: {gpu index: FakeGpu keyword overrides}."""
    faults = faults or {}
    fakes = [FakeGpu(uuid=f"GPU-{i:08d}-0000-0000-0000-000000000000", pci_bus_id=f"00000000:{0x18 + i:02X}:00.0",
                     **faults.get(i, {})) for i in range(n)]
    return gpu_facts.read(FakeNvml(fakes))


class Fleet:
    """A healthy fleet's reports for `topo`, with ways to break it."""

    def __init__(self, topo, *, gpus: int = 2, rdma: bool = True, rtt_us: float = 40.0):
        self.topo = topo
        self.addr = {(p.node, p.iface): str(i.address.ip) for p, i in interfaces(topo).items()
                     if p.node in topo.hosts}
        self.owner = {a: hn for hn, a in self.addr.items()}
        self.cabled = {(h, lk.port(h).iface): lk.other(h) for h in topo.hosts for lk in topo.links_of(h)}
        asked = specs(topo, list(topo.hosts), pings=PINGS, lldp_wait_s=1.0)
        self.reports = {}
        for k, h in enumerate(topo.hosts):
            nics = {}
            for n in topo.hosts[h].nics:
                a = self.addr[(h, n.name)]
                nics[n.name] = {"present": True, "operstate": "up", "carrier": True, "admin_up": True, "mtu": 9000,
                                "speed_mbps": 100000, "mac": f"10:70:fd:00:{k:02x}:{n.plane:02x}",
                                "carrier_changes": 2, "ipv4": [f"{a}/31"],
                                "rdma": rdma_port(n.name, n.plane, a) if rdma else None}
            pcie = [{"address": "0000:17:01.0", "class": BRIDGE_CLASS, "vendor": "0x8086", "device": "0x352a",
                     "driver": "pcieport", "current_speed_gts": 32.0, "max_speed_gts": 32.0, "current_width": 16,
                     "max_width": 16, "numa_node": 0}]
            pcie += [{"address": f"0000:{0x18 + i:02x}:00.0", "class": GPU_CLASS, "vendor": "0x10de",
                      "device": "0x2330", "driver": "nvidia", "current_speed_gts": 32.0, "max_speed_gts": 32.0,
                      "current_width": 16, "max_width": 16, "numa_node": 0} for i in range(gpus)]
            pcie += [{"address": f"0000:3b:00.{n.plane}", "class": NIC_CLASS, "vendor": "0x15b3", "device": "0x101d",
                      "driver": "mlx5_core", "current_speed_gts": 16.0, "max_speed_gts": 16.0, "current_width": 16,
                      "max_width": 16, "numa_node": 0} for n in topo.hosts[h].nics]
            pcie += [{"address": "0000:5e:00.0", "class": NVME_CLASS, "vendor": "0x144d", "device": "0xa80a",
                      "driver": "nvme", "current_speed_gts": 16.0, "max_speed_gts": 16.0, "current_width": 4,
                      "max_width": 4, "numa_node": 0}]
            lldp = {}
            for n in topo.hosts[h].nics:
                sw = self.cabled[(h, n.name)]
                lldp[n.name] = {"chassis": sw.node, "port": sw.iface, "ttl": 120, "system": sw.node,
                                "port_description": f"{h}:{n.name}"}
            reach = {nic: {peer: {"sent": PINGS, "received": PINGS, "rtt_us": [rtt_us] * (PINGS - 1)}
                           for peer in peers} for nic, peers in asked[h]["reach"].items()}
            self.reports[h] = {
                "host": h, "collected_ns": 1_700_000_000_000_000_000, "hostname": h,
                "software": copy.deepcopy(SOFTWARE),
                "memory": {"total_bytes": 527937460 * 1024, "dimms": 16, "dimm_bytes": [32 * GIB] * 16,
                           "dimm_labels": [f"DIMM#{i}" for i in range(16)], "source": "edac"},
                "pcie": pcie, "nics": nics,
                "gpus": gpu_section(gpus) if gpus else {"present": False, "reason": "nvmlInit: Driver Not Loaded"},
                "names": {o: {"addresses": [str(topo.hosts[o].address)]} for o in topo.hosts},
                "errors": {}, "lldp": lldp, "reach": reach}
        self.missing: dict[str, str] = {}

    def context(self, expectations: dict | None = None, hosts: list[str] | None = None) -> Context:
        return Context(self.topo, hosts or list(self.topo.hosts), self.reports, self.missing,
                       expect=expect.parse(expectations))

    # -- breaking it --------------------------------------------------------------------------------
    def nic(self, host: str, nic: str) -> dict:
        return self.reports[host]["nics"][nic]

    def pings(self):
        """Every ping record: ((src host, nic), (dst host, nic), record)."""
        for h, r in self.reports.items():
            for nic, targets in r["reach"].items():
                for addr, rec in targets.items():
                    if addr == "error":  # this NIC could not ping at all
                        continue
                    yield (h, nic), self.owner[addr], rec

    def set_pings(self, touches, received: int | None = None, rtt_us: float | None = None) -> None:
        for src, dst, rec in self.pings():
            if touches(src, dst):
                if received is not None:
                    rec["received"] = received
                    rec["rtt_us"] = rec["rtt_us"][:max(0, received - 1)]
                if rtt_us is not None:
                    rec["rtt_us"] = [rtt_us] * len(rec["rtt_us"])

    def dead(self, host: str, nic: str) -> None:
        """Nothing gets through this NIC, either way."""
        self.set_pings(lambda s, d: (host, nic) in (s, d), received=0)

    def dead_pair(self, a: tuple[str, str], b: tuple[str, str]) -> None:
        self.set_pings(lambda s, d: {s, d} == {a, b}, received=0)

    def hear(self, host: str, nic: str, switch: str, port: str) -> None:
        self.reports[host]["lldp"][nic] = {"chassis": switch, "port": port, "ttl": 120, "system": switch}


def run(check_id: str, ctx: Context):
    outcome = get_check(check_id).run(ctx)
    return outcome, [f for f in outcome.findings if f.verdict is not Verdict.PASS]


def where(findings) -> list[tuple[str, str, str]]:
    return sorted((f.verdict.value, f.host, f.device) for f in findings)


@pytest.fixture
def fleet():
    """Four hosts, two rails (eth0 on plane 0, eth1 on plane 1), two leaves per rail; RoCE, 2 GPUs each."""
    return Fleet(multirail(4, 2, 2, 1))


def test_the_helpers_build_what_the_checks_read(fleet):
    """Guard for everything below: the synthetic reports are complete and match the topology's plan."""
    assert set(fleet.reports) == {"h0", "h1", "h2", "h3"}
    assert fleet.reports["h0"]["reach"]["eth1"] == {a: {"sent": 5, "received": 5, "rtt_us": [40.0] * 4}
                                                    for a in ("10.65.0.2", "10.65.0.4", "10.65.0.6")}
    assert fleet.reports["h2"]["lldp"]["eth0"]["system"] == "p0-leaf1"
    assert fleet.reports["h0"]["gpus"]["count"] == 2
    ctx = fleet.context()
    assert ctx.interface_addresses()[("h3", "eth1")] == "10.65.0.6"


@pytest.mark.parametrize("check", CHECKS, ids=lambda c: c.id)
def test_a_clean_fleet_passes_every_check(fleet, check):
    ctx = fleet.context()
    outcome, bad = run(check.id, ctx)
    assert bad == [], [f"{f.verdict.value} {f.where}: {f.message}" for f in bad]
    assert outcome.summary
    assert ctx.broken == {}


def test_clean_fleet_every_check_judged_something(fleet):
    """A clean pass that judged nothing would be a check that cannot fail."""
    ctx = fleet.context()
    summaries = {c.id: get_check(c.id).run(ctx).summary for c in CHECKS}
    assert summaries["configuration.software"] == "11 versions compared on 4 hosts"  # nvidia-nccl-cu13: nowhere
    assert summaries["configuration.memory"] == "4 hosts, median 503.5 GiB, 4 with DIMM counts"
    assert summaries["configuration.pcie"] == "24 PCIe links on 4 hosts"
    assert summaries["configuration.gpu"].startswith("8 GPUs on 4 hosts")
    assert summaries["frontend.mtu"] == "8 NICs on 2 planes"
    assert summaries["backend.nic_init"] == "8 NICs on 4 hosts"
    assert summaries["backend.cabling"] == "8 of 8 NICs heard their switch port over LLDP"
    assert summaries["backend.gid"] == "8 RDMA NICs, RoCE v2 GID index 3"
    assert summaries["backend.connectivity"] == "12 NIC pairs on 2 rails, 8 NICs"
    assert summaries["backend.latency"].startswith("12 rail pairs, typical floor 40 µs")


# ---- configuration.software -------------------------------------------------------------------

def test_software_odd_host_out_fails(fleet):
    fleet.reports["h2"]["software"]["nccl"] = "2.19.3"
    ctx = fleet.context()
    _, bad = run("configuration.software", ctx)
    assert where(bad) == [("fail", "h2", "")]
    assert "nccl 2.19.3" in bad[0].message and "2.21.5" in bad[0].message
    assert bad[0].evidence == {"field": "nccl", "found": "2.19.3", "expected": "2.21.5"}
    assert ctx.derived["software.nccl"] == "2.21.5"


def test_software_kernel_difference_is_a_warning(fleet):
    fleet.reports["h1"]["software"]["kernel"] = "6.8.0-49-generic"
    _, bad = run("configuration.software", fleet.context())
    assert where(bad) == [("warn", "h1", "")]


def test_software_no_majority_warns_once_for_the_fleet(fleet):
    for h in ("h2", "h3"):
        fleet.reports[h]["software"]["packages"]["torch"] = "2.4.0"
    _, bad = run("configuration.software", fleet.context())
    assert where(bad) == [("warn", "", "")]
    assert "torch: no majority" in bad[0].message
    assert bad[0].evidence["versions"] == {"h0": "2.3.1", "h1": "2.3.1", "h2": "2.4.0", "h3": "2.4.0"}


def test_software_written_expectation_beats_the_majority(fleet):
    fleet.reports["h3"]["software"]["nccl"] = "2.22.3"
    ctx = fleet.context({"software": {"nccl": "2.22.3", "packages": {"torch": "2.4.0"}}})
    _, bad = run("configuration.software", ctx)
    nccl = [f for f in bad if f.evidence.get("field") == "nccl"]
    torch = [f for f in bad if f.evidence.get("field") == "torch"]
    assert where(nccl) == [("fail", "h0", ""), ("fail", "h1", ""), ("fail", "h2", "")]
    assert "the fleet expects 2.22.3" in nccl[0].message
    assert where(torch) == [("fail", h, "") for h in ("h0", "h1", "h2", "h3")]
    assert "software.nccl" not in ctx.derived  # written down, not derived


def test_software_expected_package_installed_nowhere(fleet):
    _, bad = run("configuration.software", fleet.context({"software": {"packages": {"deepspeed": "0.14.4"}}}))
    assert where(bad) == [("fail", h, "") for h in ("h0", "h1", "h2", "h3")]
    assert bad[0].message == "deepspeed not installed; the fleet expects 0.14.4"


def test_software_package_missing_on_one_host(fleet):
    fleet.reports["h1"]["software"]["packages"]["torch"] = None
    _, bad = run("configuration.software", fleet.context())
    assert where(bad) == [("fail", "h1", "")]
    assert bad[0].message == "torch not installed; the fleet has 2.3.1"


def test_software_package_absent_from_one_hosts_list(fleet):
    """A host whose report lacks the package's key altogether counts as not having it."""
    del fleet.reports["h3"]["software"]["packages"]["numpy"]
    _, bad = run("configuration.software", fleet.context())
    assert where(bad) == [("fail", "h3", "")]


def test_software_package_on_a_minority_of_hosts_does_not_fail_the_rest(fleet):
    fleet.reports["h0"]["software"]["packages"]["nvidia-nccl-cu13"] = "2.27.3"
    _, bad = run("configuration.software", fleet.context())
    assert not [f for f in bad if f.host in ("h1", "h2", "h3") and f.verdict is Verdict.FAIL]


def test_software_unreadable_everywhere_is_unknown(fleet):
    for r in fleet.reports.values():
        r["software"] = {"error": "OSError: /etc/os-release: permission denied"}
    _, bad = run("configuration.software", fleet.context())
    assert where(bad) == [("unknown", "", "")]


def test_software_one_unreadable_host_is_left_out(fleet):
    fleet.reports["h0"]["software"] = {"error": "OSError: boom"}
    fleet.reports["h1"]["software"]["nccl"] = "2.19.3"
    out, bad = run("configuration.software", fleet.context())
    assert where(bad) == [("fail", "h1", "")]
    assert "on 3 hosts" in out.summary


# ---- configuration.memory ---------------------------------------------------------------------

def drop_dimm(fleet: Fleet, host: str) -> None:
    m = fleet.reports[host]["memory"]
    m["total_bytes"] -= 32 * GIB
    m["dimms"] -= 1
    m["dimm_bytes"] = m["dimm_bytes"][:-1]


def test_memory_host_with_one_dimm_fewer(fleet):
    drop_dimm(fleet, "h2")
    _, bad = run("configuration.memory", fleet.context())
    assert where(bad) == [("fail", "h2", ""), ("fail", "h2", "")]
    by_kind = {("dimms" in f.evidence): f for f in bad}
    assert by_kind[True].evidence == {"dimms": 15, "expected": 16}
    assert by_kind[False].evidence["expected_gib"] == pytest.approx(503.49, abs=0.01)
    assert by_kind[False].evidence["total_gib"] == pytest.approx(471.49, abs=0.01)


def test_memory_less_memory_same_dimms(fleet):
    fleet.reports["h0"]["memory"]["total_bytes"] = 400 * GIB  # e.g. memory mirroring turned on in the BIOS
    _, bad = run("configuration.memory", fleet.context())
    assert where(bad) == [("fail", "h0", "")]
    assert bad[0].message.startswith("400.0 GiB of memory")


def test_memory_within_tolerance_passes(fleet):
    fleet.reports["h0"]["memory"]["total_bytes"] = int(527937460 * 1024 * 0.98)  # firmware reserves a bit more
    _, bad = run("configuration.memory", fleet.context())
    assert bad == []
    _, bad = run("configuration.memory", fleet.context({"memory": {"tolerance": 0.01}}))
    assert where(bad) == [("fail", "h0", "")]


def test_memory_more_memory_is_not_a_fault(fleet):
    fleet.reports["h1"]["memory"]["total_bytes"] *= 2
    _, bad = run("configuration.memory", fleet.context())
    assert bad == []


def test_memory_written_size_wins(fleet):
    _, bad = run("configuration.memory", fleet.context({"memory": {"total_gib": 1024, "dimms": 32}}))
    assert sorted({f.host for f in bad}) == ["h0", "h1", "h2", "h3"]
    assert len(bad) == 8


def test_memory_without_dimm_counts_still_judges_size(fleet):
    for r in fleet.reports.values():
        r["memory"].update(dimms=None, dimm_bytes=None, dimm_labels=None, source=None)
    fleet.reports["h3"]["memory"]["total_bytes"] //= 2
    out, bad = run("configuration.memory", fleet.context())
    assert where(bad) == [("fail", "h3", "")]
    assert "DIMM counts not readable" in out.summary


def test_memory_unreadable_everywhere_is_unknown(fleet):
    for r in fleet.reports.values():
        r["memory"] = {"error": "FileNotFoundError: proc/meminfo"}
    _, bad = run("configuration.memory", fleet.context())
    assert where(bad) == [("unknown", "", "")]


def test_memory_two_hosts_one_dimm_fewer_names_only_that_host():
    fleet = Fleet(leafspine(2, 1, 0))
    drop_dimm(fleet, "h1")
    _, bad = run("configuration.memory", fleet.context())
    dimm_findings = [f for f in bad if "dimms" in f.evidence]
    assert [f.host for f in dimm_findings] == ["h1"]
    assert dimm_findings[0].evidence["expected"] == 16


# ---- configuration.pcie -----------------------------------------------------------------------

def pci(fleet: Fleet, host: str, address: str) -> dict:
    return next(d for d in fleet.reports[host]["pcie"] if d["address"] == address)


def test_pcie_nic_at_x8_of_x16_fails(fleet):
    pci(fleet, "h1", "0000:3b:00.1")["current_width"] = 8
    _, bad = run("configuration.pcie", fleet.context())
    assert where(bad) == [("fail", "h1", "0000:3b:00.1")]
    assert bad[0].message == "mlx5_core 0x15b3:0x101d link x8, capable of x16"


def test_pcie_nic_at_lower_speed_fails(fleet):
    pci(fleet, "h3", "0000:3b:00.0")["current_speed_gts"] = 8.0
    _, bad = run("configuration.pcie", fleet.context())
    assert where(bad) == [("fail", "h3", "0000:3b:00.0")]
    assert "8 GT/s, capable of 16 GT/s" in bad[0].message


def test_pcie_gpu_at_lower_speed_is_not_judged(fleet):
    pci(fleet, "h0", "0000:18:00.0")["current_speed_gts"] = 2.5  # idle GPUs drop to gen1
    _, bad = run("configuration.pcie", fleet.context())
    assert bad == []


def test_pcie_gpu_at_lower_width_fails(fleet):
    pci(fleet, "h0", "0000:19:00.0")["current_width"] = 8
    _, bad = run("configuration.pcie", fleet.context())
    assert where(bad) == [("fail", "h0", "0000:19:00.0")]


def test_pcie_other_device_degraded_is_a_warning(fleet):
    d = pci(fleet, "h2", "0000:5e:00.0")
    d["current_width"], d["current_speed_gts"] = 2, 8.0
    _, bad = run("configuration.pcie", fleet.context())
    assert where(bad) == [("warn", "h2", "0000:5e:00.0"), ("warn", "h2", "0000:5e:00.0")]


def test_pcie_ignore_by_address_or_id(fleet):
    pci(fleet, "h1", "0000:3b:00.1")["current_width"] = 8
    pci(fleet, "h2", "0000:5e:00.0")["current_width"] = 2
    _, bad = run("configuration.pcie", fleet.context({"pcie": {"ignore": ["0000:3b:00.1"]}}))
    assert where(bad) == [("warn", "h2", "0000:5e:00.0")]
    _, bad = run("configuration.pcie", fleet.context({"pcie": {"ignore": ["0x144d:0xa80a", "0000:3b:00.1"]}}))
    assert bad == []


def test_pcie_unknown_link_speeds_are_not_judged(fleet):
    fleet.reports["h0"]["pcie"].append({"address": "0000:3b:00.2", "class": NIC_CLASS, "vendor": "0x15b3",
                                        "device": "0x101e", "driver": "mlx5_core", "current_speed_gts": None,
                                        "max_speed_gts": None, "current_width": 0, "max_width": 16,
                                        "numa_node": 0})  # a VF: 'Unknown' speed, width 0
    _, bad = run("configuration.pcie", fleet.context())
    assert bad == []


def test_pcie_nothing_anywhere_is_a_skip(fleet):
    for r in fleet.reports.values():
        r["pcie"] = []
    _, bad = run("configuration.pcie", fleet.context())
    assert where(bad) == [("skip", "", "")]


# ---- configuration.gpu ------------------------------------------------------------------------

def gpu_fault(fleet: Fleet, host: str, index: int, **fake) -> None:
    n = fleet.reports[host]["gpus"]["count"]
    fleet.reports[host]["gpus"] = gpu_section(n, {index: fake})


@pytest.mark.parametrize("fake, verdict, says", [
    ({"ecc_mode": (pynvml.NVML_FEATURE_DISABLED, pynvml.NVML_FEATURE_DISABLED)}, "fail", "ECC is off"),
    ({"ecc": {(pynvml.NVML_MEMORY_ERROR_TYPE_UNCORRECTED, pynvml.NVML_VOLATILE_ECC): 3}}, "fail",
     "3 uncorrected ECC errors"),
    ({"remapped_rows": (0, 1, 1, 0)}, "fail", "row remap pending"),
    ({"remapped_rows": (0, 1, 0, 1)}, "fail", "row remapping failed"),
    ({"remapped_rows": (2, 4, 0, 0)}, "warn", "4 rows remapped"),
    ({"retired_pending": pynvml.NVML_FEATURE_ENABLED}, "fail", "page retirement pending"),
    ({"persistence": pynvml.NVML_FEATURE_DISABLED}, "warn", "persistence mode off"),
    ({"clock_reasons": pynvml.nvmlClocksThrottleReasonHwThermalSlowdown}, "warn", "hw_thermal_slowdown"),
    ({"max_clocks": {pynvml.NVML_CLOCK_SM: 1755, pynvml.NVML_CLOCK_MEM: 2619}}, "warn", "max SM clock 1755 MHz"),
    ({"pcie_link": (5, 5, 8, 16)}, "fail", "PCIe x8, capable of x16"),
])
def test_gpu_fault_is_named_on_that_gpu(fleet, fake, verdict, says):
    gpu_fault(fleet, "h2", 1, **fake)
    _, bad = run("configuration.gpu", fleet.context())
    assert where(bad) == [(verdict, "h2", "gpu1")]
    assert says in bad[0].message
    assert bad[0].evidence["uuid"] == "GPU-00000001-0000-0000-0000-000000000000"


def test_gpu_sw_power_cap_is_not_a_fault(fleet):
    gpu_fault(fleet, "h0", 0, clock_reasons=pynvml.nvmlClocksThrottleReasonSwPowerCap)
    _, bad = run("configuration.gpu", fleet.context())
    assert bad == []


def test_gpu_count_short(fleet):
    fleet.reports["h3"]["gpus"] = gpu_section(1)
    ctx = fleet.context()
    _, bad = run("configuration.gpu", ctx)
    assert where(bad) == [("fail", "h3", "")]
    assert bad[0].message == "1 GPUs; the fleet expects 2"
    assert ctx.derived["gpu.count"] == 2


def test_gpu_driver_not_loaded_on_one_host(fleet):
    fleet.reports["h1"]["gpus"] = {"present": False, "reason": "nvmlInit: Driver Not Loaded"}
    _, bad = run("configuration.gpu", fleet.context())
    assert where(bad) == [("fail", "h1", "")]
    assert bad[0].evidence == {"gpus": 0, "expected": 2}


def test_gpu_expectations_written(fleet):
    gpu_fault(fleet, "h0", 0, ecc_mode=(pynvml.NVML_FEATURE_DISABLED, pynvml.NVML_FEATURE_DISABLED),
              persistence=pynvml.NVML_FEATURE_DISABLED)
    _, bad = run("configuration.gpu", fleet.context({"gpu": {"ecc": False, "persistence": False}}))
    assert bad == []
    _, bad = run("configuration.gpu", fleet.context({"gpu": {"count": 8}}))
    assert where(f for f in bad if not f.device) == [("fail", h, "") for h in ("h0", "h1", "h2", "h3")]
    assert where(f for f in bad if f.device) == [("fail", "h0", "gpu0"), ("warn", "h0", "gpu0")]


def test_gpu_none_anywhere_is_a_skip():
    fleet = Fleet(multirail(4, 2, 2, 1), gpus=0)
    _, bad = run("configuration.gpu", fleet.context())
    assert where(bad) == [("skip", "", "")]
    assert "Driver Not Loaded" in bad[0].message


def test_gpu_lost_from_the_bus_fails(fleet):
    fleet.reports["h1"]["gpus"]["devices"][1] = {"index": 1, "error": "nvmlDeviceGetHandleByIndex: GPU is lost"}
    _, bad = run("configuration.gpu", fleet.context())
    assert [(f.verdict.value, f.host) for f in bad] == [("fail", "h1")]


def test_gpu_max_clock_without_majority_blames_no_single_gpu():
    fleet = Fleet(leafspine(2, 1, 0), gpus=1)
    gpu_fault(fleet, "h1", 0, max_clocks={pynvml.NVML_CLOCK_SM: 1755, pynvml.NVML_CLOCK_MEM: 2619})
    _, bad = run("configuration.gpu", fleet.context())
    assert not [f for f in bad if f.host and "max SM clock" in f.message]


# ---- frontend.reach ---------------------------------------------------------------------------

def test_reach_names_the_silent_host(fleet):
    del fleet.reports["h2"]
    fleet.missing["h2"] = "no answer within 20 s"
    out, bad = run("frontend.reach", fleet.context())
    assert where(bad) == [("fail", "h2", "")]
    assert bad[0].message == "no answer within 20 s"
    assert out.summary == "3 of 4 hosts answered"


# ---- frontend.mtu -----------------------------------------------------------------------------

def test_mtu_mismatch_on_one_nic(fleet):
    fleet.nic("h2", "eth1")["mtu"] = 1500
    _, bad = run("frontend.mtu", fleet.context())
    assert where(bad) == [("fail", "h2", "eth1")]
    assert bad[0].evidence == {"mtu": 1500, "expected": 9000, "plane": 1}


def test_mtu_no_majority_on_a_plane_warns(fleet):
    for h in ("h0", "h1"):
        fleet.nic(h, "eth0")["mtu"] = 1500
    _, bad = run("frontend.mtu", fleet.context())
    assert where(bad) == [("warn", "", "")]
    assert bad[0].message.startswith("plane 0: no majority MTU")


def test_mtu_written_expectation(fleet):
    fleet.nic("h0", "eth0")["mtu"] = 4200
    _, bad = run("frontend.mtu", fleet.context({"network": {"mtu": 4200}}))
    assert len(bad) == 7 and ("fail", "h0", "eth0") not in where(bad)


def test_mtu_missing_nic_is_not_judged(fleet):
    fleet.reports["h1"]["nics"]["eth0"] = {"present": False}
    out, bad = run("frontend.mtu", fleet.context())
    assert bad == [] and out.summary == "7 NICs on 2 planes"


# ---- frontend.names ---------------------------------------------------------------------------

def test_names_one_host_cannot_resolve(fleet):
    fleet.reports["h2"]["names"]["h0"] = {"error": "Name or service not known"}
    fleet.reports["h2"]["names"]["h3"] = {"addresses": ["10.9.9.9"]}
    _, bad = run("frontend.names", fleet.context())
    assert where(bad) == [("fail", "h2", "")]
    assert bad[0].message == "cannot resolve h0, h3"
    assert bad[0].evidence == {"h0": "unresolved (Name or service not known)", "h3": "-> 10.9.9.9, not 10.0.0.4"}


def test_names_broken_everywhere_is_one_fleet_finding(fleet):
    for r in fleet.reports.values():
        for o in r["names"]:
            r["names"][o] = {"error": "no answer within 2 s"}
    out, bad = run("frontend.names", fleet.context())
    assert where(bad) == [("fail", "", "")]
    assert bad[0].message == "no host resolves h0, h1, h2, h3"
    assert out.summary == "no host resolves the fleet's names"


def test_names_loopback_answer_is_wrong(fleet):
    fleet.reports["h1"]["names"]["h1"] = {"addresses": ["127.0.1.1"]}  # the Debian /etc/hosts habit
    _, bad = run("frontend.names", fleet.context())
    assert where(bad) == [("fail", "h1", "")]


def test_names_extra_addresses_are_fine(fleet):
    fleet.reports["h1"]["names"]["h0"] = {"addresses": ["192.168.0.5", "10.0.0.1"]}
    _, bad = run("frontend.names", fleet.context())
    assert bad == []


# ---- backend.nic_init -------------------------------------------------------------------------

@pytest.mark.parametrize("change, says", [
    (lambda nic: nic.clear() or nic.update(present=False), "missing: no such interface"),
    (lambda nic: nic.update(admin_up=False, operstate="down", carrier=None), "administratively down"),
    (lambda nic: nic.update(ipv4=["10.64.0.9/31"]), "has 10.64.0.9/31, not its planned 10.64.0.4"),
    (lambda nic: nic.update(ipv4=[]), "has no address, not its planned 10.64.0.4"),
])
def test_nic_init_problem_is_named_and_marked(fleet, change, says):
    change(fleet.nic("h2", "eth0"))
    ctx = fleet.context()
    _, bad = run("backend.nic_init", ctx)
    assert where(bad) == [("fail", "h2", "eth0")]
    assert bad[0].message == says
    assert ctx.broken == {("h2", "eth0"): "backend.nic_init"}


def test_nic_init_rdma_required(fleet):
    fleet.nic("h1", "eth1")["rdma"] = None
    _, bad = run("backend.nic_init", fleet.context())
    assert bad == []  # optional by default
    _, bad = run("backend.nic_init", fleet.context({"network": {"rdma": "required"}}))
    assert where(bad) == [("fail", "h1", "eth1")]


def test_nic_init_nics_section_unreadable(fleet):
    fleet.reports["h0"]["nics"] = {"error": "PermissionError: sys/class/net"}
    _, bad = run("backend.nic_init", fleet.context())
    assert where(bad) == [("fail", "h0", "eth0"), ("fail", "h0", "eth1")]


def test_nic_init_unreadable_addresses_do_not_crash_the_check(fleet):
    fleet.nic("h0", "eth0").update(ipv4=None, ipv4_error="OSError: netlink socket: permission denied")
    fleet.nic("h3", "eth1")["admin_up"] = False
    _, bad = run("backend.nic_init", fleet.context())
    assert ("fail", "h3", "eth1") in where(bad)


# ---- backend.nic_active -----------------------------------------------------------------------

def test_nic_active_link_down(fleet):
    fleet.nic("h3", "eth0").update(operstate="down", carrier=False, speed_mbps=None, carrier_changes=9)
    ctx = fleet.context()
    _, bad = run("backend.nic_active", ctx)
    assert where(bad) == [("fail", "h3", "eth0")]
    assert bad[0].message == "link down (operstate down, carrier False)"
    assert bad[0].evidence["carrier_changes"] == 9
    assert ctx.broken == {("h3", "eth0"): "backend.nic_active"}


def test_nic_active_operstate_unknown_is_up(fleet):
    fleet.nic("h3", "eth0")["operstate"] = "unknown"  # drivers that never set it
    _, bad = run("backend.nic_active", fleet.context())
    assert bad == []


def test_nic_active_rdma_port_not_active(fleet):
    fleet.nic("h1", "eth1")["rdma"].update(state="DOWN", phys_state="Polling")
    _, bad = run("backend.nic_active", fleet.context())
    assert where(bad) == [("fail", "h1", "eth1")]
    assert bad[0].message == "RDMA port mlx5_1/1 is DOWN (Polling)"


def test_nic_active_skips_what_nic_init_already_failed(fleet):
    fleet.nic("h0", "eth0").update(admin_up=False, operstate="down", carrier=None)
    ctx = fleet.context()
    run("backend.nic_init", ctx)
    out, bad = run("backend.nic_active", ctx)
    assert bad == []
    assert out.summary == "7 NICs up and running checked"


# ---- backend.cabling --------------------------------------------------------------------------

def test_cabling_swapped_pair_gives_two_findings(fleet):
    # h0:eth0 and h2:eth0 swapped at their leaves
    fleet.hear("h0", "eth0", "p0-leaf1", "swp1")
    fleet.hear("h2", "eth0", "p0-leaf0", "swp1")
    ctx = fleet.context()
    _, bad = run("backend.cabling", ctx)
    assert where(bad) == [("fail", "h0", "eth0"), ("fail", "h2", "eth0")]
    assert bad[0].message == "cabled to p0-leaf1:swp1; the topology has p0-leaf0:swp1"
    assert set(ctx.broken) == {("h0", "eth0"), ("h2", "eth0")}


def test_cabling_crossed_planes(fleet):
    fleet.hear("h1", "eth0", "p1-leaf0", "swp2")
    fleet.hear("h1", "eth1", "p0-leaf0", "swp2")
    _, bad = run("backend.cabling", fleet.context())
    assert where(bad) == [("fail", "h1", "eth0"), ("fail", "h1", "eth1")]


def test_cabling_chassis_mac_when_no_system_name(fleet):
    fleet.reports["h3"]["lldp"]["eth1"] = {"chassis": "0c:42:a1:b2:c3:d4", "port": "swp2", "ttl": 120}
    _, bad = run("backend.cabling", fleet.context())
    assert where(bad) == [("fail", "h3", "eth1")]
    assert "0c:42:a1:b2:c3:d4:swp2" in bad[0].message


def test_cabling_no_lldp_anywhere_is_a_skip(fleet):
    for r in fleet.reports.values():
        r["lldp"] = {nic: None for nic in r["lldp"]}
    ctx = fleet.context()
    _, bad = run("backend.cabling", ctx)
    assert where(bad) == [("skip", "", "")]
    assert ctx.broken == {}


def test_cabling_one_nic_hears_nothing(fleet):
    fleet.reports["h2"]["lldp"]["eth1"] = None
    _, bad = run("backend.cabling", fleet.context())
    assert where(bad) == [("warn", "h2", "eth1")]
    assert bad[0].message == "no LLDP heard (expected p1-leaf1:swp1)"


def test_cabling_nic_without_link_is_left_to_nic_active(fleet):
    fleet.nic("h2", "eth1").update(carrier=False, operstate="down")
    fleet.reports["h2"]["lldp"]["eth1"] = None
    out, bad = run("backend.cabling", fleet.context())
    assert bad == [] and out.summary == "7 of 7 NICs heard their switch port over LLDP"


def test_cabling_does_not_blame_a_nic_nic_init_failed(fleet):
    fleet.nic("h1", "eth0").update(admin_up=False, operstate="down", carrier=None, speed_mbps=None)
    fleet.reports["h1"]["lldp"]["eth0"] = None
    ctx = fleet.context()
    run("backend.nic_init", ctx)
    _, bad = run("backend.cabling", ctx)
    assert bad == []


def test_cabling_without_any_lldp_section_does_not_pass(fleet):
    for r in fleet.reports.values():
        del r["lldp"]
    out = get_check("backend.cabling").run(fleet.context())
    assert out.findings and all(f.verdict is not Verdict.PASS for f in out.findings)


# ---- backend.gid ------------------------------------------------------------------------------

def test_gid_at_another_index_than_the_fleet(fleet):
    a = fleet.addr[("h2", "eth1")]
    fleet.nic("h2", "eth1")["rdma"] = rdma_port("eth1", 1, a, v2_index=5)
    ctx = fleet.context()
    _, bad = run("backend.gid", ctx)
    assert where(bad) == [("fail", "h2", "eth1")]
    assert bad[0].evidence == {"gid_index": 5, "expected": 3}
    assert ctx.derived["network.gid_index"] == 3


def test_gid_missing_for_the_nics_address(fleet):
    rdma = fleet.nic("h0", "eth0")["rdma"]
    rdma["gids"] = [g for g in rdma["gids"] if ":ffff:" not in g["gid"]]
    _, bad = run("backend.gid", fleet.context())
    assert where(bad) == [("fail", "h0", "eth0")]
    assert bad[0].message == "no RoCE v2 GID for the NIC's IPv4 address"


def test_gid_only_roce_v1_for_the_address(fleet):
    rdma = fleet.nic("h3", "eth0")["rdma"]
    rdma["gids"] = [g for g in rdma["gids"] if not (g["type"] == "RoCE v2" and ":ffff:" in g["gid"])]
    _, bad = run("backend.gid", fleet.context())
    assert where(bad) == [("fail", "h3", "eth0")]


def test_gid_for_another_address_does_not_count(fleet):
    rdma = fleet.nic("h3", "eth0")["rdma"]
    rdma["gids"][3] = {**rdma["gids"][3], "gid": gid("10.64.0.99")}
    _, bad = run("backend.gid", fleet.context())
    assert where(bad) == [("fail", "h3", "eth0")]


def test_gid_written_index(fleet):
    _, bad = run("backend.gid", fleet.context({"network": {"gid_index": 1}}))
    assert len(bad) == 8 and all(f.verdict is Verdict.FAIL for f in bad)


def test_gid_no_rdma_anywhere_is_a_skip():
    fleet = Fleet(multirail(4, 2, 2, 1), rdma=False)
    _, bad = run("backend.gid", fleet.context())
    assert where(bad) == [("skip", "", "")]


def test_gid_skips_a_nic_already_broken(fleet):
    a = fleet.addr[("h2", "eth1")]
    fleet.nic("h2", "eth1")["rdma"] = rdma_port("eth1", 1, a, v2_index=5)
    ctx = fleet.context()
    ctx.mark_broken("h2", "eth1", "backend.nic_active")
    _, bad = run("backend.gid", ctx)
    assert bad == []


def test_gid_unreadable_addresses_do_not_crash_the_check(fleet):
    fleet.nic("h0", "eth0").update(ipv4=None, ipv4_error="OSError: netlink socket: permission denied")
    a = fleet.addr[("h2", "eth1")]
    fleet.nic("h2", "eth1")["rdma"] = rdma_port("eth1", 1, a, v2_index=5)
    _, bad = run("backend.gid", fleet.context())
    assert ("fail", "h2", "eth1") in where(bad)


# ---- backend.connectivity ---------------------------------------------------------------------

def test_connectivity_one_dead_nic_is_one_finding(fleet):
    fleet.dead("h1", "eth0")
    ctx = fleet.context()
    _, bad = run("backend.connectivity", ctx)
    assert where(bad) == [("fail", "h1", "eth0")]
    assert sorted(set(bad[0].evidence["peers"])) == ["h0:eth0", "h2:eth0", "h3:eth0"]
    assert ctx.broken == {("h1", "eth0"): "backend.connectivity"}


def test_connectivity_dead_nic_counts_each_peer_once(fleet):
    fleet.dead("h1", "eth0")
    _, bad = run("backend.connectivity", fleet.context())
    assert bad[0].message == "unreachable: fails with 3 of its rail peers"
    assert sorted(bad[0].evidence["peers"]) == ["h0:eth0", "h2:eth0", "h3:eth0"]


def test_connectivity_two_dead_nics_two_findings(fleet):
    fleet.dead("h1", "eth0")
    fleet.dead("h3", "eth0")
    ctx = fleet.context()
    _, bad = run("backend.connectivity", ctx)
    assert where(bad) == [("fail", "h1", "eth0"), ("fail", "h3", "eth0")]
    assert set(ctx.broken) == {("h1", "eth0"), ("h3", "eth0")}


def test_connectivity_dead_nics_on_two_rails(fleet):
    fleet.dead("h0", "eth0")
    fleet.dead("h2", "eth1")
    _, bad = run("backend.connectivity", fleet.context())
    assert where(bad) == [("fail", "h0", "eth0"), ("fail", "h2", "eth1")]


def test_connectivity_failing_pair_between_healthy_nics_is_a_pair():
    fleet = Fleet(multirail(8, 2, 2, 1))
    fleet.dead_pair(("h0", "eth1"), ("h5", "eth1"))
    ctx = fleet.context()
    _, bad = run("backend.connectivity", ctx)
    assert bad and all(f.verdict is Verdict.FAIL for f in bad)
    assert {(f.host, f.device, f.evidence["peer"]) for f in bad} <= {("h0", "eth1", "h5:eth1"),
                                                                       ("h5", "eth1", "h0:eth1")}
    assert ctx.broken == {}  # a path problem: neither NIC is broken


def test_connectivity_one_way_failure_is_a_pair(fleet):
    fleet.set_pings(lambda s, d: (s, d) == (("h0", "eth0"), ("h2", "eth0")), received=0)
    _, bad = run("backend.connectivity", fleet.context())
    assert where(bad) == [("fail", "h0", "eth0")]
    assert bad[0].message == "cannot reach h2:eth0 (no echo came back)"
    assert [p["received"] for p in bad[0].evidence["pings"]] == [0, 5]  # h0 -> h2 lost all, h2 -> h0 none


def test_connectivity_failing_pair_on_a_small_rail_is_still_a_pair(fleet):
    fleet.dead_pair(("h0", "eth0"), ("h2", "eth0"))
    ctx = fleet.context()
    _, bad = run("backend.connectivity", ctx)
    assert all("peer" in f.evidence for f in bad)
    assert ctx.broken == {}


def test_connectivity_dead_rail_names_all_its_nics_or_the_rail(fleet):
    fleet.set_pings(lambda s, d: s[1] == "eth1", received=0)
    _, bad = run("backend.connectivity", fleet.context())
    assert bad
    named = {(f.host, f.device) for f in bad if f.host}
    assert named in ({("h0", "eth1"), ("h1", "eth1"), ("h2", "eth1"), ("h3", "eth1")}, set())


def test_connectivity_lossy_nic_is_one_warning(fleet):
    fleet.set_pings(lambda s, d: ("h2", "eth1") in (s, d), received=3)
    ctx = fleet.context()
    _, bad = run("backend.connectivity", ctx)
    assert where(bad) == [("warn", "h2", "eth1")]
    assert "(up to 40%)" in bad[0].message
    assert ctx.broken == {}  # lossy, not broken


def test_connectivity_loss_under_the_allowance_passes(fleet):
    fleet.set_pings(lambda s, d: ("h2", "eth1") in (s, d), received=4)
    _, bad = run("backend.connectivity", fleet.context({"network": {"connectivity_loss": 0.25}}))
    assert bad == []


def test_connectivity_silent_host_is_not_blamed_on_its_peers(fleet):
    del fleet.reports["h3"]
    fleet.missing["h3"] = "no answer within 20 s"
    fleet.set_pings(lambda s, d: d[0] == "h3", received=0)  # nobody reaches it either
    out, bad = run("backend.connectivity", fleet.context())
    assert bad == []
    assert out.summary == "6 NIC pairs on 2 rails, 6 NICs"


def test_connectivity_ignores_nics_already_broken(fleet):
    fleet.dead("h1", "eth0")
    ctx = fleet.context()
    ctx.mark_broken("h1", "eth0", "backend.nic_active")
    _, bad = run("backend.connectivity", ctx)
    assert bad == []
    assert ctx.broken == {("h1", "eth0"): "backend.nic_active"}


def test_connectivity_nic_that_cannot_ping_is_not_a_pair(fleet):
    fleet.reports["h0"]["reach"]["eth0"] = {"error": "cannot ping from eth0: Operation not permitted"}
    out, bad = run("backend.connectivity", fleet.context())
    assert where(bad) == [("unknown", "h0", "eth0")]  # not judged, and said so: not a pass, not a pair
    assert out.summary.startswith("12 NIC pairs")  # h0:eth0 is still pinged by its peers


def test_connectivity_nothing_to_try_is_a_skip(fleet):
    for r in fleet.reports.values():
        r["reach"] = {}
    _, bad = run("backend.connectivity", fleet.context())
    assert where(bad) == [("skip", "", "")]


# ---- backend.latency --------------------------------------------------------------------------

def test_latency_one_far_nic_is_named_once(fleet):
    fleet.set_pings(lambda s, d: ("h1", "eth1") in (s, d), rtt_us=3000.0)
    ctx = fleet.context()
    _, bad = run("backend.latency", ctx)
    assert where(bad) == [("fail", "h1", "eth1")]
    assert bad[0].evidence["rtt_us"] == 3000.0
    assert bad[0].evidence["limit_us"] == 1040.0
    assert ctx.derived["latency.max_us"] == 1040.0


def test_latency_uniform_fleet_passes_even_when_slow():
    fleet = Fleet(multirail(4, 2, 2, 1), rtt_us=2500.0)
    ctx = fleet.context()
    _, bad = run("backend.latency", ctx)
    assert bad == []
    assert ctx.derived["latency.max_us"] == 3500.0  # fleet median + the default 1000 µs margin


def test_latency_margin_from_the_expectations(fleet):
    fleet.set_pings(lambda s, d: ("h1", "eth1") in (s, d), rtt_us=300.0)
    _, bad = run("backend.latency", fleet.context())
    assert bad == []  # 300 µs is inside 40 + 1000
    ctx = fleet.context({"latency": {"margin_us": 100}})
    _, bad = run("backend.latency", ctx)
    assert where(bad) == [("fail", "h1", "eth1")]
    assert ctx.derived["latency.max_us"] == 140.0


def test_latency_absolute_limit_wins(fleet):
    fleet.set_pings(lambda s, d: ("h1", "eth1") in (s, d), rtt_us=3000.0)
    ctx = fleet.context({"latency": {"max_us": 5000}})
    _, bad = run("backend.latency", ctx)
    assert bad == []  # far from the fleet, but inside the limit written down
    assert ctx.derived["latency.max_us"] == 5000
    ctx = fleet.context({"latency": {"max_us": 30}})
    out, bad = run("backend.latency", ctx)
    assert bad and all(f.verdict is Verdict.FAIL for f in bad)  # every pair is over 30 µs
    assert ctx.derived["latency.max_us"] == 30
    assert out.summary == "12 rail pairs, typical floor 40 µs, limit 30 µs"


def test_latency_floor_is_the_fastest_round_trip(fleet):
    """Some pings delayed by a busy CPU do not make a pair slow: only the floor counts."""
    for _, _, rec in fleet.pings():
        rec["rtt_us"] = [40.0, 9000.0, 41.0, 8000.0]
    _, bad = run("backend.latency", fleet.context())
    assert bad == []


def test_latency_one_slow_pair_is_a_pair():
    fleet = Fleet(multirail(8, 2, 2, 1))
    fleet.set_pings(lambda s, d: {s, d} == {("h2", "eth0"), ("h6", "eth0")}, rtt_us=5000.0)  # a queue: both ways
    _, bad = run("backend.latency", fleet.context())
    assert where(bad) == [("fail", "h2", "eth0")]
    assert bad[0].evidence == {"peer": "h6:eth0", "rtt_us": 5000.0}


def test_latency_without_round_trips_is_a_skip(fleet):
    for _, _, rec in fleet.pings():
        rec["rtt_us"] = []
    _, bad = run("backend.latency", fleet.context())
    assert where(bad) == [("skip", "", "")]


# ---- all checks, in registry order, on one context --------------------------------------------

def audit(fleet: Fleet, expectations: dict | None = None):
    ctx = fleet.context(expectations)
    findings = []
    for c in CHECKS:
        findings += [(c.id, f) for f in c.run(ctx).findings if f.verdict is not Verdict.PASS]
    return ctx, findings


def named(findings, host: str, nic: str) -> list[str]:
    return [cid for cid, f in findings if (f.host, f.device) == (host, nic)]


def test_registry_order_runs_checks_that_mark_before_checks_that_read():
    order = [c.id for c in CHECKS]
    assert order.index("backend.nic_init") < order.index("backend.nic_active") < order.index("backend.cabling")
    assert order.index("backend.cabling") < order.index("backend.gid") < order.index("backend.connectivity")
    assert order.index("backend.connectivity") < order.index("backend.latency")


def test_missing_nic_is_named_once_across_all_checks(fleet):
    fleet.reports["h2"]["nics"]["eth0"] = {"present": False}
    fleet.reports["h2"]["lldp"]["eth0"] = None
    fleet.reports["h2"]["reach"]["eth0"] = {"error": "cannot ping from eth0: No such device"}
    fleet.dead("h2", "eth0")
    ctx, findings = audit(fleet)
    assert named(findings, "h2", "eth0") == ["backend.nic_init"]
    assert [cid for cid, _ in findings] == ["backend.nic_init"]


def test_nic_without_link_is_named_once_across_all_checks(fleet):
    fleet.nic("h0", "eth1").update(operstate="down", carrier=False, speed_mbps=None)
    fleet.nic("h0", "eth1")["rdma"].update(state="DOWN", phys_state="Disabled")
    fleet.reports["h0"]["lldp"]["eth1"] = None
    fleet.dead("h0", "eth1")
    ctx, findings = audit(fleet)
    assert [cid for cid, _ in findings] == ["backend.nic_active"]
    assert named(findings, "h0", "eth1") == ["backend.nic_active"]


def test_swapped_cables_are_not_blamed_again_by_pings(fleet):
    fleet.hear("h0", "eth0", "p0-leaf1", "swp1")
    fleet.hear("h2", "eth0", "p0-leaf0", "swp1")
    # through the wrong ports, their pings fail or crawl
    fleet.set_pings(lambda s, d: ("h0", "eth0") in (s, d), received=0)
    fleet.set_pings(lambda s, d: ("h2", "eth0") in (s, d) and ("h0", "eth0") not in (s, d), rtt_us=5000.0)
    ctx, findings = audit(fleet)
    assert named(findings, "h0", "eth0") == ["backend.cabling"]
    assert named(findings, "h2", "eth0") == ["backend.cabling"]
    assert [cid for cid, _ in findings] == ["backend.cabling", "backend.cabling"]


def test_dead_nic_is_not_blamed_again_by_latency(fleet):
    fleet.dead("h3", "eth1")
    fleet.set_pings(lambda s, d: ("h3", "eth1") in (s, d), rtt_us=9000.0)  # nothing to time, but be sure
    ctx, findings = audit(fleet)
    assert [cid for cid, _ in findings] == ["backend.connectivity"]
    assert ctx.broken == {("h3", "eth1"): "backend.connectivity"}


def test_wrong_address_is_not_blamed_again_by_gid_or_pings(fleet):
    """The GID follows the address: a NIC on the wrong address has no GID for its planned one, and its pings
    from the planned source fail; only nic_init should say so."""
    nic = fleet.nic("h1", "eth0")
    nic["ipv4"] = ["10.64.0.77/31"]
    nic["rdma"] = rdma_port("eth0", 0, "10.64.0.77")
    fleet.dead("h1", "eth0")
    ctx, findings = audit(fleet)
    assert [cid for cid, _ in findings] == ["backend.nic_init"]


def test_admin_down_nic_is_named_once_across_all_checks(fleet):
    fleet.nic("h2", "eth1").update(admin_up=False, operstate="down", carrier=None, speed_mbps=None)
    fleet.reports["h2"]["lldp"]["eth1"] = None
    fleet.dead("h2", "eth1")
    ctx, findings = audit(fleet)
    assert named(findings, "h2", "eth1") == ["backend.nic_init"]
