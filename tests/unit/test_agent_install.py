"""An agent host installs `clockfabric` alone, without the controller's extra: the agent, its
services and the host-side commands must run without the controller's web and database stacks,
and a command that needs them must say which install brings them."""

from __future__ import annotations

import json
import subprocess
import sys
from pathlib import Path

import pytest
import typer.core

from clockfabric.topology import leafspine, save

if sys.version_info >= (3, 11):
    import tomllib
else:
    import tomli as tomllib

ROOT = Path(__file__).resolve().parents[2]
# the controller's (fastapi, its starlette, uvicorn, psycopg) and scipy, which only the clock
# reference's solver imports, when it first solves
BLOCKED = ["fastapi", "starlette", "uvicorn", "psycopg", "scipy"]
# what an agent host runs: the agent and everything it starts, the audit, the key, topologies, the doctor
AGENT_PACKAGES = ["agent", "auth", "clock", "probe", "telemetry", "traffic", "workload", "topology", "audit",
                  "collective", "qos", "hosts", "doctor"]
AGENT_COMMANDS = ["clock_cmds", "audit_cmds", "key_cmds", "topology_cmds", "doctor_cmds"]
BLOCKER = """import json, sys
BLOCKED = set(json.loads(sys.argv[1]))
class Blocked:
    def find_spec(self, name, path=None, target=None):
        if name.split(".")[0] in BLOCKED:
            raise ModuleNotFoundError(f"No module named {name!r} (blocked)", name=name)
sys.meta_path.insert(0, Blocked())
"""
RUN_CLI = BLOCKER + """sys.argv = ["clockfabric", *json.loads(sys.argv[2])]
from clockfabric.cli.main import main
main()
"""
IMPORT_ALL = BLOCKER + """import importlib, pkgutil
names = []
for package in json.loads(sys.argv[2]):
    try:
        top = importlib.import_module(package)
    except ModuleNotFoundError as e:
        if e.name == package:
            continue  # a package this tree does not have
        raise
    names.append(package)
    for info in pkgutil.walk_packages(getattr(top, "__path__", []), package + "."):
        importlib.import_module(info.name)
        names.append(info.name)
print(json.dumps(names))
"""


def run(script: str, *args: list[str]) -> subprocess.CompletedProcess:
    return subprocess.run([sys.executable, "-c", script, json.dumps(BLOCKED), *map(json.dumps, args)],
                          capture_output=True, text=True, timeout=120, cwd=ROOT)


def test_the_agent_command_runs_without_the_controllers_packages():
    done = run(RUN_CLI, ["agent", "--help"])
    assert done.returncode == 0, done.stderr
    assert "--key-file" in done.stdout


@pytest.mark.skipif(not hasattr(typer.core, "_click"), reason="this typer runs on the click package itself")
def test_the_cli_runs_without_click_where_typer_carries_its_own(tmp_path):
    # uvicorn brings click, so only a host without the controller's extra finds it missing
    done = subprocess.run([sys.executable, "-c", RUN_CLI, json.dumps([*BLOCKED, "click"]),
                           json.dumps(["key", "new", str(tmp_path / "k")])],
                          capture_output=True, text=True, timeout=120, cwd=ROOT)
    assert done.returncode == 0, done.stderr
    assert (tmp_path / "k").exists()


def test_every_module_an_agent_host_runs_imports_without_them():
    modules = [f"clockfabric.{p}" for p in AGENT_PACKAGES] + [f"clockfabric.cli.{c}" for c in AGENT_COMMANDS]
    done = run(IMPORT_ALL, modules)
    assert done.returncode == 0, done.stderr[-3000:]
    imported = json.loads(done.stdout)
    assert {"clockfabric.agent.agent", "clockfabric.agent.services.controller", "clockfabric.clock.network",
            "clockfabric.telemetry.nvidia_gpu", "clockfabric.cli.clock_cmds",
            "clockfabric.doctor.checks.controller"} <= set(imported)


def test_the_blocker_blocks():
    done = run(IMPORT_ALL, ["clockfabric.controller.app"])
    assert done.returncode != 0 and "blocked" in done.stderr


def test_the_references_agent_without_scipy_says_how_to_install_it(tmp_path):
    # the fleet file's first host by name is the reference; h1 is not, and needs no solver
    save(leafspine(2, 1, 1), tmp_path / "fleet.yaml")
    assert run(RUN_CLI, ["key", "new", str(tmp_path / "fleet.key")]).returncode == 0
    argv = ["agent", "--topology", str(tmp_path / "fleet.yaml"), "--key-file", str(tmp_path / "fleet.key"),
            "--state-dir", str(tmp_path / "state"), "--metrics-port", "0"]
    done = run(RUN_CLI, [*argv, "--host", "h0"])
    assert done.returncode == 64, done.stderr
    assert done.stderr.count("\n") == 1 and "clockfabric-reference" in done.stderr, done.stderr
    assert "pip install 'clockfabric[solver]'" in done.stderr and "Traceback" not in done.stderr
    other = run(RUN_CLI, [*argv, "--host", "h1"])  # gets past its configuration, to its probe ports
    assert "SciPy" not in other.stderr and "cannot open probe ports" in other.stderr, other.stderr


def test_the_controller_without_its_extra_says_how_to_install_it(tmp_path):
    done = run(RUN_CLI, ["controller", "--db", str(tmp_path / "fleet.db"), "--listen", "127.0.0.1:0",
                         "--token-file", str(tmp_path / "token"), "--new-token"])
    assert done.returncode == 64, done.stderr
    assert done.stderr.count("\n") == 1 and "pip install 'clockfabric[controller]'" in done.stderr, done.stderr
    assert "Traceback" not in done.stderr


def test_the_core_dependencies_leave_out_the_controllers():
    project = tomllib.loads((ROOT / "pyproject.toml").read_text())["project"]
    core = {d.split("[")[0].split(">")[0].split("=")[0] for d in project["dependencies"]}
    controller = {d.split("[")[0].split(">")[0].split("=")[0] for d in project["optional-dependencies"]["controller"]}
    solver = {d.split(">")[0] for d in project["optional-dependencies"]["solver"]}
    assert controller == {"fastapi", "uvicorn", "psycopg", "scipy"} and solver == {"scipy"}
    assert not core & (controller | solver)
    assert {"test", "job"} <= set(project["optional-dependencies"])


def test_setup_installs_every_extra():
    # `make test` needs them all: the lab starts a controller, the tests run the DDP jobs
    project = tomllib.loads((ROOT / "pyproject.toml").read_text())["project"]
    setup = (ROOT / "scripts" / "setup.sh").read_text()
    (spec,) = [w for w in setup.split() if w.startswith("'.[")]
    assert set(spec.strip("'.[]").split(",")) == set(project["optional-dependencies"])
