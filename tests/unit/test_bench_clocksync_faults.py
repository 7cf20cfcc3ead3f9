"""`bench clocksync`'s fault scenarios: global time's departure from its line, and judging repeats."""

from __future__ import annotations

from types import SimpleNamespace

import pytest

from clockfabric.bench.clocksync.faults import across_repeats, judge, line_departure, spread, verdicts
from clockfabric.bench.clocksync.report import targets


def test_a_steady_rate_is_no_departure_but_a_step_or_a_bend_is():
    steady = [(t / 2, 1_000.0 + 50.0 * t / 2) for t in range(60)]  # 50 ns/s, sampled every 0.5 s
    assert line_departure(steady, 15.0) == pytest.approx(0.0, abs=1e-6)
    stepped = [(t, v + (800.0 if t >= 15.0 else 0.0)) for t, v in steady]
    assert line_departure(stepped, 15.0) == pytest.approx(800.0)
    bent = [(t, v + (20.0 * (t - 15.0) if t >= 15.0 else 0.0)) for t, v in steady]
    assert line_departure(bent, 15.0) == pytest.approx(20.0 * 14.5)  # the last sample, 14.5 s on
    assert line_departure(steady[:2] + steady[40:], 15.0) is None  # nothing to fit before the event
    settling = [(t, v + (9e8 if t < 10.0 else 0.0)) for t, v in steady]  # before convergence: not the line
    assert line_departure(settling, 15.0, from_s=10.0) == pytest.approx(0.0, abs=1e-6)


def test_global_time_is_judged_over_the_run_not_while_its_agents_are_stopped():
    line = [(t / 2, 15_000.0 * t / 2) for t in range(20, 120)]  # 15 ppm, every 0.5 s, to 59.5 s
    teardown = [(61.0, 15_000.0 * 61.0 + 8_000.0)]  # a solve as the agents go, after the run's 60 s
    watch = SimpleNamespace(errors=[], bounds=[], ensemble=line + teardown, steady_from=lambda: 10.0)
    res = {"flows": [], "sync_seconds": 60.0}
    judge(res, watch, SimpleNamespace(reference="h0"), "K", None, {"at_s": 20.0, "host": "h0"})
    assert res["ensemble_departure_ns"] == pytest.approx(0.0, abs=1e-3)
    res = {"flows": [], "sync_seconds": 62.0}  # within the run, it counts
    judge(res, watch, SimpleNamespace(reference="h0"), "K", None, {"at_s": 20.0, "host": "h0"})
    assert res["ensemble_departure_ns"] == pytest.approx(8_000.0)


def test_a_load_is_judged_from_when_it_began_to_start_which_the_watcher_did_not_sample():
    # the load began at 30 s; starting it took to 41 s, with no sample between
    line = [(t / 2, 15_000.0 * t / 2) for t in range(20, 120) if not 30.0 < t / 2 < 41.0]
    watch = SimpleNamespace(errors=[], bounds=[], ensemble=line, steady_from=lambda: 20.0, named_after=None)
    fab = SimpleNamespace(reference="h0", leaves={})
    res = {"flows": [], "sync_seconds": 60.0, "load_began_s": 30.0}
    judge(res, watch, fab, "L2", 41.0, None)
    assert res["ensemble_departure_ns"] == pytest.approx(0.0, abs=1e-3)
    del res["load_began_s"]  # judged from the load's end of start: nothing sampled in the 10 s before
    judge(res, watch, fab, "L2", 41.0, None)
    assert res["ensemble_departure_ns"] is None


def fault_result(key: str, quiet_p99: float | None, repeat: int = 0, **extra) -> dict:
    return {"hosts": 8, "scenario": key, "name": key.lower(), "repeat": repeat,
            "methods": {"clockfabric": {"p99_ns": 5_000.0}},
            "quiet_hosts": {"hosts": ["h3", "h4"], "worst_p99_ns": quiet_p99, "worst_max_ns": quiet_p99},
            "quiet_bound": {"p99_ns": quiet_p99, "bound_p50_ns": 400.0,
                            "ratio": None if quiet_p99 is None else 400.0 / quiet_p99}, **extra}


def test_the_fault_targets_read_each_figure_against_its_bar():
    r = fault_result("S", 150.0, ensemble_departure_ns=1_800.0,
                     resync={"reconverged_s": 1.5, "max_error_after_step_ns": 5e7},
                     fault={"host": "h8", "what": "clock stepped +50ms"})
    checks = {c["target"].split(" ")[2]: c for c in verdicts([r])}
    assert checks["worst"]["met"] and checks["bound"]["met"]  # 150 ns; bound 2.67x the p99
    assert not checks["off"]["met"] and checks["off"]["value"] == "1,800 ns"
    assert checks["back"]["met"]
    bars = {t.name.split(": ", 1)[1]: t for t in targets(verdicts([r]))}
    assert {t.bar for t in bars.values()} == {2_000.0, 5.0, 1_000.0, 4.0}
    assert all(t.better == "lower" for t in bars.values())
    named = fault_result("L2", 90.0, loaded_named={"hosts": ["h2", "h6"], "after_s": None, "reasons": [None, "x"]})
    miss = next(c for c in verdicts([named]) if "named" in c["target"])
    assert not miss["met"] and miss["value"] == "- s"  # one loaded host never named: missed


def test_repeats_are_judged_on_the_worst_and_their_spread_on_worst_over_best():
    runs = [fault_result("K", p99, i) for i, p99 in enumerate((100.0, 180.0, 3_000.0))]
    merged = [c for c in across_repeats(verdicts(runs)) if c["target"].startswith("quiet hosts' worst")]
    assert len(merged) == 1 and not merged[0]["met"] and merged[0]["value"] == "3,000 ns"
    assert "100 ns, 180 ns, 3,000 ns" in merged[0]["note"]
    ratio = [c for c in across_repeats(verdicts(runs)) if "bound p50" in c["target"]][0]
    assert ratio["value"] == "4.00x" and ratio["met"]  # the largest ratio of the three (400 / 100)
    (sp,) = spread(runs)
    assert sp["value"] == "30.00x" and not sp["met"]
    assert spread(runs[:2])[0]["met"]  # 1.8x
    assert not spread([*runs[:2], fault_result("K", None, 3)])[0]["met"]  # a repeat with no figure
    assert spread(runs[:1]) == []  # one run has no spread


def test_global_time_is_placed_at_the_instant_real_time_was_read(monkeypatch, tmp_path):
    # global time runs 40 ppm off real time, and reading the state files takes 0.3 s (32 agents
    # on a loaded machine): placed at the start of the sample, the series would lie 12 us off
    # its line; it is placed when real time was read
    import time

    from clockfabric.bench.clocksync import watch as watch_module
    from clockfabric.clock.vclock import VirtualClock

    clock = VirtualClock("h0", 0, 0, 40.0)
    fab = SimpleNamespace(lab=SimpleNamespace(dir=tmp_path, clocks=lambda: {"h0": clock}), reference="h0",
                          hosts=["h0", "h1"])

    def slow_read(_):
        time.sleep(0.3)
        return {}

    monkeypatch.setattr(watch_module, "read_states", slow_read)
    started = time.monotonic()
    w = watch_module.Watch(fab, started)
    w.sample()
    (at, _), = w.ensemble
    assert 0.3 <= at < 0.3 + 0.25


def test_the_fault_bench_writes_where_it_is_told_under_its_own_name(monkeypatch, tmp_path):
    """`--out` moves the record, not its name: the page's section stays clocksync-faults."""
    from typer.testing import CliRunner

    from clockfabric.bench.clocksync import command
    from clockfabric.cli.bench_cmds import app

    calls = []
    monkeypatch.setattr(command, "run", lambda *args, **kw: calls.append((args, kw)))
    out = tmp_path / "elsewhere.json"
    result = CliRunner().invoke(app, ["clocksync-faults", "--sizes", "8", "--scenarios", "R0", "--out", str(out)])
    assert result.exit_code == 0, result.output
    (args, kw), = calls
    assert args[0] == "8" and args[1] == "R0" and args[-1] == out and kw == {"record_as": "clocksync-faults"}


def test_a_clock_a_fault_left_fast_runs_at_its_own_rate_again_before_the_next_scenario():
    """The scenarios of a size share one lab: a host that F left at 500 ppm would start the next
    scenario fast, and F's next repeat would change nothing."""
    import time

    from clockfabric.bench.clocksync.faults import FAST_PPM, restore_rates
    from clockfabric.clock.vclock import VirtualClock

    class Lab:
        def __init__(self, clocks):
            self.saved = dict(clocks)

        def clocks(self):
            return dict(self.saved)

        def save_clock(self, clock):
            self.saved[clock.host] = clock

    now = time.time_ns()
    own = {"h0": VirtualClock("h0", now - 10**10, 0, 12.5), "h1": VirtualClock("h1", now - 10**10, 5_000, -40.0)}
    fab = SimpleNamespace(lab=Lab({**own, "h1": own["h1"].with_rate(now - 10**9, FAST_PPM)}))
    assert fab.lab.clocks()["h1"].drift_now_ppm == FAST_PPM
    before = fab.lab.clocks()["h1"].local_ns(now)
    assert restore_rates(fab) == ["h1"]
    after = fab.lab.clocks()["h1"]
    assert after.drift_now_ppm == -40.0 and fab.lab.clocks()["h0"] is own["h0"]  # only the moved one
    assert after.local_ns(now) == before  # no step: a rate change from now on leaves every reading before
    assert restore_rates(fab) == []  # and once is enough
