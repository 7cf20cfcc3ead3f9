"""docs/benchmarks.md is what `clockfabric bench report` renders from bench/results/*.json, and
the harness's records and verdicts read as the page says."""

import json
from pathlib import Path

import pytest

from clockfabric.bench.harness import BENCHMARKS, Result, Target, load_results, resampled_medians, interval
from clockfabric.bench.page import render

ROOT = Path(__file__).resolve().parents[2]


def test_the_committed_page_is_what_the_committed_records_render():
    notes = [p.name for p in (ROOT / "docs" / "notes").glob("*.md")]
    rendered = render(load_results(ROOT / "bench" / "results"), notes)
    assert (ROOT / "docs" / "benchmarks.md").read_text() == rendered, "run `clockfabric bench report`"


def test_every_record_names_a_benchmark_and_every_benchmark_has_a_record():
    names = {r.name for r in load_results(ROOT / "bench" / "results")}
    assert names == set(BENCHMARKS.names()) - {"allreduce", "alltoall"}  # those two run on a lab that is up
    for r in load_results(ROOT / "bench" / "results"):
        assert r.source in ("run", "notebook") and r.date and r.targets


def test_every_benchmark_is_what_its_module_registers():
    # listed from bench/all.py's declarations; each module, imported, registers the command alone
    for name in BENCHMARKS.names():
        entry = BENCHMARKS.get(name)
        assert entry.factory.__module__.startswith("clockfabric.bench.") and entry.help, name


def test_verdicts_ratios_and_a_record_round_trip(tmp_path):
    time = Target("up", 3.0, 20, "s", better="lower", baseline=12.0)
    assert (time.met, time.verdict, time.ratio) == (True, "met", 4.0)
    rate = Target("rate", 1.1, 1.5, "x", possible=False)
    assert (rate.met, rate.verdict) == (False, "out of reach")
    assert Target("rate", 1.1, 1.5, "x").verdict == "short"
    assert Target("unknown", None, 1.0).verdict == "short"
    path = Result("x", [time, rate], {"k": "v"}, {"cores": 2}, "abc1234", "2026-01-01").write(tmp_path / "x.json")
    data = json.loads(path.read_text())
    assert data["targets"][0]["verdict"] == "met" and data["targets"][1]["verdict"] == "out of reach"
    back = load_results(tmp_path)[0]
    assert back.targets == [time, rate] and back.commit == "abc1234"


def test_a_figure_with_a_pipe_keeps_the_table_whole():
    page = render([Result("lab-bringup", [Target("p99 |error|", 1.0, 2.0, better="lower")], date="2026-01-01")])
    row = next(line for line in page.splitlines() if "error" in line)
    assert row.count("|") - row.count("\\|") == 8  # 7 columns


def test_the_bootstrap_interval_brackets_the_median_and_is_seeded():
    medians = resampled_medians({"a": [1.0, 2.0, 3.0, 4.0, 10.0]})
    low, high = interval(medians["a"])
    assert low <= 3.0 <= high and low >= 1.0 and high <= 10.0
    assert interval(resampled_medians({"a": [1.0, 2.0, 3.0, 4.0, 10.0]})["a"]) == [low, high]
    assert interval(resampled_medians({"a": [5.0]})["a"]) == [5.0, 5.0]


@pytest.mark.parametrize("name", ["lab-bringup", "clocksync-solve", "contention", "allreduce", "allreduce-vs-tcp"])
def test_each_benchmark_is_a_command_with_its_options(name):
    from typer.testing import CliRunner

    from clockfabric.cli.bench_cmds import app

    result = CliRunner().invoke(app, [name, "--help"])
    assert result.exit_code == 0 and "--" in result.output
