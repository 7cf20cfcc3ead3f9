"""What the CLI loads: a Slurm prolog's audit has 2 s, a third of it the CLI's own start, so the
prolog's command and `--help` must not pull in the heavy stacks other commands use."""

from __future__ import annotations

import json
import subprocess
import sys
from pathlib import Path

import click
import pytest
import typer
from typer.testing import CliRunner

from clockfabric.cli.main import COMMANDS, build_app

ROOT = Path(__file__).resolve().parents[2]
# the controller's web and database stacks, netlink, the HTTP client, the training stack
HEAVY = {"torch", "numpy", "scipy", "fastapi", "starlette", "uvicorn", "httpx", "pyroute2", "psycopg",
         "asyncssh"}
PROLOG = ["audit", "--hosts", str(ROOT / "examples" / "leafspine-8.yaml"), "--via", "true", "--passive", "--json",
          "--skip", "backend.cabling"]
RUN = """import json, sys
names = sys.argv[2]
sys.argv = ["clockfabric", *json.loads(sys.argv[1])]
from clockfabric.cli.main import main
try:
    main()
except SystemExit:
    pass
open(names, "w").write(json.dumps(sorted({m.split(".")[0] for m in sys.modules})))
"""


def loaded(argv: list[str], tmp_path: Path) -> tuple[set[str], subprocess.CompletedProcess]:
    """The top-level packages imported by `clockfabric ARGV`, run in a fresh interpreter."""
    names = tmp_path / "modules.json"
    done = subprocess.run([sys.executable, "-c", RUN, json.dumps(argv), str(names)], capture_output=True, text=True,
                          timeout=120, cwd=ROOT)
    return set(json.loads(names.read_text())), done


@pytest.mark.parametrize("argv", [PROLOG, ["--help"], ["audit", "--help"]], ids=["prolog", "help", "audit-help"])
def test_the_prologs_command_and_help_load_nothing_heavy(argv, tmp_path):
    modules, done = loaded(argv, tmp_path)
    assert "clockfabric" in modules, done.stderr
    assert modules & HEAVY == set(), done.stderr


def test_the_prologs_command_ran_the_audit(tmp_path):
    _, done = loaded(PROLOG, tmp_path)
    report = json.loads(done.stdout)  # every host unreachable through `true`: a report all the same
    assert {c["id"] for c in report["checks"]} >= {"frontend.reach", "frontend.mtu"}
    assert "backend.cabling" not in {c["id"] for c in report["checks"]}


def test_a_heavy_package_would_be_seen(tmp_path):
    modules, _ = loaded(["bench", "controller-scale", "--help"], tmp_path)  # the controller's stack
    assert modules & HEAVY, "the guard sees nothing: the module list is not what the CLI loaded"


@pytest.mark.parametrize("argv", [["bench"], ["bench", "--help"], ["bench", "report", "--check"]],
                         ids=["list", "help", "report"])
def test_the_benchmarks_list_and_page_import_no_benchmark(argv, tmp_path):
    modules, done = loaded(argv, tmp_path)
    assert "clockfabric" in modules, done.stderr
    assert modules & HEAVY <= {"numpy"}, done.stderr  # the harness's own; no benchmark's stack


@pytest.mark.parametrize("name", sorted(COMMANDS))
def test_each_listed_summary_is_the_commands_own(name):
    built = typer.main.get_command(build_app(name))
    command = built.get_command(click.Context(built), name)
    own = " ".join((command.help or "").split("\n\n")[0].split())
    assert COMMANDS[name][3] == own


def test_a_listed_command_runs_as_the_full_one():
    listed = CliRunner().invoke(build_app(), ["audit", "--list", "--json"])
    full = CliRunner().invoke(build_app("audit"), ["audit", "--list", "--json"])
    assert listed.exit_code == full.exit_code == 0
    assert listed.output == full.output and "frontend.mtu" in listed.output
    lab_help = CliRunner().invoke(build_app(), ["lab", "--help"], prog_name="clockfabric")
    assert "Usage: clockfabric lab " in lab_help.output
