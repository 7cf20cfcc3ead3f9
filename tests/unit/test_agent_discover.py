"""The agent in discovery mode: started with no fleet file, it pushes what it is and hears to a
controller that holds it for approval, keeps its events meanwhile, and is taken once approved.
A real `clockfabric agent --discover` process against a real controller on loopback; its one NIC
is one that does not exist, so no LLDP frame leaves this machine's own interfaces."""

from __future__ import annotations

import os
import subprocess
import sys
import time
from pathlib import Path

import httpx
import pytest

from clockfabric.agent.discovery import host_nics
from clockfabric.agent.push import Pusher
from clockfabric.auth.credential import host_token
from clockfabric.cli.main import main
from clockfabric.controller.fleet import Fleet
from clockfabric.controller.server import Listen, server, start_in_thread
from clockfabric.controller.storage.sqlite import SqliteStorage
from tests.waiting import wait_for

TOKEN = "t" * 32
AUTH = {"Authorization": f"Bearer {TOKEN}"}
ROOT = Path(__file__).resolve().parents[2]


@pytest.fixture
def controller(tmp_path):
    storage = SqliteStorage(tmp_path / "c.db")
    srv = server(Fleet(storage, hosts=["h0"], enroll="pending"), TOKEN, Listen(port=0))
    thread = start_in_thread(srv)
    yield f"http://127.0.0.1:{srv.servers[0].sockets[0].getsockname()[1]}", storage
    srv.should_exit = True
    thread.join(5)
    storage.close()


def agent(argv: list[str], tmp_path: Path) -> subprocess.Popen:
    env = {**os.environ, "PYTHONPATH": f"{ROOT / 'src'}:{ROOT}"}
    env.pop("CLOCKFABRIC_LAB", None)
    env.pop("CLOCKFABRIC_NODE", None)
    return subprocess.Popen([sys.executable, "-m", "clockfabric.cli", "agent", *argv], stderr=subprocess.PIPE,
                            text=True, env=env, cwd=tmp_path)


def test_an_agent_with_no_fleet_file_waits_for_approval_then_pushes(controller, tmp_path):
    url, storage = controller
    cred = tmp_path / "gpu-7.token"
    cred.write_text(host_token(TOKEN, "gpu-7") + "\n")
    proc = agent(["--discover", "--host", "gpu-7", "--nic", "cfnone0", "--controller", url, "--token-file",
                  str(cred), "--metrics-port", "0", "--state-dir", str(tmp_path / "state")], tmp_path)
    try:
        def listed():
            items = httpx.get(f"{url}/api/v1/pending", headers=AUTH).json()["items"]
            return items[0] if items else None

        held = wait_for("the agent held for approval", listed, timeout_s=30, every_s=0.2)
        assert (held["host"], held["state"], held["address"]) == ("gpu-7", "pending", "127.0.0.1")
        assert held["neighbours"] in ({"cfnone0": ""}, {})  # nothing heard; without root, no LLDP at all
        assert storage.host("gpu-7") is None and storage.events(host="gpu-7") == []
        r = httpx.post(f"{url}/api/v1/pending/approve", headers=AUTH, json={"hosts": ["gpu-7"]})
        assert r.json() == {"approved": ["gpu-7"]}
        # its next push is stored, with the event it held since it started
        wait_for("the agent's pushes stored", lambda: storage.events(host="gpu-7"), timeout_s=15, every_s=0.2)
        assert [e.kind for e in storage.events(host="gpu-7")] == ["agent_start"]
        info = storage.host("gpu-7").info
        assert (info["address"], info["mode"], info["role"]) == ("127.0.0.1", "discovery", "host")
    finally:
        proc.terminate()
        _, said = proc.communicate(timeout=15)
    lines = [line for line in said.splitlines() if "discovery mode" in line]
    assert len(lines) == 1 and "no fleet file; LLDP on cfnone0" in lines[0], said
    assert "no probes, clock sync or failover" in lines[0]
    assert "holds host gpu-7 until an operator approves it" in said and "admits host gpu-7 now" in said
    assert proc.returncode in (0, -15)


@pytest.mark.parametrize("argv, says", [
    (["--discover", "--topology", "fleet.yaml"], "--discover runs without a fleet file: drop --topology"),
    (["--discover", "--host", "h1"], "--discover pushes what the host hears to a controller"),
    (["--discover", "--host", "a b", "--controller", "http://127.0.0.1:1", "--token-file", "t"],
     "host name 'a b': give --host NAME"),
    (["--discover", "--host", "h1", "--controller", "http://127.0.0.1:1", "--token-file", "t", "--address", "x"],
     "--address 'x': give an IPv4 or IPv6 address"),
    (["--discover", "--host", "h1", "--controller", "http://127.0.0.1:1", "--token-file", "t"],
     "--token-file t is host 'h0''s credential, not 'h1''s"),
    (["--host", "h1", "--nic", "eth0", "--topology", "fleet.yaml"], "--nic is for --discover"),
])
def test_bad_discovery_options_are_one_line(tmp_path, argv, says, monkeypatch, capsys):
    (tmp_path / "t").write_text(host_token(TOKEN, "h0") + "\n")
    for var in ("CLOCKFABRIC_LAB", "CLOCKFABRIC_NODE"):
        monkeypatch.delenv(var, raising=False)
    monkeypatch.chdir(tmp_path)
    monkeypatch.setattr(sys, "argv", ["clockfabric", "agent", *argv])
    with pytest.raises(SystemExit) as exit_:
        main()
    err = capsys.readouterr().err
    assert exit_.value.code == 64 and says in err, err
    assert len(err.strip().splitlines()) == 1 and "Traceback" not in err


def test_the_nics_are_the_ethernet_ones_with_a_device_else_every_ethernet_one(tmp_path):
    def iface(name: str, kind: int = 1, device: bool = False, *extra: str) -> None:
        (tmp_path / name).mkdir()
        (tmp_path / name / "type").write_text(f"{kind}\n")
        for sub in (["device"] if device else []) + list(extra):
            (tmp_path / name / sub).mkdir()

    iface("lo", 772)
    iface("veth9")
    iface("docker0", 1, False, "bridge")
    iface("bond0", 1, False, "bonding")
    iface("ib0", 32, True)
    assert host_nics(tmp_path) == ["veth9"]  # a namespace: no device behind any
    iface("eth10", 1, True)
    iface("eth2", 1, True)
    assert host_nics(tmp_path) == ["eth2", "eth10"]
    assert host_nics(tmp_path / "none") == []


def test_the_pusher_waits_as_asked_while_held_and_keeps_its_events(controller):
    url, storage = controller
    events = [[{"t_ns": 1, "kind": "agent_start"}]]
    p = Pusher(url, host_token(TOKEN, "gpu-8"), "gpu-8", snapshot=lambda: (events.pop() if events else [], [], {}),
               interval_s=0.05)
    assert p.push_once() and p.held and len(p.pending) == 1 and p._retry_after_s == 2.0
    assert p.counters["push_failures"] == 0 and p.counters["pushes"] == 0
    storage.approve("gpu-8", time.time_ns())
    assert p.push_once() and not p.held and len(p.pending) == 0
    assert [e.kind for e in storage.events(host="gpu-8")] == ["agent_start"]
