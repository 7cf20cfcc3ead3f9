"""`clockfabric audit` stores its report in a controller: a real one, served on loopback from this
process, and the real command run as a user would. Two "hosts" of a small topology both run on this
machine (`--via "env CF={host}"`), so no lab is needed."""

from __future__ import annotations

import json
import os
import sys
from pathlib import Path
from types import SimpleNamespace

import httpx
import pytest

from clockfabric.audit.model import CheckResult, Report, Verdict
from clockfabric.cli import audit_cmds
from clockfabric.controller.fleet import Fleet
from clockfabric.controller.server import Listen, server, start_in_thread
from clockfabric.controller.storage.sqlite import SqliteStorage
from clockfabric.controller.token import read_token
from clockfabric.errors import USAGE_EXIT

TOPOLOGY = """\
name: two
addressing: {hosts: 10.0.0.0/16, fabric: 10.64.0.0/10}
hosts:
  - {name: a, nics: [{name: eth0, plane: 0}]}
  - {name: b, nics: [{name: eth0, plane: 0}]}
switches:
  - {name: sw, role: leaf}
links:
  - {a: a, b: sw}
  - {a: b, b: sw}
"""


@pytest.fixture
def controller(tmp_path):
    """A controller on a free loopback port: (url, token file, storage)."""
    token_file = tmp_path / "token"
    token = read_token(token_file, create=True)
    storage = SqliteStorage(tmp_path / "controller.db")
    srv = server(Fleet(storage, hosts=[], enroll_unknown=True), token, Listen("127.0.0.1", 0))
    thread = start_in_thread(srv)
    port = srv.servers[0].sockets[0].getsockname()[1]
    yield f"http://127.0.0.1:{port}", token_file, storage
    srv.should_exit = True
    thread.join(10)
    storage.close()


@pytest.fixture
def fleet_file(tmp_path, monkeypatch):
    """The topology, and a PATH whose python3 is this one: the "hosts" run `python3 -m clockfabric.audit.host`."""
    monkeypatch.setenv("PATH", f"{Path(sys.executable).parent}{os.pathsep}{os.environ['PATH']}")
    path = tmp_path / "fleet.yaml"
    path.write_text(TOPOLOGY)
    return path


def audit_args(fleet_file: Path, *more: str) -> list[str]:
    return ["audit", "--hosts", str(fleet_file), "--via", "env CF={host}", "--only", "configuration", "--json", *more]


def test_audit_posts_its_report_to_the_controller(cli, controller, fleet_file):
    url, token_file, storage = controller
    proc = cli(*audit_args(fleet_file, "--controller", url, "--token-file", str(token_file)), check=False)
    printed = json.loads(proc.stdout)  # stdout is the report alone
    assert proc.returncode == printed["exit_code"], proc.stderr
    assert printed["hosts"] == ["a", "b"] and {c["id"].split(".")[0] for c in printed["checks"]} == {"configuration"}
    (summary,) = storage.audits()
    assert f"stored as audit {summary.id} on {url}" in proc.stderr.splitlines()
    got = httpx.get(f"{url}/api/v1/audits/{summary.id}", headers={"Authorization": f"Bearer {read_token(token_file)}"})
    assert got.status_code == 200 and got.json()["report"] == printed
    assert (summary.fleet, summary.t_ns) == (str(fleet_file), printed["started_ns"])
    assert (summary.verdict, summary.exit_code) == (printed["verdict"], printed["exit_code"])


def test_a_failed_post_is_a_warning_and_keeps_the_exit_code(cli, controller, fleet_file, tmp_path):
    url, _, storage = controller
    wrong = tmp_path / "wrong.token"
    wrong.write_text("w" * 32)
    proc = cli(*audit_args(fleet_file, "--controller", url, "--token-file", str(wrong)), check=False)
    assert proc.returncode == json.loads(proc.stdout)["exit_code"]
    (warning,) = [line for line in proc.stderr.splitlines() if "audit not stored" in line]
    assert warning.startswith(f"audit not stored: controller {url} answered HTTP 401") and storage.audits() == []
    closed = "http://127.0.0.1:1"  # nothing listens there
    proc = cli(*audit_args(fleet_file, "--controller", closed, "--token-file", str(wrong)), check=False)
    assert proc.returncode == json.loads(proc.stdout)["exit_code"]
    (warning,) = [line for line in proc.stderr.splitlines() if "audit not stored" in line]
    assert warning.startswith(f"audit not stored: controller {closed}: ") and "refused" in warning


def test_controller_options_are_checked_before_the_audit(cli, fleet_file, tmp_path):
    proc = cli(*audit_args(fleet_file, "--controller", "http://127.0.0.1:7400"), check=False)
    assert proc.returncode == USAGE_EXIT and "--token-file" in proc.stderr and proc.stdout == ""
    proc = cli(*audit_args(fleet_file, "--controller", "http://127.0.0.1:7400", "--token-file",
                           str(tmp_path / "missing")), check=False)
    assert proc.returncode == USAGE_EXIT and "cannot read the token file" in proc.stderr and proc.stdout == ""


def report() -> Report:
    return Report("lab ctlx", ["h0", "h1"], [CheckResult("frontend.mtu", "frontend", "MTU", Verdict.WARN, "1 NIC", [])],
                  1_800_000_000 * 10**9, 0.5)


def test_a_labs_kept_controller_is_found_by_its_record(controller, tmp_path, capsys):
    """A lab whose controller was kept (`monitor --keep` wrote lab.dir/controller.json) gets the report
    without --controller. The controller here listens on loopback, not on a lab host's address, so the
    post goes out from this namespace; on a real lab it goes from inside the host it listens on."""
    url, token_file, storage = controller
    hosts = {"h0": SimpleNamespace(address="10.0.0.1"), "h1": SimpleNamespace(address="10.0.0.2")}
    lab = SimpleNamespace(name="ctlx", dir=tmp_path, topology=SimpleNamespace(hosts=hosts))
    audit_cmds._store(report(), lab, None, None)  # no record: nothing to store, nothing said
    assert storage.audits() == [] and capsys.readouterr().err == ""
    (tmp_path / "controller.json").write_text(json.dumps({"url": url, "token_file": str(token_file)}))
    audit_cmds._store(report(), lab, None, None)
    (stored,) = storage.audits()
    assert (stored.fleet, stored.verdict, stored.exit_code) == ("lab ctlx", "warn", 1)
    assert capsys.readouterr().err.strip() == f"stored as audit {stored.id} on {url}"
