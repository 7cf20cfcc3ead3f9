"""Lab hosts behind real sshds: each answers as the host it is (hostname, name lookup), the audit
reaches every one over ssh from the fleet file alone, and stop() leaves no sshd behind."""

from __future__ import annotations

import json
import os
import shutil
import subprocess
import sys
from pathlib import Path

import pytest

from clockfabric.lab import netns, sshd
from clockfabric.topology import multirail
from tests.waiting import wait_for

pytestmark = pytest.mark.skipif(not (os.path.exists(sshd.SSHD) and shutil.which("ssh") and shutil.which("ssh-keygen")),
                                reason="needs OpenSSH (scripts/setup.sh installs openssh-server)")
SRC = str(Path(__file__).resolve().parents[2] / "src")


@pytest.fixture(scope="module")
def lab(make_module_lab):
    return make_module_lab(multirail(hosts=3, planes=1, leaves=1, spines=0))


@pytest.fixture(scope="module")
def ssh_lab(lab, tmp_path_factory):
    # the hosts' python must import this checkout, whatever the venv's editable install points at
    sl = sshd.start(lab, tmp_path_factory.mktemp("sshlab"), python=f"env PYTHONPATH={SRC} {sys.executable}")
    yield sl
    sl.stop()


def over_ssh(sl: sshd.SshLab, host: str, command: str) -> str:
    proc = subprocess.run(sl.client(sl.ssh_argv(host) + [command]), capture_output=True, text=True, timeout=30)
    assert proc.returncode == 0, proc.stderr
    return proc.stdout


def sshd_pids(lab) -> list[int]:
    return [pid for h in lab.topology.hosts for pid in netns.pids(lab.ns(h))
            if os.path.realpath(f"/proc/{pid}/exe") == sshd.SSHD]


def comm(pid: int) -> str:
    try:
        return Path(f"/proc/{pid}/comm").read_text().strip()
    except OSError:
        return ""  # gone meanwhile


def test_each_host_answers_as_itself(lab, ssh_lab):
    assert ssh_lab.client_ns == lab.ns("h0")
    for name, host in lab.topology.hosts.items():  # h0 too: the login node is a host like the others
        other = "h2" if name != "h2" else "h0"
        lines = over_ssh(ssh_lab, name, f"hostname; getent hosts {name}; getent hosts {other}").splitlines()
        assert lines[0] == name
        assert lines[1].split() == [str(host.address), name]
        assert lines[2].split() == [str(lab.topology.hosts[other].address), other]
    # one listener a host: each session's sshd ends soon after its command (not at once)
    wait_for("the sessions' sshds to end", lambda: len(sshd_pids(lab)) == 3, timeout_s=10)
    listed = {r["pid"]: r["what"] for r in lab.processes()}  # what `lab status` shows, and `lab down` stops
    assert {listed.get(pid) for pid in ssh_lab.pids().values()} == {"sshd on h0", "sshd on h1", "sshd on h2"}


def test_fleet_file_and_known_hosts(lab, ssh_lab):
    text = ssh_lab.fleet_file.read_text()
    for host in lab.topology.hosts.values():
        assert f"address: {host.address}" in text
        assert f"{host.name},{host.address} ssh-ed25519 " in ssh_lab.known_hosts.read_text()
    assert f'"key": "{ssh_lab.key}"' in text and '"user": "root"' in text


def test_audit_over_ssh_reaches_every_host(lab, ssh_lab, tmp_path):
    expect = tmp_path / "expect.yaml"
    expect.write_text("timeouts: {host_s: 30, lldp_s: 0.2}\n")
    argv = [sys.executable, "-m", "clockfabric.cli", "audit", "--hosts", str(ssh_lab.fleet_file),
            "--expect", str(expect), "--only", "frontend.reach,configuration", "--json"]
    env = {**os.environ, "PYTHONPATH": SRC}
    proc = subprocess.run(ssh_lab.client(argv), capture_output=True, text=True, timeout=180, env=env)
    assert "Traceback" not in proc.stderr, proc.stderr
    report = json.loads(proc.stdout)
    checks = {c["id"]: c for c in report["checks"]}
    reach = checks["frontend.reach"]
    assert reach["summary"] == "3 of 3 hosts answered", reach["findings"]
    assert checks["configuration.software"]["verdict"] == "pass"
    logs = "".join((ssh_lab.folder / f"sshd-{h}.log").read_text() for h in lab.topology.hosts)
    assert logs.count("Accepted publickey for root") >= 3  # through sshd, not a shortcut


def test_stop_leaves_no_sshd(lab, ssh_lab):
    """Last in the module: it stops the module's sshds (the fixture's own stop() then does nothing)."""
    pids = list(ssh_lab.pids().values())
    wait_for("the earlier sessions' sshds to end", lambda: len(sshd_pids(lab)) == len(pids), timeout_s=10)
    # a session still open when the sshds stop ends with them, its command too
    held = subprocess.Popen(ssh_lab.client(ssh_lab.ssh_argv("h1") + ["sleep 60"]), stdout=subprocess.DEVNULL,
                            stderr=subprocess.DEVNULL)
    try:
        wait_for("the held session's sshd", lambda: len(sshd_pids(lab)) > len(pids), timeout_s=10)
        wait_for("its sleep", lambda: "sleep" in map(comm, netns.pids(lab.ns("h1"))), timeout_s=10)
        ssh_lab.stop()
        ssh_lab.stop()  # idempotent
        assert held.wait(10) != 0
    finally:
        if held.poll() is None:
            held.kill()
            held.wait()
    assert sshd_pids(lab) == []
    assert [p for h in lab.topology.hosts for p in netns.pids(lab.ns(h))] == []  # the session's sleep too
    assert not any(Path(f"/proc/{p}").exists() for p in pids)
    assert not any((lab.dir / "procs" / f"{p}.json").exists() for p in pids)
    assert list(ssh_lab.folder.iterdir()) == []
