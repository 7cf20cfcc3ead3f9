"""XID history: the NVIDIA driver's past XIDs, read from the kernel log (facts/gpus.py) and judged
by configuration.gpu: critical ones fail naming host, GPU, bus id and XID; the rest warn.

The logs in tests/fixtures/audit/kernel-log/ are kernel-log text in the two forms the reader
meets: /dev/kmsg records (priority,sequence,microseconds,flags;message with " KEY=value"
continuation lines) and `dmesg` lines. They are composed from the XID lines NVIDIA's driver
writes (R550), put around real boot-time records; they go through the real reader: opened
non-blocking, read record by record, parsed and summed up per GPU and XID.
"""

from __future__ import annotations

import json
import os
import shutil
import subprocess
import sys
import time
from pathlib import Path

import pytest

from clockfabric.audit import expect
from clockfabric.audit.checks.config_gpu import CRITICAL_XIDS
from clockfabric.audit.context import Context
from clockfabric.audit.facts import gpus
from clockfabric.audit.model import Verdict
from clockfabric.audit.registry import get_check
from clockfabric.audit.run import run_check
from clockfabric.topology import leafspine
from tests.fakes.fake_nvml import FakeGpu, FakeNvml

LOGS = Path(__file__).parent.parent / "fixtures" / "audit" / "kernel-log"


def two_gpus(kmsg: Path | None) -> dict:
    """A host with GPUs at 0000:18:00.0 and 0000:19:00.0, its XIDs from the log at kmsg."""
    fakes = [FakeGpu(uuid=f"GPU-0000000{i}-0000-0000-0000-000000000000", pci_bus_id=f"00000000:{0x18 + i:02X}:00.0")
             for i in range(2)]
    return gpus.read(FakeNvml(fakes), kmsg=kmsg)


def judge(sections: dict[str, dict]):
    """configuration.gpu over hosts whose only facts are their GPUs."""
    topo = leafspine(len(sections), 1, 0)
    names = sorted(topo.hosts)
    reports = {h: {"host": h, "gpus": sections[h]} for h in names if h in sections}
    result = run_check(Context(topo, names, reports, {}, expect=expect.parse(None)), get_check("configuration.gpu"), 30)
    return result, [f for f in result.findings if f.verdict is not Verdict.PASS]


def test_kmsg_records_are_summed_up_per_gpu_and_xid():
    log = two_gpus(LOGS / "h1-kmsg.txt")["xid"]
    assert (log["readable"], log["source"], log["total"]) == (True, str(LOGS / "h1-kmsg.txt"), 6)
    by = {(x["pci_bus_id"], x["xid"]): x for x in log["xids"]}
    assert sorted(by) == [("0000:18:00", 13), ("0000:18:00", 63), ("0000:19:00", 79), ("0000:5d:00", 119)]
    storm = by[("0000:18:00", 13)]
    assert storm["count"] == 3 and storm["first_uptime_s"] == pytest.approx(90.211873)
    assert storm["last"] == {"pci_bus_id": "0000:18:00", "xid": 13, "pid": "51234", "name": "python3",
                             "message": "Graphics SM Global Exception on (GPC 0, TPC 1, SM 0): Multiple Warp Errors",
                             "uptime_s": pytest.approx(91.502264)}
    off = by[("0000:19:00", 79)]["last"]
    assert (off["message"], off["name"], off["uptime_s"]) == ("GPU has fallen off the bus.", "pt_main_thread",
                                                              pytest.approx(512.005011))
    gsp = by[("0000:5d:00", 119)]["last"]
    assert gsp["pid"] == "<unknown>" and gsp["message"].startswith("Timeout after 6s of waiting for RPC response")
    json.dumps(log)  # plain data, as the host side prints it


def test_dmesg_lines_parse_the_same():
    log = two_gpus(LOGS / "h2-dmesg.txt")["xid"]
    assert log["total"] == 2
    (contained,) = log["xids"]
    assert (contained["pci_bus_id"], contained["xid"], contained["count"]) == ("0000:18:00", 94, 2)
    assert contained["first_uptime_s"] == pytest.approx(1843.207713)
    assert contained["last"]["message"] == "Contained: SM (0x1). RST: No, D-RST: No"


def test_a_log_without_xids():
    assert two_gpus(LOGS / "h0-kmsg.txt")["xid"] == {"readable": True, "source": str(LOGS / "h0-kmsg.txt"),
                                                      "total": 0, "xids": []}


def test_check_fails_critical_xids_and_warns_the_rest():
    result, bad = judge({"h0": two_gpus(LOGS / "h0-kmsg.txt"), "h1": two_gpus(LOGS / "h1-kmsg.txt"),
                         "h2": two_gpus(LOGS / "h2-dmesg.txt")})
    assert result.verdict is Verdict.FAIL
    got = [(f.verdict, f.host, f.device, f.evidence["xid"]) for f in bad]
    assert got == [(Verdict.WARN, "h1", "gpu0", 13), (Verdict.FAIL, "h1", "gpu0", 63),
                   (Verdict.FAIL, "h1", "gpu1", 79), (Verdict.FAIL, "h1", "0000:5d:00", 119),
                   (Verdict.FAIL, "h2", "gpu0", 94)]
    says = {(f.host, f.evidence["xid"]): f.message for f in bad}
    assert says[("h1", 79)] == "XID 79 on 0000:19:00: GPU has fallen off the bus. (once since boot)"
    assert says[("h1", 13)].startswith("XID 13 on 0000:18:00: Graphics SM Global Exception") \
        and says[("h1", 13)].endswith("(3 times since boot)")
    assert says[("h1", 119)].endswith("; NVML lists no GPU there now")  # named by its bus id instead
    fell = next(f for f in bad if f.evidence["xid"] == 79)
    assert fell.evidence["pci_bus_id"] == "0000:19:00" and fell.evidence["critical"] == "GPU has fallen off the bus"
    assert fell.evidence["last"]["pid"] == "48211"


def test_the_critical_list_holds_the_xids_that_need_the_gpu_serviced():
    assert {48, 63, 64, 74, 79, 92, 94, 95, 119, 120} <= set(CRITICAL_XIDS)
    assert not {13, 31, 43, 45} & set(CRITICAL_XIDS)  # the application's own faults warn


def test_a_clean_log_adds_nothing():
    result, bad = judge({"h0": two_gpus(LOGS / "h0-kmsg.txt"), "h1": two_gpus(LOGS / "h0-kmsg.txt")})
    assert result.verdict is Verdict.PASS and bad == []


def test_an_unreadable_log_warns_with_the_reason(tmp_path):
    missing = two_gpus(tmp_path / "kmsg")
    why = f"{tmp_path / 'kmsg'}: no such file (a container without the host's kernel log?)"
    assert missing["xid"] == {"readable": False, "source": str(tmp_path / "kmsg"), "reason": why}
    result, bad = judge({"h0": two_gpus(LOGS / "h0-kmsg.txt"), "h1": missing})
    assert result.verdict is Verdict.WARN
    assert [(f.verdict, f.host, f.message) for f in bad] == [(Verdict.WARN, "h1", f"XID history not read: {why}")]


def test_a_host_side_that_reads_no_log_is_not_judged_on_it():
    result, bad = judge({"h0": two_gpus(None), "h1": two_gpus(None)})  # a stand-in NVML: no log read
    assert "xid" not in two_gpus(None) and result.verdict is Verdict.PASS and bad == []


def test_no_gpu_here_stays_skip_with_its_reason():
    """This machine's own NVML: with no NVIDIA GPU the check skips, and no kernel log is read."""
    real = gpus.read()
    if real.get("present"):
        pytest.skip("this machine has NVIDIA GPUs")
    assert "xid" not in real
    result, _ = judge({"h0": real, "h1": real})
    assert result.verdict is Verdict.SKIP
    assert result.findings[0].message == f"no GPUs: {real['reason']}"


def test_the_live_kernel_log_reads_without_blocking():
    """/dev/kmsg itself: every record, then EAGAIN, never a wait for the next message."""
    if not os.path.exists(gpus.KMSG):
        pytest.skip("no /dev/kmsg here")
    t0 = time.monotonic()
    log = gpus.xid_history()
    assert time.monotonic() - t0 < 5
    if log["readable"]:
        assert log["total"] == sum(x["count"] for x in log["xids"])
    else:
        assert "dmesg_restrict" in log["reason"]


def test_permission_denied_by_the_kernel_says_why():
    """kernel.dmesg_restrict=1 and no CAP_SYSLOG: the kernel refuses /dev/kmsg; the reason names the fix."""
    if Path("/proc/sys/kernel/dmesg_restrict").read_text().strip() != "1":
        pytest.skip("kernel.dmesg_restrict is 0 here: anyone may read the kernel log")
    code = "import json; from clockfabric.audit.facts import gpus; print(json.dumps(gpus.xid_history()))"
    if os.geteuid() == 0:  # root reads it: drop to nobody, without CAP_SYSLOG
        if not shutil.which("setpriv"):
            pytest.skip("needs setpriv (util-linux) to run as another user")
        argv = ["setpriv", "--reuid=65534", "--regid=65534", "--clear-groups", "--inh-caps=-all",
                sys.executable, "-c", code]
        runs = subprocess.run([*argv[:-1], "pass"], check=False, capture_output=True, text=True, timeout=60, cwd="/")
        if runs.returncode:  # e.g. a Python built with its library under root's home
            pytest.skip(f"nobody cannot run this Python: {(runs.stderr.strip().splitlines() or ['?'])[-1]}")
    else:
        argv = [sys.executable, "-c", code]
    proc = subprocess.run(argv, check=False, capture_output=True, text=True, timeout=60, cwd="/")
    if proc.returncode and "Permission denied" in proc.stderr and "clockfabric" in proc.stderr:
        pytest.skip(f"nobody cannot import clockfabric from this checkout: {proc.stderr.splitlines()[-1]}")
    assert proc.returncode == 0, proc.stderr
    log = json.loads(proc.stdout)
    assert log["readable"] is False
    assert log["reason"].startswith("/dev/kmsg: Operation not permitted (with kernel.dmesg_restrict=1")
