"""The contention benchmark's ideal: link loads worked out by hand for each scenario."""

import pytest

from clockfabric.bench import contention, harness
from clockfabric.errors import USAGE_EXIT, ClockfabricError
from clockfabric.lab import process

MIB = 1 << 20
UPLINKS_BPS = 2 * 25e6  # leaf0's two spine links at 25 Mbit/s


@pytest.mark.parametrize("scenario, seconds", [
    # ring of 4 over 2 leaves: 2 hops cross each way, each 2(n-1)/n * 4 MiB = 6 MiB
    ("none", 2 * 6 * MIB * 8 / UPLINKS_BPS),
    ("two-allreduce", 4 * 6 * MIB * 8 / UPLINKS_BPS),
    # all-to-all: per job 2 ranks x 2 far peers x 1 MiB cross each way; two jobs
    ("two-alltoall", 2 * 4 * MIB * 8 / UPLINKS_BPS),
    # spine0 at a quarter: 25 + 6.25 Mbit/s
    ("degraded", 2 * 6 * MIB * 8 / 31.25e6),
    # one elephant each way on spine0: the job's 2 flows get 2/3 of it
    ("elephants", 2 * 6 * MIB * 8 / (25e6 + 25e6 * 2 / 3)),
])
def test_ideal_time_from_link_loads(scenario, seconds):
    assert contention.ideal_time_s(contention.topology(), scenario, 4 * MIB) == pytest.approx(seconds)


@pytest.mark.parametrize("scenario, seconds", [
    # four spines double the uplinks (100 Mbit/s): the 50 Mbit/s NICs bound the ring as much
    ("none", 6 * MIB * 8 / 50e6),
    ("two-allreduce", 4 * 6 * MIB * 8 / 100e6),
    # spine0 at a quarter: 75 + 6.25 Mbit/s
    ("degraded", 2 * 6 * MIB * 8 / 81.25e6),
])
def test_ideal_time_on_four_spines(scenario, seconds):
    assert contention.ideal_time_s(contention.topology(spines=4), scenario, 4 * MIB) == pytest.approx(seconds)


def test_the_host_nic_bounds_a_job_inside_one_leaf():
    jobs = [("allreduce", ["h0", "h1", "h2", "h3"])]  # all under leaf0: only the 50 Mbit/s NICs count
    assert contention.ideal_time_s(contention.topology(), "none", 4 * MIB, jobs) == pytest.approx(6 * MIB * 8 / 50e6)


def test_bad_choices_are_one_line():
    with pytest.raises(ClockfabricError, match="unknown scenario 'x'"):
        contention.Plan(scenarios=["x"], schedulers=["owd"], seeds=1, size=MIB, iters=1, subflows=2)
    with pytest.raises(ClockfabricError, match="--spines must be one of 2, 3, 4"):
        contention.Plan(scenarios=["none"], schedulers=["owd"], seeds=1, size=MIB, iters=1, subflows=2, spines=5)
    with pytest.raises(ClockfabricError, match="--spines must be one of"):
        contention.Plan(scenarios=["none"], schedulers=["owd"], seeds=1, size=MIB, iters=1, subflows=2,
                       fabric="dualplane", spines=4)
    with pytest.raises(ClockfabricError, match="no scheduler named .fast.; schedulers are ecmp"):
        contention.Plan(scenarios=["none"], schedulers=["fast"], seeds=1, size=MIB, iters=1, subflows=2)
    with pytest.raises(ClockfabricError, match="--rcvbuf must be 0"):
        contention.Plan(scenarios=["none"], schedulers=["owd"], seeds=1, size=MIB, iters=1, subflows=2, rcvbuf=1024)
    with pytest.raises(ClockfabricError, match="--rcvbuf-budget must be 0"):
        contention.Plan(scenarios=["none"], schedulers=["owd"], seeds=1, size=MIB, iters=1, subflows=2,
                       rcvbuf_budget=1024)
    with pytest.raises(ClockfabricError, match="--mtu must be one of 1500, 9000; got 4000"):
        contention.Plan(scenarios=["none"], schedulers=["owd"], seeds=1, size=MIB, iters=1, subflows=2, mtu=4000)
    with pytest.raises(ClockfabricError, match="--placement 'spread' is unknown; use hashed or learned"):
        contention.Plan(scenarios=["none"], schedulers=["owd"], seeds=1, size=MIB, iters=1, subflows=2,
                       placement="spread")
    with pytest.raises(ClockfabricError, match="--warmup must be at least 0; got -1"):
        contention.Plan(scenarios=["none"], schedulers=["owd"], seeds=1, size=MIB, iters=1, subflows=2, warmup=-1)


def test_summary_ratios_medians_and_what_was_possible():
    ideal = contention.ideal_time_s(contention.topology(), "none", 4 * MIB)  # 2.013 s

    def run(scheduler, seed, seconds):
        return contention.Run("none", scheduler, seed, [{"time_us": seconds * 1e6, "wrong": 0}])

    runs = [run("ecmp", 0, 4.0), run("ecmp", 1, 5.0), run("ecmp", 2, 4.4),
            run("owd", 0, 2.2), run("owd", 1, 2.6), run("owd", 2, 2.4)]
    rows = {r["scheduler"]: r for r in contention.summarize(contention.topology(), runs, 4 * MIB)}
    assert rows["owd"]["time_s"] == pytest.approx(2.4)  # the median, not the mean or the best
    assert rows["owd"]["time_range_s"] == [2.2, 2.6] and rows["ecmp"]["time_range_s"] == [4.0, 5.0]  # the seeds' spread
    assert rows["owd"]["speedup_vs_ecmp"] == pytest.approx(4.4 / 2.4, abs=1e-3)
    assert rows["owd"]["speedup_vs_least_outstanding"] is None  # not run
    assert rows["owd"]["of_ideal"] == pytest.approx(ideal / 2.4, abs=1e-3)
    assert rows["owd"]["of_tcp_ideal"] == pytest.approx(ideal / contention.tcp_payload(1500) / 2.4, abs=1e-3)
    assert rows["ecmp"]["ecmp_over_ideal"] == rows["owd"]["ecmp_over_ideal"] == pytest.approx(4.4 / ideal, abs=1e-3)


def test_jumbo_frames_keep_the_port_buffers_bytes_and_raise_tcps_ceiling():
    std, jumbo = contention.topology(), contention.topology(mtu=9000)
    assert (std.mtu, std.default_buffer_pkts) == (1500, 200)
    assert jumbo.mtu == 9000 and jumbo.default_buffer_pkts == 34  # 34 x 9014 bytes ~ 200 x 1514
    # the MSS over the frame and half an ack's frame for the other way's data
    assert contention.tcp_payload(1500) == pytest.approx(1448 / (1514 + 33)) == pytest.approx(0.936, abs=1e-3)
    assert contention.tcp_payload(9000) == pytest.approx(8948 / (9014 + 33)) == pytest.approx(0.989, abs=1e-3)
    assert contention.ideal_time_s(jumbo, "two-alltoall", 4 * MIB) == contention.ideal_time_s(std, "two-alltoall", 4 * MIB)


def test_subflows_default_to_one_per_spine_path():
    assert contention.spine_paths(contention.topology("leafspine", 4)) == 4
    assert contention.spine_paths(contention.topology("dualplane")) == 4  # 2 spines on each of 2 planes


def test_cpu_steal_is_the_share_of_ticks_taken_and_summaries_carry_its_median():
    assert harness.steal_share((100, 10_000), (150, 10_200)) == 0.25
    assert harness.steal_share(None, (150, 10_200)) is None  # no /proc/stat: unknown, not zero
    assert harness.steal_share((100, 10_000), (100, 10_000)) is None  # no time passed
    stolen, total = harness.cpu_ticks()
    assert 0 <= stolen <= total

    def run(seed, seconds, steal):
        return contention.Run("none", "owd", seed, [{"time_us": seconds * 1e6, "wrong": 0}], steal)

    rows = contention.summarize(contention.topology(), [run(0, 2.0, 0.1), run(1, 2.0, 0.3), run(2, 2.0, None)], MIB)
    assert rows[0]["cpu_steal"] == pytest.approx(0.2)  # the median of the runs that know it


@pytest.mark.parametrize("scenario, seconds", [
    ("none", 2 * 6 * MIB * 8 / (2 * UPLINKS_BPS)),  # both planes' uplinks
    ("degraded", 2 * 6 * MIB * 8 / (3 * 25e6 + 6.25e6)),  # p0-leaf0 - p0-spine0 at a quarter
    ("elephants", 2 * 6 * MIB * 8 / (3 * 25e6 + 25e6 * 2 / 3)),  # the elephants on p0-spine0
])
def test_ideal_time_on_a_dual_plane_lab(scenario, seconds):
    topo = contention.topology("dualplane")
    assert contention.ideal_time_s(topo, scenario, 4 * MIB) == pytest.approx(seconds)
    assert contention.plane0(topo, "spine0") == "p0-spine0"


def test_owd_is_judged_against_the_targets_and_what_no_scheduler_could_reach():
    topo = contention.topology()
    tcp_ideal = contention.ideal_time_s(topo, "two-alltoall", 4 * MIB) / contention.tcp_payload(1500)

    def run(scenario, scheduler, seconds):
        return contention.Run(scenario, scheduler, 0, [{"time_us": seconds * 1e6, "wrong": 0}])

    runs = [run("two-alltoall", "ecmp", 1.4 * tcp_ideal),  # within 1.5x of the TCP ideal: 1.5x over it is impossible
            run("two-alltoall", "least-outstanding", 1.3 * tcp_ideal),
            run("two-alltoall", "owd", 1.03 * tcp_ideal),
            run("none", "ecmp", 3.0), run("none", "least-outstanding", 2.0), run("none", "owd", 2.1)]
    verdicts = {v["scenario"]: v for v in contention.judge(contention.summarize(topo, runs, 4 * MIB))}
    a2a = verdicts["two-alltoall"]
    assert a2a["vs_ecmp"]["value"] == pytest.approx(1.4 / 1.03, abs=1e-3)
    assert not a2a["vs_ecmp"]["met"] and not a2a["vs_ecmp"]["possible"]
    assert a2a["vs_least_outstanding"]["met"] and a2a["vs_least_outstanding"]["possible"]  # 1.26x over 1.2x
    assert a2a["of_ideal"]["met"] and a2a["of_ideal"]["value"] == pytest.approx(contention.tcp_payload(1500) / 1.03, abs=1e-3)
    quiet = verdicts["none"]
    assert quiet["over_best_baseline"] == pytest.approx(1.05) and not quiet["met"]  # 5% over the best: more than 3%

    from rich.console import Console

    from clockfabric.bench.contention.command import _targets_table

    console = Console(width=120, record=True)
    console.print(_targets_table(list(verdicts.values())))
    text = console.export_text()
    assert "1.36x out of reach" in text and "1.26x met" in text and "0.91 met" in text
    assert "1.05x of best short" in text


def test_a_scenario_without_owd_is_not_judged():
    rows = contention.summarize(contention.topology(), [
        contention.Run("degraded", "ecmp", 0, [{"time_us": 5e6, "wrong": 0}])], 4 * MIB)
    assert contention.judge(rows) == []


def test_each_judged_ratio_carries_a_bootstrap_interval_over_the_seeds():
    topo = contention.topology()
    ideal = contention.ideal_time_s(topo, "two-alltoall", 4 * MIB)

    def run(scenario, scheduler, seed, seconds):
        return contention.Run(scenario, scheduler, seed, [{"time_us": seconds * 1e6, "wrong": 0}])

    ecmp = [1.2, 1.3, 1.5, 1.6, 1.9, 2.0, 2.1, 2.6]  # a baseline's draws of paths: wide
    owd = [1.00, 1.00, 1.01, 1.01, 1.02, 1.02, 1.03, 1.03]  # tight
    runs = ([run("two-alltoall", "ecmp", i, t) for i, t in enumerate(ecmp)]
            + [run("two-alltoall", "least-outstanding", i, 1.25) for i in range(8)]
            + [run("two-alltoall", "owd", i, t) for i, t in enumerate(owd)])
    summary = contention.summarize(topo, runs, 4 * MIB)
    assert {r["scheduler"]: r["times_s"] for r in summary}["ecmp"] == sorted(ecmp)  # every seed, in the JSON
    a2a = contention.judge(summary)[0]
    lo, hi = a2a["vs_ecmp"]["interval"]
    assert lo < a2a["vs_ecmp"]["value"] < hi  # the median ratio, 1.75 / 1.015, inside
    assert 1.2 / 1.03 <= lo and hi <= 2.6 / 1.0  # no further than the seeds themselves reach
    assert hi - lo > 0.3  # ecmp's spread shows
    # a baseline whose seeds agree moves only with owd's: a narrow interval
    lo_lo, hi_lo = a2a["vs_least_outstanding"]["interval"]
    assert 1.25 / 1.03 <= lo_lo < hi_lo <= 1.25 / 1.0 and hi_lo - lo_lo < 0.03
    assert a2a["of_ideal"]["interval"][0] <= a2a["of_ideal"]["value"] <= a2a["of_ideal"]["interval"][1]
    assert a2a["of_ideal"]["interval"][1] <= ideal / 1.0
    assert contention.judge(summary) == contention.judge(summary)  # seeded: the same report, the same intervals

    quiet = contention.judge(contention.summarize(topo, [run("none", "ecmp", 0, 3.0), run("none", "owd", 0, 2.1)],
                                                  4 * MIB))[0]
    assert quiet["interval"] == [0.7, 0.7]  # one seed each: nothing to resample

    from rich.console import Console

    from clockfabric.bench.contention.command import _targets_table

    console = Console(width=160, record=True)
    console.print(_targets_table([a2a, quiet]))
    text = console.export_text()
    assert f"({lo:.2f}-{hi:.2f})" in text and "0.70x of best met (0.70-0.70)" in text


def test_a_saved_report_is_judged_again_from_its_runs(cli, tmp_path):
    import json
    from dataclasses import asdict

    topo = contention.topology("leafspine", 4)
    runs = [contention.Run("two-alltoall", s, seed, [{"time_us": t * 1e6, "wrong": 0}], 0.0)
            for seed in range(4) for s, t in (("ecmp", 1.0 + 0.2 * seed), ("least-outstanding", 0.9), ("owd", 0.75))]
    # as an older version wrote it: no per-seed times in the summary, no intervals in the verdicts
    report = {"lab": {"fabric": "leafspine", "spines": 4, "mtu": 1500}, "size_bytes": 4 * MIB, "warmup": 5,
              "iters": 12, "subflows": 4, "seeds": 4, "rcvbuf_bytes": 32 << 10, "rcvbuf_budget_bytes": 192 << 10,
              "placement": "owd learned, baselines hashed", "cpu_steal": 0.0, "summary": [], "targets": [],
              "runs": [asdict(r) for r in runs]}
    again = contention.rejudge(report)
    assert again["summary"] == contention.summarize(topo, runs, 4 * MIB)
    assert again["targets"][0]["vs_least_outstanding"]["value"] == pytest.approx(1.2)
    assert again["targets"][0]["vs_ecmp"]["interval"][0] < again["targets"][0]["vs_ecmp"]["interval"][1]

    saved = tmp_path / "report.json"
    saved.write_text(json.dumps(report))
    text = cli("bench", "contention", "--from", str(saved)).stdout
    assert "owd against its targets" in text and "1.20x met (1.20-1.20)" in text and "4 spines" in text
    assert json.loads(cli("bench", "contention", "--from", str(saved), "--json").stdout)["targets"] == again["targets"]

    saved.write_text(json.dumps({"runs": []}))
    for path, message in ((saved, "not a contention report"), (tmp_path / "none.json", "cannot read the report")):
        proc = cli("bench", "contention", "--from", str(path), check=False)
        text = " ".join(proc.stderr.split())
        assert proc.returncode == USAGE_EXIT and message in text and "Traceback" not in text, proc.stderr


def test_background_traffic_that_ends_early_stops_the_bench():
    import subprocess
    import sys

    alive = subprocess.Popen([sys.executable, "-c", "import time; time.sleep(60)"])
    done = subprocess.Popen([sys.executable, "-c", "raise SystemExit(1)"])
    try:
        done.wait()
        contention.still_running([alive], "elephants under owd, seed 0")  # running: nothing to say
        with pytest.raises(ClockfabricError, match=r"elephant flow ended \(exit code 1\) before elephants under "
                                                   r"owd, seed 2 was done"):
            contention.still_running([alive, done], "elephants under owd, seed 2")
        assert contention.ELEPHANT_SECONDS >= 3600  # past any scenario the bench runs; it stops them itself
    finally:
        process.stop([alive])


def test_with_elephants_out_of_reach_is_judged_against_the_whole_spine_not_a_fair_share():
    topo = contention.topology()
    payload = contention.tcp_payload(1500)
    fair = contention.ideal_time_s(topo, "elephants", 4 * MIB)
    whole = contention.ideal_time_s(topo, "elephants", 4 * MIB, fair=False)
    assert whole == pytest.approx(contention.ideal_time_s(topo, "none", 4 * MIB)) and whole < fair
    assert contention.ideal_time_s(topo, "degraded", 4 * MIB, fair=False) == contention.ideal_time_s(topo, "degraded", 4 * MIB)

    def run(scheduler, seconds):
        return contention.Run("elephants", scheduler, 0, [{"time_us": seconds * 1e6, "wrong": 0}])

    # ecmp within 1.5x of the fair TCP ideal, but not of the whole spine's: owd can take more than
    # its fair share, so 1.5x over ecmp is still possible (the 2-spine bench read 1.498x here)
    ecmp = 1.45 * fair / payload
    assert ecmp / (whole / payload) >= 1.5
    verdict = contention.judge(contention.summarize(topo, [run("ecmp", ecmp), run("owd", ecmp / 1.498)], 4 * MIB))[0]
    assert not verdict["vs_ecmp"]["met"] and verdict["vs_ecmp"]["possible"]  # short, not out of reach


def saved_report(tmp_path, runs) -> str:
    """A contention report of these runs on the 2-spine lab, saved as the bench saves one: its path."""
    import json
    from dataclasses import asdict

    report = {"lab": {"fabric": "leafspine", "spines": 2, "mtu": 1500}, "size_bytes": 4 * MIB, "warmup": 5,
              "iters": 12, "subflows": 2, "seeds": len({r.seed for r in runs}), "rcvbuf_bytes": 32 << 10,
              "rcvbuf_budget_bytes": 192 << 10, "standby": True, "placement": "owd learned, baselines hashed",
              "cpu_steal": 0.0, "summary": [], "targets": [], "runs": [asdict(r) for r in runs]}
    saved = tmp_path / "report.json"
    saved.write_text(json.dumps(report))
    return str(saved)


def test_summaries_say_what_share_of_the_bytes_standbys_carried(cli, tmp_path):
    def run(scheduler, seed, carried, on_standby):
        return contention.Run("elephants", scheduler, seed, [{"time_us": 2e6, "wrong": 0, "bytes": carried,
                                                             "standby_bytes": on_standby}])

    runs = [run("owd", 0, 100, 30), run("owd", 1, 300, 10), run("ecmp", 0, 100, 0),
            contention.Run("elephants", "least-outstanding", 0, [{"time_us": 3e6, "wrong": 0}])]  # an older report's
    rows = {r["scheduler"]: r for r in contention.summarize(contention.topology(), runs, 4 * MIB)}
    assert rows["owd"]["on_standbys"] == 0.1 and rows["ecmp"]["on_standbys"] == 0.0
    assert rows["least-outstanding"]["on_standbys"] is None
    lines = cli("bench", "contention", "--from", saved_report(tmp_path, runs)).stdout.splitlines()
    owd = next(line for line in lines if "│ owd" in line)
    assert "10%" in owd and "no standbys" not in "".join(lines)


def test_summaries_say_what_the_jobs_left_the_elephants(cli, tmp_path):
    def run(scheduler, seed, during, alone):
        return contention.Run("elephants", scheduler, seed, [{"time_us": 2e6, "wrong": 0}],
                              outside_mbps=during, outside_alone_mbps=alone)

    runs = [run("owd", 0, 10.0, 40.0), run("owd", 1, 12.0, 40.0), run("owd", 2, 30.0, 40.0),
            run("ecmp", 0, 20.0, 40.0), run("ecmp", 1, 20.0, None),  # an alone reading that failed
            contention.Run("elephants", "least-outstanding", 0, [{"time_us": 3e6, "wrong": 0}])]  # an older report's
    rows = {r["scheduler"]: r for r in contention.summarize(contention.topology(), runs, 4 * MIB)}
    assert rows["owd"]["outside_mbps"] == 12.0 and rows["owd"]["outside_kept"] == 0.3
    assert rows["ecmp"]["outside_mbps"] == 20.0 and rows["ecmp"]["outside_kept"] == 0.5
    assert rows["least-outstanding"]["outside_mbps"] is None and rows["least-outstanding"]["outside_kept"] is None
    assert contention.mbps((1.0, 0), (3.0, 5_000_000)) == 20.0 and contention.mbps((1.0, 0), (1.0, 9)) is None
    text = cli("bench", "contention", "--from", saved_report(tmp_path, runs)).stdout
    assert "the elephants while the job ran" in text
    owd = [line for line in text.splitlines() if "│ owd" in line][-1]
    assert "12.0 Mbit/s" in owd and "30%" in owd
    # a report without elephants prints no such table
    quiet = [contention.Run("none", "owd", 0, [{"time_us": 2e6, "wrong": 0}])]
    assert "elephants while" not in cli("bench", "contention", "--from", saved_report(tmp_path, quiet)).stdout
