"""What keeps the workload service cheap with live job traffic, each held to its result: the
fds of job processes listed only when a socket is new or the jobs change, a process that cannot
be read not read again, a batch of kernel times mapped to global time by two calls, sampled
packets read from a TPACKET_V3 ring (on loopback: every sampled packet of a flow, leaving and
arriving, in order), and CPU time counted by stage."""

from __future__ import annotations

import shutil
import socket
import threading
import time

import pytest

from clockfabric.workload import stages
from clockfabric.workload.monitor import WorkloadMonitor
from clockfabric.workload.owd_monitor import batch_times
from clockfabric.workload.procfs import ProcFs
from tests.unit.test_workload import fake_proc, reading


class CountingProcFs(ProcFs):
    def __init__(self, root):
        super().__init__(root)
        self.listed: list[int] = []
        self.read: list[int] = []

    def socket_inodes(self, pid: int) -> set[int]:
        self.listed.append(pid)
        return super().socket_inodes(pid)

    def process(self, pid: int):
        self.read.append(pid)
        return super().process(pid)


def test_job_fds_are_listed_only_for_a_new_socket_or_a_change_of_jobs(tmp_path):
    root = fake_proc(tmp_path / "proc", {100: {"env": {"CLOCKFABRIC_JOB": "J"}, "sockets": [11, 12]},
                                         400: {"env": {"PATH": "/bin"}, "sockets": [15]}})
    fs = CountingProcFs(root)
    readings = [reading(1, 2, 11, 1), reading(5, 6, 15, 3)]
    mon = WorkloadMonitor(fs, lambda: readings)
    assert [f.rates.reading.inode for f in mon.update().flows] == [11]
    assert fs.listed == [100]
    for _ in range(3):  # the same sockets, the job's and the one of no job: no listing
        assert [f.rates.reading.inode for f in mon.update().flows] == [11]
    assert fs.listed == [100]
    readings.append(reading(3, 4, 12, 2))  # a new socket: listed again, and found
    assert sorted(f.rates.reading.inode for f in mon.update().flows) == [11, 12]
    assert fs.listed == [100, 100]
    more = fake_proc(tmp_path / "more", {101: {"env": {"CLOCKFABRIC_JOB": "K"}, "sockets": [15]}})
    (more / "101").rename(root / "101")  # a new job process: listed again
    shutil.rmtree(root / "400")
    assert {f.rates.reading.inode: f.jobid for f in mon.update().flows} == {11: "J", 12: "J", 15: "K"}
    assert sorted(fs.listed[2:]) == [100, 101]


def test_a_process_that_cannot_be_read_is_not_read_again_while_listed(tmp_path):
    root = fake_proc(tmp_path / "proc", {100: {"env": {"CLOCKFABRIC_JOB": "J"}}})
    (root / "2").mkdir()  # a kernel thread: listed, its environ unreadable
    fs = CountingProcFs(root)
    mon = WorkloadMonitor(fs, None)
    for _ in range(3):
        assert list(mon.update().jobs) == ["J"]
    assert sorted(fs.read) == [2, 100]


def test_a_batch_of_kernel_times_maps_as_each_time_alone_would():
    def to_time(real_ns: int) -> tuple[int, bool]:  # an offset and a drift of 30 ppm
        return 5_000 + real_ns + round(real_ns * 30e-6), True

    times = [1_000_000_000, 1_000_000_017, 1_400_123_456, 1_999_999_999]
    assert batch_times(to_time, times) == [to_time(t) for t in times]
    assert batch_times(to_time, [7, 7]) == [to_time(7)] * 2
    assert batch_times(to_time, []) == []


def test_a_batch_with_an_end_not_synced_is_mapped_time_by_time():
    calls = []

    def to_time(real_ns: int) -> tuple[int, bool]:  # synced from 100 on
        calls.append(real_ns)
        return real_ns + 1, real_ns >= 100

    assert batch_times(to_time, [50, 120, 150]) == [(51, False), (121, True), (151, True)]
    assert calls == [50, 150, 50, 120, 150]


def test_cpu_is_counted_by_stage():
    cpu = stages.StageCpu()
    with cpu.stage(stages.CAPTURE):
        end = time.thread_time() + 0.02
        while time.thread_time() < end:
            pass
    with cpu.stage(stages.MATCH):
        pass
    cpu.add(stages.PATHS, 0.5)
    assert cpu.seconds[stages.CAPTURE] >= 0.02 and cpu.seconds[stages.MATCH] < 0.01
    assert cpu.total() == pytest.approx(sum(cpu.as_dict().values())) and cpu.as_dict()[stages.PATHS] == 0.5


def test_the_ring_gives_each_sampled_packet_of_a_flow_leaving_and_arriving():
    from clockfabric.workload.capture import Capture
    from clockfabric.workload.inband import selected

    try:
        capture = Capture(["lo"])
    except (OSError, ValueError) as e:  # no raw sockets here
        pytest.skip(f"no AF_PACKET ring here: {e}")
    srv = socket.socket()
    srv.bind(("127.0.0.1", 0))
    srv.listen()
    client = socket.create_connection(srv.getsockname())
    client.setsockopt(socket.IPPROTO_TCP, socket.TCP_NODELAY, 1)
    conn, _ = srv.accept()
    reader = threading.Thread(target=lambda: [None for _ in iter(lambda: conn.recv(1 << 16), b"")], daemon=True)
    reader.start()
    try:
        start = time.time_ns()
        for i in range(400):
            client.send(b"x" * (100 + i))
            if i % 50 == 0:
                time.sleep(0.002)  # separate segments
        time.sleep(0.3)  # past the ring's retire timeout: the last block handed over
        got = [(p, side, t) for p, side, t in capture.drain() if p.sport == client.getsockname()[1]]
    finally:
        client.close()
        conn.close()
        srv.close()
        capture.close()
    assert got, "no sampled packet of the flow"
    assert all(selected(p.seq) for p, _, _ in got)
    sides: dict = {}
    for p, side, t in got:
        sides.setdefault(p, {})[side] = t
    assert all(set(s) == {"tx", "rx"} for s in sides.values())  # on loopback each is seen leaving and arriving
    assert all(start <= s["tx"] <= s["rx"] < start + 10**10 for s in sides.values())
    assert capture.dropped() == 0


def test_the_service_cost_of_each_pair_is_its_agent_cpu_with_less_without():
    from clockfabric.bench.workload.cost_ddp import Pairs

    pairs = Pairs(with_workload=[0.4] * 3, without=[0.4] * 3, order=["A", "B", "A"],
                  agent_cpu={"A": [0.015, 0.012, 0.020], "B": [0.008, 0.009, 0.008]},
                  stage_cpu=[{"capture": 0.002, "flows": 0.001}, {"capture": 0.004},
                             {"capture": 0.003, "flows": 0.003}])
    assert pairs.service_cpu == pytest.approx([0.007, 0.003, 0.012])
    low, high = pairs.interval(pairs.service_cpu)
    assert 0.003 <= low <= 0.007 <= high <= 0.012
    assert pairs.median_stages() == pytest.approx({"capture": 0.003, "flows": 0.001})
    assert list(pairs.median_stages()) == ["capture", "flows"]  # largest first
    assert pairs.as_dict()["service_cpu_share"] == pairs.service_cpu


def test_a_young_process_of_no_job_is_read_again_only_for_its_job_marks_until_it_has_some(tmp_path):
    from tests.unit.test_workload import BTIME

    root = fake_proc(tmp_path / "proc", {500: {"env": {"PATH": "/bin"}, "start_after_boot_s": time.time() - BTIME}})
    fs = CountingProcFs(root)
    marks: list[int] = []
    job_marks = fs.job_marks
    fs.job_marks = lambda pid: marks.append(pid) or job_marks(pid)  # type: ignore[method-assign]
    mon = WorkloadMonitor(fs, None)
    for _ in range(3):
        assert not mon.update().jobs
    assert fs.read == [500] and marks == [500] * 3  # the first reading, then its marks twice
    (root / "500" / "environ").write_bytes(b"CLOCKFABRIC_JOB=late\0")  # it exec'd into a job
    assert list(mon.update().jobs) == ["late"]
    assert fs.read == [500, 500]


def test_the_kernel_filter_with_the_job_flows_ports_keeps_only_their_sampled_packets():
    import random

    from clockfabric.workload.inband import JEQ_K, MAX_PORT_PAIRS, bpf_program, parse_frame, run_bpf
    from tests.unit.test_inband import frame

    ports = {(40000, 5201): 4, (5201, 40000): 4, (1234, 80): 4}
    program = bpf_program(ports=ports)
    rng = random.Random(3)
    frames = [frame(rng.randrange(2**32), payload=rng.choice([0, 100]), sport=rng.choice([40000, 5201, 1234, 999]),
                    dport=rng.choice([5201, 40000, 80, 22])) for _ in range(4000)]
    kept = [run_bpf(program, f) > 0 for f in frames]
    expected = [(p := parse_frame(f)) is not None and (p.sport, p.dport) in ports for f in frames]
    assert kept == expected and 20 < sum(kept) < 200
    jumps = [(at, jt, jf) for at, (code, jt, jf, _) in enumerate(program) if code == JEQ_K]
    assert all(at + 1 + jt < len(program) and at + 1 + jf < len(program) for at, jt, jf in jumps)
    assert not any(run_bpf(bpf_program(ports={}), f) for f in frames)  # no job flow: nothing copied
    widest = bpf_program(ports={(p, 1): 4 + p % 7 for p in range(MAX_PORT_PAIRS)})  # all within a jump's reach
    assert len(widest) > MAX_PORT_PAIRS
    with pytest.raises(ValueError):
        bpf_program(ports={(p, 1): 4 for p in range(MAX_PORT_PAIRS + 1)})


def test_each_flow_direction_is_sampled_by_its_own_bits_in_the_kernel():
    import random

    from clockfabric.workload.inband import bpf_program, parse_frame, run_bpf, selected
    from tests.unit.test_inband import frame

    ports = {(40000, 5201): 4, (5201, 40000): 7}
    program = bpf_program(ports=ports)
    rng = random.Random(4)
    frames = [frame(rng.randrange(2**32), sport=s, dport=d) for s, d in [*ports, (1, 2)] for _ in range(6000)]
    kept = [parse_frame(f) for f in frames if run_bpf(program, f)]
    assert all(selected(p.seq, ports[p.sport, p.dport]) for p in kept)
    assert kept == [p for f in frames if (p := parse_frame(f)) and (p.sport, p.dport) in ports
                    and selected(p.seq, ports[p.sport, p.dport])]
    by_way = {way: sum((p.sport, p.dport) == way for p in kept) for way in ports}
    assert 250 < by_way[(40000, 5201)] < 500 and 20 < by_way[(5201, 40000)] < 80  # 1 in 16, 1 in 128


def test_a_busy_flow_direction_is_sampled_more_sparsely():
    from clockfabric.workload.inband import DEFAULT_BITS, MAX_BITS
    from clockfabric.workload.owd_monitor import SAMPLES_PER_S, sampling_bits

    cap = SAMPLES_PER_S * 2**DEFAULT_BITS  # segments a second that 1 in 16 samples to the cap
    assert sampling_bits(100.0, None) == DEFAULT_BITS  # ~6 a second: as dense as it goes
    assert sampling_bits(cap, None) == DEFAULT_BITS
    assert sampling_bits(cap + 1, None) == DEFAULT_BITS + 1
    assert sampling_bits(8000.0, None) == 8  # a 90 Mbit/s flow: 1 in 256 makes 31 a second
    assert sampling_bits(10**7, None) == MAX_BITS  # never sparser than 1 in 1024
    assert sampling_bits(None, None) == MAX_BITS  # not measured yet: its rate is unknown, not small


def test_a_direction_that_falls_quiet_is_sampled_more_densely_one_step_an_update():
    from clockfabric.workload.inband import DEFAULT_BITS
    from clockfabric.workload.owd_monitor import sampling_bits

    bits = sampling_bits(8000.0, None)
    steps = []
    for _ in range(6):  # a compute phase: nothing sent, back toward 1 in 16 a bit at a time
        bits = sampling_bits(0.0, bits)
        steps.append(bits)
    assert steps == [7, 6, 5, DEFAULT_BITS, DEFAULT_BITS, DEFAULT_BITS]
    assert sampling_bits(8000.0, 5) == 8  # a burst again: as sparse as its rate wants at once


def test_the_capture_filter_follows_the_job_flows_and_opens_past_its_limit():
    from clockfabric.workload.capture import Capture
    from clockfabric.workload.inband import MAX_PORT_PAIRS

    capture = Capture([])
    capture.only({(1, 2): 4, (2, 1): 6})
    assert capture.ports == {(1, 2): 4, (2, 1): 6}
    capture.only({(p, 1): 4 for p in range(MAX_PORT_PAIRS + 1)})
    assert capture.ports is None  # any: user space drops what is no job flow's


def test_the_ring_keeps_only_the_job_flows_ports_once_told():
    from clockfabric.workload.capture import Capture

    try:
        capture = Capture(["lo"])
    except (OSError, ValueError) as e:
        pytest.skip(f"no AF_PACKET ring here: {e}")
    srv = socket.socket()
    srv.bind(("127.0.0.1", 0))
    srv.listen()
    clients = [socket.create_connection(srv.getsockname()) for _ in range(2)]
    conns = [srv.accept()[0] for _ in clients]
    for c in clients:
        c.setsockopt(socket.IPPROTO_TCP, socket.TCP_NODELAY, 1)
    job = clients[0].getsockname()[1], srv.getsockname()[1]
    try:
        capture.only({job: 4, job[::-1]: 4})
        for i in range(300):
            for c in clients:
                c.send(b"x" * (100 + i))
            for c in conns:
                c.recv(1 << 16)
        time.sleep(0.3)
        got = capture.drain()
    finally:
        for s in (*clients, *conns, srv):
            s.close()
        capture.close()
    assert got and {(p.sport, p.dport) for p, _, _ in got} <= {job, job[::-1]}


def test_the_kernel_hands_over_no_packet_without_a_payload():
    from clockfabric.workload.capture import Capture
    from clockfabric.workload.inband import parse_frame

    try:
        capture = Capture(["lo"], bits=1)  # half of all sequence numbers: pure ACKs are met often
    except (OSError, ValueError) as e:
        pytest.skip(f"no AF_PACKET ring here: {e}")
    srv = socket.socket()
    srv.bind(("127.0.0.1", 0))
    srv.listen()
    client = socket.create_connection(srv.getsockname())
    conn = srv.accept()[0]
    job = client.getsockname()[1], srv.getsockname()[1]
    try:
        capture.only({job: 1, job[::-1]: 1})
        for i in range(400):
            client.send(b"x" * 1000)
            conn.recv(1 << 16)  # acknowledged by pure ACKs, whose sequence number moves with the replies
            if i % 8 == 0:
                conn.send(b"y")
                client.recv(1 << 16)
        time.sleep(0.3)
        frames = [frame for ring in capture.rings for frame, _, _ in ring.frames()]
    finally:
        for s in (client, conn, srv):
            s.close()
        capture.close()
    assert len(frames) > 100 and all(parse_frame(f, 1) is not None for f in frames)


def test_both_ends_of_a_busy_direction_choose_its_bits_from_its_segments():
    from clockfabric.traffic.steer_decide import FlowKey
    from clockfabric.workload.flows import FlowRates, SocketReading
    from clockfabric.workload.monitor import JobFlow, WorkloadView
    from clockfabric.workload.owd_monitor import InbandOwd
    from tests.unit.test_inband import A, B

    def flow_view(local, lport, remote, rport, sent_pps, received_pps):
        reading = SocketReading(FlowKey(local, lport, remote, rport), 1, 1, 0, 0, 0, 200, 10, 0.0)
        return WorkloadView(flows=[JobFlow("J", 1, FlowRates(reading, None, None, 0, sent_pps, received_pps))])

    ends = {"ha": InbandOwd("ha", {B: "hb"}, lambda t: (t, True), window_ns=10**9),
            "hb": InbandOwd("hb", {A: "ha"}, lambda t: (t, True), window_ns=10**9)}
    first = {"ha": flow_view(A, 40000, B, 5201, None, None), "hb": flow_view(B, 5201, A, 40000, None, None)}
    for name, end in ends.items():  # a new socket: no rate yet, sampled the most sparsely
        end.flows_changed(first[name])
        assert end.port_bits() == {(40000, 5201): 10, (5201, 40000): 10}
    # a->b carries 3,200 segments a second (a sent them, b received them), b->a 200
    busy = {"ha": flow_view(A, 40000, B, 5201, 3200.0, 200.0), "hb": flow_view(B, 5201, A, 40000, 200.0, 3200.0)}
    for name, end in ends.items():
        end.flows_changed(busy[name])
    assert ends["ha"].port_bits() == {(40000, 5201): 6, (5201, 40000): 4}  # 1 in 64 makes 50 a second
    assert ends["hb"].port_bits() == ends["ha"].port_bits()
    quiet = {"ha": flow_view(A, 40000, B, 5201, 0.0, 0.0), "hb": flow_view(B, 5201, A, 40000, 0.0, 0.0)}
    for name, end in ends.items():  # a second of compute: a bit denser, not back to 1 in 16
        end.flows_changed(quiet[name])
        assert end.port_bits() == {(40000, 5201): 5, (5201, 40000): 4}
