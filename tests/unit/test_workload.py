"""Workload monitoring on recorded /proc trees and sock_diag readings: which job a process is in,
its flows, their rates; ended flows, reused ports, processes in other namespaces."""

from __future__ import annotations

import os
import shutil
import subprocess
import time
from dataclasses import replace
from pathlib import Path
from types import SimpleNamespace

import pytest

from clockfabric.topology import leafspine
from clockfabric.traffic.steer_decide import FlowKey
from clockfabric.workload import samples
from clockfabric.workload.flowgroups import pair_label, parse_pair
from clockfabric.workload.flows import FlowTracker, SocketReading, flow_label
from clockfabric.workload.jobs import JobProcess, JobTag, group, identify, parse_environ, pod_uid
from clockfabric.workload.monitor import BUSY_BPS, LIST_EVERY_S, WorkloadMonitor
from clockfabric.workload.procfs import MAX_MADE, ProcFs

NETNS, PIDNS, OTHER_NETNS, OTHER_PIDNS = 4026531840, 4026531836, 4026532999, 4026532888
BTIME = 1_700_000_000
CGROUP_POD = ("0::/kubepods.slice/kubepods-burstable.slice/kubepods-burstable-pod1b2c3d4e_5f60_7182_93a4_"
              "b5c6d7e8f901.slice/cri-containerd-0123.scope\n")


# ---- a recorded /proc ----------------------------------------------------------------------------
def fake_proc(root: Path, processes: dict[int, dict]) -> Path:
    """/proc as the monitor reads it: stat (btime), self/ns, and per pid environ, cgroup, stat, ns, fd."""
    root.mkdir(exist_ok=True)
    (root / "stat").write_text(f"cpu  1 2 3\nbtime {BTIME}\n")
    _ns(root / "self", NETNS, PIDNS)
    for pid, p in processes.items():
        add_process(root, pid, p)
    return root


def add_process(root: Path, pid: int, p: dict) -> None:
    """One process's entry (p: env, cgroup, start_after_boot_s, netns, pidns, sockets; thread_of:
    a thread of that process, whose entry /proc has too, though no listing shows it)."""
    d = root / str(pid)
    d.mkdir()
    (d / "status").write_text(f"Name:\tpy\nTgid:\t{p.get('thread_of', pid)}\nPid:\t{pid}\n")
    (d / "environ").write_bytes(b"\0".join(f"{k}={v}".encode() for k, v in p.get("env", {}).items()) + b"\0")
    (d / "cgroup").write_text(p.get("cgroup", "0::/user.slice\n"))
    ticks = int(p.get("start_after_boot_s", 100) * os.sysconf("SC_CLK_TCK"))
    fields = ["S"] + ["0"] * 18 + [str(ticks)] + ["0"] * 30
    (d / "stat").write_text(f"{pid} (py (worker) 1) " + " ".join(fields) + "\n")
    _ns(d, p.get("netns", NETNS), p.get("pidns", PIDNS))
    (d / "fd").mkdir()
    for fd, inode in enumerate(p.get("sockets", [])):
        os.symlink(f"socket:[{inode}]", d / "fd" / str(fd + 3))
    os.symlink("/dev/null", d / "fd" / "0")


def open_socket(root: Path, pid: int, fd: int, inode: int) -> None:
    """A socket the process opens later; its fd folder's change time moves on, as a new file's."""
    fds = root / str(pid) / "fd"
    os.symlink(f"socket:[{inode}]", fds / str(fd))
    later = fds.stat().st_mtime_ns + 1_000_000
    os.utime(fds, ns=(later, later))


def _ns(d: Path, net: int, pid: int) -> None:
    (d / "ns").mkdir(parents=True)
    os.symlink(f"net:[{net}]", d / "ns" / "net")
    os.symlink(f"pid:[{pid}]", d / "ns" / "pid")


def reading(lport: int, rport: int, inode: int, cookie: int, acked: int = 0, received: int = 0, retrans: int = 0):
    return SocketReading(FlowKey("10.0.0.1", lport, "10.0.1.1", rport), inode, cookie, acked, received, retrans,
                         120, 10, 1e9)


# ---- which job ------------------------------------------------------------------------------------
@pytest.mark.parametrize("environ, cgroup, expected", [
    ({"CLOCKFABRIC_JOB": "train7", "RANK": "3", "CLOCKFABRIC_JOB_RUN": "r1"}, "",
     JobTag("train7", "clockfabric", 3, "r1")),
    ({"SLURM_JOB_ID": "4242", "SLURM_PROCID": "5"}, "", JobTag("slurm:4242", "slurm", 5)),
    ({"TORCHELASTIC_RUN_ID": "abc", "RANK": "0"}, "", JobTag("torchelastic:abc", "torchelastic", 0)),
    ({"CLOCKFABRIC_JOB": "named", "SLURM_JOB_ID": "1"}, "", JobTag("named", "clockfabric")),  # explicit wins
    ({"RANK": "x"}, CGROUP_POD, JobTag("kubernetes:1b2c3d4e-5f60-7182-93a4-b5c6d7e8f901", "kubernetes")),
    ({"RANK": "2"}, "0::/user.slice/session-1.scope\n", None),
    ({"SLURM_JOB_ID": "  "}, "", None),
])
def test_a_process_is_placed_in_its_job_by_environment_or_cgroup(environ, cgroup, expected):
    assert identify(environ, cgroup) == expected


def test_environ_keeps_only_the_job_variables():
    data = b"PATH=/bin\0RANK=1\0SLURM_JOB_ID=9\0EMPTY\0X=a=b\0"
    assert parse_environ(data) == {"RANK": "1", "SLURM_JOB_ID": "9"}


def test_pod_uid_from_cgroupfs_paths_too():
    assert pod_uid("11:memory:/kubepods/burstable/pod0a1b2c3d-0000-1111-2222-333344445555/c0ffee\n") \
        == "0a1b2c3d-0000-1111-2222-333344445555"
    assert pod_uid("0::/system.slice/docker-abc.scope") is None


def test_processes_group_into_jobs_with_their_ranks_and_first_start():
    procs = [JobProcess(30, JobTag("a", "clockfabric", 1), 50.0), JobProcess(10, JobTag("a", "clockfabric", 0), 60.0),
             JobProcess(20, JobTag("slurm:1", "slurm", None), 70.0, visible=False)]
    jobs = group(procs)
    assert list(jobs) == ["a", "slurm:1"]
    assert [p.pid for p in jobs["a"].processes] == [10, 30]
    assert jobs["a"].ranks == [0, 1] and jobs["a"].start_s == 50.0
    assert jobs["slurm:1"].ranks == [] and jobs["slurm:1"].hidden == 1


# ---- flows ----------------------------------------------------------------------------------------
def test_rates_come_from_the_second_reading_of_the_same_socket():
    t = FlowTracker()
    first, ended = t.update([reading(40000, 5201, 11, cookie=1, acked=1000)], 10.0)
    assert first[0].tx_bps is None and ended == []
    second, _ = t.update([reading(40000, 5201, 11, cookie=1, acked=1000 + 125_000, received=500, retrans=3)], 10.5)
    assert second[0].tx_bps == pytest.approx(2e6) and second[0].rx_bps == pytest.approx(8000)
    assert second[0].new_retransmits == 3


def test_segment_rates_come_from_the_second_reading_and_ride_over_a_wrapped_count():
    t = FlowTracker()
    first, _ = t.update([replace(reading(40000, 5201, 11, cookie=1), data_segs_out=2**32 - 100, data_segs_in=7)], 10.0)
    assert first[0].tx_pps is None and first[0].rx_pps is None  # unknown, not zero
    second, _ = t.update([replace(reading(40000, 5201, 11, cookie=1), data_segs_out=300, data_segs_in=57)], 10.5)
    assert second[0].tx_pps == pytest.approx(800) and second[0].rx_pps == pytest.approx(100)


def test_the_share_of_time_wanting_the_network_comes_from_two_readings():
    t = FlowTracker()
    first, _ = t.update([replace(reading(40000, 5201, 11, cookie=1), wanting_us=5_000_000)], 10.0)
    assert first[0].wanting is None  # one reading holds no span
    second, _ = t.update([replace(reading(40000, 5201, 11, cookie=1), wanting_us=5_400_000)], 10.5)
    assert second[0].wanting == pytest.approx(0.8)
    older, _ = t.update([reading(40000, 5201, 11, cookie=1)], 11.0)  # a kernel without the counters
    assert older[0].wanting is None


def test_a_first_reading_sending_flat_out_gives_the_kernels_delivery_rate():
    """A new bulk flow is reported a reading sooner; an application-limited or idle socket's
    estimate says what it could move, not what it moves: none."""
    base = reading(40000, 5201, 11, cookie=1, acked=1000)
    flat_out = replace(base, last_data_sent_ms=3, app_limited=False)
    limited = replace(flat_out, cookie=2, app_limited=True)
    idle = replace(flat_out, cookie=3, last_data_sent_ms=5000)
    first, _ = FlowTracker().update([flat_out, limited, idle], 10.0)
    assert [f.tx_bps for f in first] == [1e9, None, None]
    assert first[0].rx_bps is None


def test_a_reused_port_is_a_new_flow_not_a_negative_rate():
    t = FlowTracker()
    t.update([reading(40000, 5201, 11, cookie=1, acked=10**9)], 1.0)
    after, ended = t.update([reading(40000, 5201, 12, cookie=2, acked=100)], 2.0)
    assert after[0].tx_bps is None  # a new socket: no rate until its second reading
    assert ended == [FlowKey("10.0.0.1", 40000, "10.0.1.1", 5201)]  # the old one ended


def test_an_ended_flow_is_reported_once_then_forgotten():
    t = FlowTracker()
    t.update([reading(1, 2, 11, cookie=1), reading(3, 4, 12, cookie=2)], 1.0)
    _, ended = t.update([reading(3, 4, 12, cookie=2)], 2.0)
    assert [k.lport for k in ended] == [1]
    _, ended = t.update([reading(3, 4, 12, cookie=2)], 3.0)
    assert ended == []


def test_flow_labels_round_trip_and_refuse_garbage():
    key = FlowKey("10.0.0.1", 40000, "10.0.1.1", 5201)
    assert flow_label(key) == "10.0.0.1:40000->10.0.1.1:5201"
    assert pair_label(key) == "10.0.0.1->10.0.1.1"  # a series' label: no port
    assert parse_pair(pair_label(key)) == ("10.0.0.1", "10.0.1.1")
    assert parse_pair(flow_label(key)) is None and parse_pair("nonsense") is None


# ---- the monitor on a recorded /proc --------------------------------------------------------------
@pytest.fixture
def proc(tmp_path):
    return fake_proc(tmp_path / "proc", {
        100: {"env": {"CLOCKFABRIC_JOB": "J", "RANK": "0"}, "sockets": [11, 12], "start_after_boot_s": 10},
        101: {"env": {"CLOCKFABRIC_JOB": "J", "RANK": "1"}, "sockets": [13], "start_after_boot_s": 20},
        102: {"env": {"CLOCKFABRIC_JOB": "J"}, "sockets": [11]},  # a forked worker sharing its parent's socket
        200: {"env": {"SLURM_JOB_ID": "77", "SLURM_PROCID": "4"}, "netns": OTHER_NETNS, "pidns": OTHER_PIDNS},
        300: {"env": {"CLOCKFABRIC_JOB": "elsewhere"}, "netns": OTHER_NETNS, "sockets": [14]},  # another lab host
        400: {"env": {"PATH": "/bin"}, "sockets": [15]},
    })


def test_procfs_reads_start_time_namespaces_and_sockets(proc):
    fs = ProcFs(proc)
    facts = fs.process(100)
    assert facts.start_s == pytest.approx(BTIME + 10)
    assert facts.environ == {"CLOCKFABRIC_JOB": "J", "RANK": "0"} and facts.netns == NETNS
    assert fs.socket_inodes(100) == {11, 12}
    assert fs.process(999) is None and fs.socket_inodes(999) == set()  # gone: nothing, no error


def test_the_live_procs_start_times_are_to_the_tick_not_the_second():
    """btime is whole seconds; a process's age from it would be up to a second too old, which the
    young re-reads (an exec that makes a process a job's) cannot afford."""
    child = subprocess.Popen(["sleep", "5"])
    try:
        started = time.time()
        facts = ProcFs().process(child.pid)
        assert facts is not None and -0.05 < started - facts.start_s < 0.3
    finally:
        child.kill()
        child.wait()


def test_monitor_maps_sockets_to_processes_to_jobs(proc):
    readings = [reading(1, 2, 11, 1, acked=0), reading(3, 4, 13, 2), reading(5, 6, 15, 3), reading(7, 8, 14, 4)]
    clock = iter([1.0, 2.0])
    mon = WorkloadMonitor(ProcFs(proc), lambda: readings, clock=lambda: next(clock))
    view = mon.update()
    assert sorted(view.jobs) == ["J", "slurm:77"]  # "elsewhere" is another namespace's (lab host's) job
    assert view.jobs["J"].ranks == [0, 1] and view.jobs["J"].start_s == pytest.approx(BTIME + 10)
    assert view.jobs["slurm:77"].hidden == 1  # in a container: its flows are not visible here
    assert {(f.jobid, f.pid, f.rates.reading.inode) for f in view.flows} == {("J", 100, 11), ("J", 101, 13)}
    assert view.other_flows == 2  # the plain process's and the other namespace's socket
    readings[0] = reading(1, 2, 11, 1, acked=1_000_000)
    view = mon.update()
    rates = {f.rates.reading.inode: f.rates.tx_bps for f in view.flows}
    assert rates[11] == pytest.approx(8e6) and rates[13] == 0


def test_sockets_opened_since_the_last_listing_are_found_between_updates(proc):
    """For QoS's pacing: a job's sockets the last update's fd listing did not have, a new
    process's included, each once (a shared one the lowest pid's); other jobs' not."""
    mon = WorkloadMonitor(ProcFs(proc), lambda: [reading(1, 2, 11, 1), reading(3, 4, 13, 2)])
    mon.update()
    assert mon.opened({"J"}) == []  # every socket of its processes was listed
    open_socket(proc, 101, 9, 16)
    add_process(proc, 500, {"env": {"CLOCKFABRIC_JOB": "J"}, "sockets": [17, 12]})
    add_process(proc, 99, {"env": {"CLOCKFABRIC_JOB": "J"}, "sockets": [17]})
    assert sorted(mon.opened({"J"})) == [("J", 99, 17, 3), ("J", 101, 16, 9)]
    assert mon.opened({"slurm:77", "elsewhere"}) == []  # in a container, on another lab host


def test_between_updates_proc_is_listed_again_only_once_a_process_was_made(proc):
    mon = WorkloadMonitor(ProcFs(proc), lambda: [])
    mon.update()
    (proc / "loadavg").write_text("0.10 0.20 0.30 1/80 600\n")
    assert mon.opened({"J"}) == []
    add_process(proc, 600, {"env": {"CLOCKFABRIC_JOB": "J"}, "sockets": [18]})
    assert mon.opened({"J"}) == []  # the last pid is the same: no listing
    open_socket(proc, 101, 9, 19)
    assert mon.opened({"J"}) == [("J", 101, 19, 9)]  # a known process's fds, read once it opened one
    assert mon.opened({"J"}) == [("J", 101, 19, 9)]  # nothing moved: the same, from the last read
    (proc / "loadavg").write_text("0.10 0.20 0.30 1/80 601\n")
    assert mon.opened({"J"}) == [("J", 101, 19, 9), ("J", 600, 18, 3)]


def test_an_update_lists_proc_only_when_the_last_pid_moved_too_far_or_the_listing_is_old(proc):
    """A still kernel costs an update no listing: a job process that exits is let go at once, a
    new one (a pid handed out again included) found from the pids made since, and /proc listed
    again LIST_EVERY_S after the last listing."""
    listings, now = [], [0.0]
    fs = ProcFs(proc)
    pids = fs.pids
    fs.pids = lambda: listings.append(now[0]) or pids()  # type: ignore[method-assign]
    (proc / "loadavg").write_text("0.10 0.20 0.30 1/80 600\n")
    mon = WorkloadMonitor(fs, None, clock=lambda: now[0])
    assert mon.update().jobs["J"].ranks == [0, 1] and listings == [0.0]
    now[0] = 1.0
    shutil.rmtree(proc / "101")  # a rank exits: the kernel's last pid stays
    assert mon.update().jobs["J"].ranks == [0] and listings == [0.0]
    add_process(proc, 101, {"env": {"CLOCKFABRIC_JOB": "K", "RANK": "3"}})  # its pid, handed out again
    add_process(proc, 601, {"env": {"CLOCKFABRIC_JOB": "K", "RANK": "4"}})
    (proc / "loadavg").write_text("0.10 0.20 0.30 1/80 101\n")  # the pids wrapped around: a listing
    now[0] = 2.0
    assert mon.update().jobs["K"].ranks == [3, 4] and listings == [0.0, 2.0]
    add_process(proc, 103, {"env": {"CLOCKFABRIC_JOB": "K", "RANK": "5"}})
    (proc / "loadavg").write_text("0.10 0.20 0.30 1/80 103\n")
    now[0] = 3.0
    assert mon.update().jobs["K"].ranks == [3, 4, 5] and listings == [0.0, 2.0]
    now[0] = 2.0 + LIST_EVERY_S
    assert mon.update().jobs["K"].ranks == [3, 4, 5] and listings == [0.0, 2.0, 2.0 + LIST_EVERY_S]


def test_procfs_names_the_processes_made_between_two_last_pids_not_their_threads(proc):
    fs = ProcFs(proc)
    add_process(proc, 103, {"env": {"CLOCKFABRIC_JOB": "J"}})
    add_process(proc, 104, {"thread_of": 103})
    assert fs.made(102, 106) == [102, 103]  # 102 again: its entry may have come after the reading
    assert fs.made(600, 600 + MAX_MADE + 1) is None  # too many handed out: list /proc instead
    assert fs.made(4_000_000, 5) is None  # the pids wrapped around


def test_between_updates_only_the_pids_handed_out_since_are_read(proc):
    mon = WorkloadMonitor(ProcFs(proc), lambda: [])
    mon.update()
    (proc / "loadavg").write_text("0.10 0.20 0.30 1/80 600\n")
    mon.opened({"J"})
    listed = []
    mon.proc.pids = lambda: listed.append(1) or []  # type: ignore[method-assign]
    add_process(proc, 601, {"env": {"CLOCKFABRIC_JOB": "J"}, "sockets": [21]})
    add_process(proc, 602, {"thread_of": 601, "env": {"CLOCKFABRIC_JOB": "J"}, "sockets": [21]})
    (proc / "loadavg").write_text("0.10 0.20 0.30 1/80 602\n")
    assert mon.opened({"J"}) == [("J", 601, 21, 3)] and listed == []
    (proc / "loadavg").write_text(f"0.10 0.20 0.30 1/80 {603 + MAX_MADE}\n")
    mon.opened({"J"})
    assert listed == [1]  # many new pids: /proc listed again


def test_a_job_that_exits_leaves_the_view(proc):
    mon = WorkloadMonitor(ProcFs(proc), lambda: [])
    assert "J" in mon.update().jobs
    for pid in (100, 101, 102):
        os.rename(proc / str(pid), proc / f"gone{pid}")
    assert "J" not in mon.update().jobs


def test_without_sock_diag_jobs_are_still_reported(proc):
    view = WorkloadMonitor(ProcFs(proc), None).update()
    assert "J" in view.jobs and not view.flows_readable and view.flows == []


def test_push_samples_label_by_jobid_and_flow_never_job(proc):
    clock = iter([1.0, 2.0])
    readings = [reading(1, 2, 11, 1)]
    mon = WorkloadMonitor(ProcFs(proc), lambda: readings, clock=lambda: next(clock))
    first = samples.push_samples(mon.update())
    assert not [s for s in first if s["name"] == "job_flow_tx_bps"]  # no rate from one reading
    view = mon.update()
    out = samples.push_samples(view)
    assert all("job" not in s["labels"] for s in out)
    # processes counted per job, rank and run: no pid label (the pids are in the push's info)
    procs = {(s["labels"]["jobid"], s["labels"]["rank"], s["labels"]["visible"]): s["value"]
             for s in out if s["name"] == "job_processes"}
    assert all("pid" not in s["labels"] for s in out)
    assert procs == {("J", "0", "1"): 1, ("J", "1", "1"): 1, ("J", "", "1"): 1, ("slurm:77", "4", "0"): 1}
    assert {p["pid"] for p in samples.summary(view)["processes"]} == {100, 101, 102, 200}
    tx = [s for s in out if s["name"] == "job_flow_tx_bps"]
    assert tx == [{"name": "job_flow_tx_bps", "value": 0.0,
                   "labels": {"jobid": "J", "flow": "10.0.0.1->10.0.1.1"}}]  # no port: a group's series


def test_flows_of_no_job_that_send_are_pushed_as_the_links_other_load(proc):
    clock = iter([1.0, 2.0])
    readings = [reading(1, 2, 11, 1), reading(7, 8, 14, 4), reading(5, 6, 15, 3)]  # 14, 15: no job's
    mon = WorkloadMonitor(ProcFs(proc), lambda: readings, clock=lambda: next(clock))
    assert not [s for s in samples.push_samples(mon.update()) if s["name"].startswith("other_flow")]
    readings[1] = reading(7, 8, 14, 4, acked=10_000_000)  # 80 Mbit/s; 15 sends nothing
    view = mon.update()
    out = [s for s in samples.push_samples(view) if s["name"].startswith("other_flow")]
    assert view.other_flows == 2
    assert {(s["name"], s["labels"]["flow"]) for s in out} == {("other_flow_tx_bps", "10.0.0.1->10.0.1.1"),
                                                              ("other_flow_rtt_us", "10.0.0.1->10.0.1.1")}
    assert next(s["value"] for s in out if s["name"] == "other_flow_tx_bps") == pytest.approx(8e7)


def test_with_no_job_and_quiet_nics_the_socket_table_is_read_once_a_refresh(proc):
    """The kernel walks its whole socket table for every read: a host with no job whose NICs
    send less than one busy flow's rate is read only every REFRESH_S; a busy NIC, a job, or a
    job's flow at the last read (its end is reported at once) read every update."""
    for pid in (100, 101, 102):  # this host's job processes gone: only other namespaces' and plain ones
        os.rename(proc / str(pid), proc / f"gone{pid}")
    reads, now = [], [0.0]
    readings = [reading(7, 8, 14, 4), reading(5, 6, 15, 3)]

    def read():
        reads.append(now[0])
        return readings

    mon = WorkloadMonitor(ProcFs(proc), read, clock=lambda: now[0])
    for t in range(25):
        now[0] = float(t)
        view = mon.update(fabric_tx_bps=BUSY_BPS * 0.9)
        assert view.other_flows == 2 and view.flows == [] and view.busy_others == []
    assert reads == [0.0, 10.0, 20.0]
    now[0] = 25.0
    readings[0] = reading(7, 8, 14, 4, acked=12_500_000)  # 10 Mbit/s since the read at 20 s
    view = mon.update(fabric_tx_bps=BUSY_BPS * 1.1)
    assert reads[-1] == 25.0 and [r.reading.inode for r in view.busy_others] == [14]
    now[0] = 26.0
    mon.update(fabric_tx_bps=None)  # not known: read
    assert reads[-1] == 26.0

    os.rename(proc / "gone100", proc / "100")  # a job starts here: its flows are read every update
    readings.append(reading(1, 2, 11, 1))
    for t in (27.0, 28.0):
        now[0] = t
        assert [f.jobid for f in mon.update(fabric_tx_bps=0.0).flows] == ["J"]
    assert reads[-2:] == [27.0, 28.0]
    os.rename(proc / "100", proc / "gone100")  # it ends: read once more, so its flow's end is told at once
    readings.pop()
    now[0] = 29.0
    assert [str(k) for k in mon.update(fabric_tx_bps=0.0).ended] == ["10.0.0.1:1->10.0.1.1:2"]
    now[0] = 30.0
    mon.update(fabric_tx_bps=0.0)
    assert reads[-2:] == [28.0, 29.0]


# ---- the agent's service and its /metrics ---------------------------------------------------------
def test_the_agent_service_publishes_pushes_and_exports_by_jobid(proc, monkeypatch):
    from clockfabric.agent.metrics import workload_metrics
    from clockfabric.agent.services import workload as service

    readings = [reading(1, 2, 11, 1, acked=0)]
    monkeypatch.setattr(service, "ProcFs", lambda: ProcFs(proc))
    monkeypatch.setattr(service, "KernelSockets", lambda: lambda: readings)
    ctx = SimpleNamespace(rails=[], cfg=SimpleNamespace(host="h0", window_s=2.0, topology=leafspine(2, 1, 1)),
                          addresses={}, time_source=None, on_link_change=[],
                          to_time=lambda real_ns: (real_ns, False))
    svc = service.Workload(ctx=ctx)
    svc.tick(0)
    readings[0] = reading(1, 2, 11, 1, acked=125_000)
    svc.tick(0)
    state = svc.report()
    assert [j["jobid"] for j in state["workload"]["jobs"]] == ["J", "slurm:77"]
    assert state["workload"]["flows"][0]["tx_bps"] > 0
    snap = svc.snapshot()
    assert snap.info["workload"]["jobs"] == 2 and snap.info["workload"]["hidden_processes"] == 1
    assert {s["name"] for s in snap.samples} >= {"job_processes", "job_start_seconds", "job_flow_tx_bps",
                                                 "job_flow_rtt_us"}
    svc.paths.stop()
    assert ctx.on_link_change == [svc.paths.forget]
    metrics = workload_metrics({"host": "h0", **state})
    assert all("job" not in m.labels for m in metrics)
    rtt = [m for m in metrics if m.name == "clockfabric_job_flow_rtt_seconds"]
    assert rtt[0].labels == {"jobid": "J", "flow": "10.0.0.1->10.0.1.1"} and rtt[0].value == pytest.approx(120e-6)
    assert state["workload"]["flows"][0]["flow"] == "10.0.0.1:1->10.0.1.1:2"  # the 5-tuple, in the state
