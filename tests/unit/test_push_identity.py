"""A push for host H is taken only with H's own credential (derived from the fleet token), so no
host, and no switch, can push as another or claim its sequence numbers; the fleet token reads and
administers, and pushes as no host."""

from __future__ import annotations

import subprocess
import sys
from pathlib import Path

from prometheus_client.parser import text_string_to_metric_families

from clockfabric.auth.credential import host_token, token_host
from tests.unit.credentials import as_host
from tests.unit.test_controller_app import AUTH, TOKEN, env  # noqa: F401 - env is a fixture

ROOT = Path(__file__).resolve().parents[2]


def push(client, host: str, headers: dict, seq: int = 1):
    return client.post("/api/v1/push", headers=headers, json={
        "host": host, "boot": "b1", "events": [{"seq": seq, "t_ns": 1, "kind": "agent_start"}]})


def refused_by_reason(client) -> dict[str, float]:
    text = client.get("/metrics", headers=AUTH).text
    return {s.labels["reason"]: s.value for f in text_string_to_metric_families(text) for s in f.samples
            if s.name == "clockfabric_controller_pushes_refused_total"}


def test_a_host_pushing_as_another_is_refused_403_and_stores_nothing(env):
    client, fleet, *_ = env
    assert push(client, "h1", as_host(TOKEN, "h1")).status_code == 200
    r = push(client, "h2", as_host(TOKEN, "h1"), seq=7)  # h1's credential, h2's name and numbers
    assert r.status_code == 403 and "h1" in r.json()["detail"] and "h2" in r.json()["detail"]
    assert [(e.host, e.seq) for e in fleet.storage.events()] == [("h1", 1)]
    assert refused_by_reason(client)["wrong_host"] == 1


def test_a_switch_credential_covers_its_switch_only(env):
    client, fleet, _, topo = env
    leaf = sorted(topo.switches)[0]
    assert push(client, leaf, as_host(TOKEN, leaf)).status_code == 200
    assert push(client, "h0", as_host(TOKEN, leaf)).status_code == 403


def test_the_fleet_token_reads_but_pushes_as_no_host(env):
    client, fleet, *_ = env
    r = push(client, "h1", AUTH)
    assert r.status_code == 401 and "fleet token does not push" in r.json()["detail"]
    assert client.get("/api/v1/events", headers=AUTH).status_code == 200
    # and a host's credential reads nothing
    assert client.get("/api/v1/events", headers=as_host(TOKEN, "h1")).status_code == 401
    assert refused_by_reason(client)["unauthorised"] == 1


def test_a_forged_or_altered_credential_is_refused_401(env):
    client, *_ = env
    good = host_token(TOKEN, "h1")
    for bad in (good[:-1] + ("0" if good[-1] != "0" else "1"), "h2" + good[2:], host_token("x" * 32, "h1"), "h1:"):
        assert push(client, "h1", {"Authorization": f"Bearer {bad}"}).status_code == 401, bad
        assert token_host(TOKEN, bad) is None


def test_the_cli_derives_the_credential_the_controller_takes(env, tmp_path):
    client, *_ = env
    fleet_file = tmp_path / "fleet.token"
    fleet_file.write_text(TOKEN + "\n")
    out = tmp_path / "h3.token"
    done = subprocess.run([sys.executable, "-m", "clockfabric.cli", "token", "host", "h3", "--token-file",
                           str(fleet_file), "--out", str(out)], cwd=ROOT, capture_output=True, text=True,
                          env={"PYTHONPATH": str(ROOT / "src"), "PATH": "/usr/bin:/bin"})
    assert done.returncode == 0, done.stderr
    assert out.stat().st_mode & 0o777 == 0o600
    credential = out.read_text().strip()
    assert credential == host_token(TOKEN, "h3") and token_host(TOKEN, credential) == "h3"
    assert push(client, "h3", {"Authorization": f"Bearer {credential}"}).status_code == 200


def test_a_revoked_hosts_credential_is_refused_and_every_other_hosts_works_on(env):
    client, fleet, *_ = env
    assert push(client, "h1", as_host(TOKEN, "h1")).status_code == 200
    assert client.post("/api/v1/hosts/revoke", headers=as_host(TOKEN, "h2"), json={"hosts": ["h1"]}).status_code == 401
    r = client.post("/api/v1/hosts/revoke", headers=AUTH, json={"hosts": ["h1"]})
    assert r.status_code == 200 and r.json() == {"revoked": {"h1": 1}}
    refused = push(client, "h1", as_host(TOKEN, "h1"), seq=2)
    assert refused.status_code == 401 and "--epoch 1" in refused.json()["detail"]
    assert push(client, "h2", as_host(TOKEN, "h2")).status_code == 200  # the others push on
    new = {"Authorization": f"Bearer {host_token(TOKEN, 'h1', 1)}"}
    assert push(client, "h1", new, seq=2).status_code == 200
    assert refused_by_reason(client)["revoked"] == 1
    # a second revocation refuses the first new credential too; the epochs outlive the controller
    assert client.post("/api/v1/hosts/revoke", headers=AUTH, json={"hosts": ["h1"]}).json() == {"revoked": {"h1": 2}}
    assert push(client, "h1", new, seq=3).status_code == 401
    assert client.get("/api/v1/hosts/epochs", headers=AUTH).json() == {"epochs": {"h1": 2}}
    assert fleet.storage.epochs() == {"h1": 2}


def test_a_credential_of_another_epoch_than_the_hosts_is_refused(env):
    client, *_ = env
    ahead = {"Authorization": f"Bearer {host_token(TOKEN, 'h1', 3)}"}  # made before any revocation
    assert push(client, "h1", ahead).status_code == 401
    assert token_host(TOKEN, host_token(TOKEN, "h1", 3)) == "h1" and token_host("another fleet token", host_token(
        TOKEN, "h1", 3)) is None


def test_token_revoke_prints_the_command_for_the_new_credential(env, tmp_path, monkeypatch):
    from typer.testing import CliRunner

    from clockfabric.cli.main import build_app

    client, *_ = env
    token_file = tmp_path / "fleet.token"
    token_file.write_text(TOKEN + "\n")
    monkeypatch.setattr("clockfabric.cli.token_cmds.api", lambda _ctl, path, body=None: client.post(
        path, headers=AUTH, json=body).json())
    done = CliRunner().invoke(build_app(), ["token", "revoke", "h3", "--controller", "http://ctl:7400",
                                            "--token-file", str(token_file)])
    assert done.exit_code == 0, done.output
    assert "h3: revoked; its new credential: clockfabric token host h3 --epoch 1" in done.output
    made = CliRunner().invoke(build_app(), ["token", "host", "h3", "--epoch", "1", "--token-file", str(token_file)])
    assert made.output.strip() == host_token(TOKEN, "h3", 1)
