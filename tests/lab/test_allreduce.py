"""The collective benchmark (all-reduce, all-to-all) on a real 4-host dual-plane lab (h0, h1 under leaf0;
h2, h3 under leaf1)."""

import json
import subprocess
import threading
import time
from concurrent.futures import ThreadPoolExecutor

import pytest

from clockfabric.collective import allreduce
from clockfabric.collective.run import alltoall
from clockfabric.collective.schedulers import SCHEDULERS
from clockfabric.errors import USAGE_EXIT, ClockfabricError
from clockfabric.lab import impair
from clockfabric.lab.exec import command
from clockfabric.topology import multirail
from tests.conftest import lab_capable

reason = lab_capable()
pytestmark = [pytest.mark.lab, pytest.mark.skipif(reason is not None, reason=reason or "")]

HOSTS = ["h0", "h1", "h2", "h3"]
RATE = "40mbit"  # slow links: 4 hosts x 2 planes stay well inside what 2 busy cores forward
SIZE = 2 << 20  # 3 MB over each ring hop: 0.6 s on one 40 Mbit/s plane


def tx_bytes(lab, host: str, iface: str) -> int:
    proc = subprocess.run(command(lab, host, ["cat", f"/sys/class/net/{iface}/statistics/tx_bytes"]),
                          capture_output=True, text=True, check=True)
    return int(proc.stdout)


def run_counting(lab, **kw):
    """allreduce(), and the bytes every host sent on each plane's NIC meanwhile."""
    before = {(h, i): tx_bytes(lab, h, i) for h in HOSTS for i in ("eth0", "eth1")}
    res = allreduce(lab, HOSTS, timeout_s=20, **kw)
    sent = {i: sum(tx_bytes(lab, h, i) - before[(h, i)] for h in HOSTS) for i in ("eth0", "eth1")}
    return res, sent


def test_allreduce_correct_and_subflows_pinned_to_planes(make_lab, cli):
    lab = make_lab(multirail(4, 2, 2, 2, host_rate=RATE))

    one, sent1 = run_counting(lab, sizes=[SIZE], subflows=1, iters=2)
    two, sent2 = run_counting(lab, sizes=[SIZE], subflows=2, iters=2)
    hier = allreduce(lab, HOSTS, sizes=[4, 4 * 1021, 1 << 20], subflows=4, algorithm="hier", iters=1, timeout_s=20)

    for res in (one, two, hier):
        assert [r.wrong for r in res.rows] == [0] * len(res.rows), res
    assert one.planes == [0, 1] and one.expected_busbw_gbps == pytest.approx(0.005)
    assert two.expected_busbw_gbps == pytest.approx(0.010)
    # one subflow rides plane 0 only; two subflows split every message over both planes
    assert sent1["eth1"] < 0.02 * sent1["eth0"], sent1
    assert 0.4 < sent2["eth1"] / (sent2["eth0"] + sent2["eth1"]) < 0.6, sent2
    # ...and so move it faster: were pinning a no-op, both subflows would share plane 0's links
    b1, b2 = one.rows[0].busbw_gbps, two.rows[0].busbw_gbps
    assert b2 > 1.4 * b1, f"2 subflows on 2 planes: {b2:.4f} GB/s, 1 subflow: {b1:.4f} GB/s"
    # the lab carries its rate, to the right order: a busy machine slows it some (0.48 in a CI run
    # on a slow day, when every lab rate here read low); the 1.4x above is the pinning's test
    assert b1 > 0.4 * one.expected_busbw_gbps

    with ThreadPoolExecutor(2) as pool:  # two calls at once on disjoint hosts: their ports never collide
        pair = list(pool.map(lambda hs: allreduce(lab, hs, sizes=[1 << 16], subflows=2, iters=1, timeout_s=20),
                             [["h0", "h2"], ["h1", "h3"]]))
    assert [r.rows[0].wrong for r in pair] == [0, 0] and pair[0].port_base != pair[1].port_base

    proc = cli("bench", "allreduce", "--lab", lab.name, "--hosts", "h0,h3", "--sizes", "64K,100K", "--iters", "1",
               "--subflows", "2", "--json")
    data = json.loads(proc.stdout)
    assert [r["size_bytes"] for r in data["rows"]] == [65536, 102400] and data["hosts"] == ["h0", "h3"]
    assert all(r["wrong"] == 0 and r["busbw_gbps"] > 0 for r in data["rows"])
    bad = cli("bench", "allreduce", "--lab", lab.name, "--hosts", "h0,h9", "--sizes", "1M", check=False)
    assert bad.returncode == USAGE_EXIT and "'h9' is not a host" in bad.stderr and "Traceback" not in bad.stderr


def test_alltoall_correct_with_every_scheduler(make_lab, cli):
    lab = make_lab(multirail(4, 2, 2, 2, host_rate=RATE))
    for scheduler in SCHEDULERS.names():
        for algorithm in ("pairwise", "oneshot"):
            res = alltoall(lab, HOSTS, sizes=[1 << 20, 1000], subflows=2, algorithm=algorithm, iters=3,
                           scheduler=scheduler, timeout_s=20)  # 3 iterations after a warmup: a busy CI machine
            label = f"{scheduler} {algorithm}: {res.rows}"
            assert res.collective == "alltoall" and res.algorithm == algorithm, label
            assert [r.size_bytes for r in res.rows] == [992, 1 << 20], label  # rounded down to 4 * 4 ranks
            assert [r.count for r in res.rows] == [62, 1 << 16], label  # nccl-tests' count: per peer
            assert all(r.wrong == 0 and r.busbw_gbps > 0 for r in res.rows), label
            assert res.expected_busbw_gbps > 0 and res.ratio(res.rows[-1]) > 0.2, label
    assert res.placement == "learned"  # owd's default

    proc = cli("bench", "alltoall", "--lab", lab.name, "--hosts", "h0,h1,h3", "--sizes", "96K", "--iters", "1",
               "--warmup", "0", "--algorithm", "oneshot")
    assert "# all-to-all (oneshot): 3 ranks" in proc.stdout and "busbw = algbw * (n-1)/n;" in proc.stdout
    assert "98304         8192  float   none" in proc.stdout, proc.stdout
    bad = cli("bench", "alltoall", "--lab", lab.name, "--hosts", "h0", "--sizes", "1M", check=False)
    assert bad.returncode == USAGE_EXIT and "an all-to-all needs at least 2 hosts" in bad.stderr


def test_allreduce_over_a_dead_link_fails_clearly_within_the_timeout(make_lab):
    lab = make_lab(multirail(4, 2, 2, 2))
    impair.set_link(lab, impair.find_link(lab, "h2", "p0-leaf1"), up=False)  # h2's plane-0 NIC loses carrier
    t0 = time.monotonic()
    with pytest.raises(ClockfabricError) as failure:
        allreduce(lab, HOSTS, sizes=[1 << 20], subflows=1, planes=[0], timeout_s=3)
    took = time.monotonic() - t0
    message = str(failure.value)
    assert "h2" in message and "\n" not in message, message
    assert "cannot connect" in message or "no connection" in message, message
    assert took < 3 + 8, f"took {took:.1f} s"
    for h in HOSTS:  # every worker was stopped
        left = subprocess.run(["ip", "netns", "pids", lab.ns(h)], capture_output=True, text=True).stdout.split()
        assert not left, f"processes left on {h}: {left}"


def test_jobs_sharing_a_gate_begin_and_end_together_and_a_missing_one_fails_clearly(make_lab):
    lab = make_lab(multirail(4, 2, 2, 2, host_rate=RATE))
    gate, late_s = threading.Barrier(2), 3.0
    t0 = time.monotonic()

    def job(hosts, delay_s):
        time.sleep(delay_s)
        res = allreduce(lab, hosts, sizes=[64 << 10], iters=1, timeout_s=20, gate=gate)
        return res, time.monotonic() - t0

    with ThreadPoolExecutor(2) as pool:
        early, late = pool.submit(job, ["h0", "h2"], 0.0), pool.submit(job, ["h1", "h3"], late_s)
        (first, first_end), (second, _) = early.result(), late.result()
    assert first.rows[0].wrong == 0 and second.rows[0].wrong == 0
    # alone, the early job's 64 KiB would be done long before the late one is even launched
    assert first_end > late_s, f"the early job ended {first_end:.2f} s in, before its partner began"

    # each size starts together: the quick job's second size waits for the long job to finish its
    # first; and end together: the quick job keeps the fabric loaded until the long one has its timings
    done = []  # (when, job, iterations done over all sizes)

    def noted(name):
        return lambda stage, k, total: done.append((time.monotonic(), name, k)) if stage == "all-reduce" else None

    with ThreadPoolExecutor(2) as pool:
        quick = pool.submit(lambda: allreduce(lab, ["h0", "h2"], sizes=[64 << 10, 128 << 10], iters=1, timeout_s=20,
                                              gate=gate, progress=noted("quick")))
        long = pool.submit(lambda: allreduce(lab, ["h1", "h3"], sizes=[2 << 20, 4 << 20], iters=3, timeout_s=20,
                                             gate=gate, progress=noted("long")))
        first, second = quick.result(), long.result()
    assert all(row.wrong == 0 for row in first.rows + second.rows)
    long_sized = next(t for t, name, k in done if name == "long" and k == 4)  # warmup and 3 timed: its first size
    quick_second = next(t for t, name, k in done if name == "quick" and k == 3)  # its second size's warmup
    assert quick_second > long_sized, "the quick job began its second size before the long job had ended its first"
    sent = sum(row["bytes"] for row in first.subflow_stats["h0"])
    timed = 2 * (64 << 10) + 2 * (128 << 10)  # warmup and timed iteration of each size: a 2-rank ring sends its
    # whole buffer in each
    assert sent > 10 * timed, f"h0 sent {sent} bytes: the quick job stopped while the long one still ran"

    with pytest.raises(ClockfabricError) as failure:  # a partner that never comes: a clear error, no hang
        allreduce(lab, ["h0", "h2"], sizes=[64 << 10], iters=1, timeout_s=3, gate=threading.Barrier(2))
    assert "never connected within 3 s" in str(failure.value) and "\n" not in str(failure.value)
    left = subprocess.run(["ip", "netns", "pids", lab.ns("h0")], capture_output=True, text=True).stdout.split()
    assert not left, f"processes left on h0: {left}"
