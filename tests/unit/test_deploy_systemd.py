"""The systemd units in deploy/systemd: valid for systemd, hardened, and passing only flags
the CLI has."""

from __future__ import annotations

import re
import shlex
import shutil
import subprocess
from pathlib import Path

import pytest

from tests.unit.cli_flags import accepted_options, unknown_options

ROOT = Path(__file__).resolve().parents[2]
UNITS = sorted((ROOT / "deploy" / "systemd").glob("*.service"))
QUICKSTART = ROOT / "docs" / "quickstart.md"
DEPLOY_DOC = ROOT / "docs" / "deploy.md"
SECRET_FLAGS = ("--token-file", "--key-file", "--tls-key")


def installed_program() -> str:
    """Where the quickstart installs the command: `python3 -m venv DIR` puts it in DIR/bin."""
    (venv,) = re.findall(r"^python3 -m venv (\S+)$", QUICKSTART.read_text(), re.M)
    return f"{venv}/bin/clockfabric"


def directives(unit: Path) -> dict[str, list[str]]:
    """key -> values of the unit's directives, continuation lines joined."""
    text = unit.read_text().replace("\\\n", " ")
    out: dict[str, list[str]] = {}
    for line in text.splitlines():
        if "=" in line and not line.lstrip().startswith(("#", ";", "[")):
            key, value = line.split("=", 1)
            out.setdefault(key.strip(), []).append(value.strip())
    return out


def exec_argv(unit: Path) -> list[str]:
    """ExecStart's arguments after the program: `agent --topology ...`."""
    (line,) = directives(unit)["ExecStart"]
    return shlex.split(line)[1:]


def root_only_paths(doc: str) -> set[str]:
    """Files the docs make readable by root alone: `chmod 600 PATH`, `install -m 600 ... PATH`,
    and the keys `clockfabric key new` writes (mode 600)."""
    found = set(re.findall(r"chmod 0?600 (/\S+)", doc))
    found |= set(re.findall(r"install -m 0?600 .*? (/\S+)$", doc, re.M))
    found |= set(re.findall(r"clockfabric key new (/\S+)", doc))
    found |= {f"{folder}/{key}" for folder in re.findall(r"clockfabric tls new (/\S+)", doc)
              for key in ("ca.key", "tls.key")}
    return found


def certificates(doc: str) -> set[str]:
    """The certificates `clockfabric tls new DIR` writes where the docs run it (mode 644: public)."""
    return {f"{folder}/{cert}" for folder in re.findall(r"clockfabric tls new (/\S+)", doc)
            for cert in ("ca.crt", "tls.crt")}


def flag_values(argv: list[str]) -> list[tuple[str, str]]:
    """(flag, value) for `--x=v`, `--x v` and a bare argument (flag "")."""
    pairs = []
    for i, arg in enumerate(argv):
        if arg.startswith("--"):
            if "=" in arg:
                pairs.append(tuple(arg.split("=", 1)))
        elif i and argv[i - 1].startswith("--") and "=" not in argv[i - 1]:
            pairs.append((argv[i - 1], arg))
        else:
            pairs.append(("", arg))
    return pairs  # type: ignore[return-value]


def unreadable_by_the_service(d: dict[str, list[str]], argv: list[str], root_only: set[str]) -> list[str]:
    """What a unit's process would open that its user cannot read: a root-only file named in
    ExecStart, a secret not under the credentials folder, or a credential never loaded."""
    if d.get("DynamicUser") != ["yes"] and d.get("User", ["root"]) == ["root"]:
        return []
    loaded = {v.split(":", 1)[0] for v in d.get("LoadCredential", [])}
    problems = []
    for flag, value in flag_values(argv):
        if value in root_only:
            problems.append(f"{flag} {value}: root-only, give it through LoadCredential=")
        elif flag in SECRET_FLAGS and not value.startswith("%d/"):
            problems.append(f"{flag} {value}: a secret outside the credentials folder (%d)")
        elif value.startswith("%d/") and value[3:] not in loaded:
            problems.append(f"{flag} {value}: no LoadCredential={value[3:]}:...")
    return problems


def test_there_is_a_unit_for_the_agent_and_the_controller():
    assert [u.name for u in UNITS] == ["clockfabric-agent.service", "clockfabric-controller.service"]


@pytest.mark.parametrize("unit", UNITS, ids=lambda u: u.name)
def test_every_flag_in_execstart_exists_in_the_cli(unit):
    argv = exec_argv(unit)
    assert argv[0] in ("agent", "controller")
    assert unknown_options(argv) == []


def test_the_first_day_drop_ins_in_the_docs_run_flags_the_cli_has_and_replace_the_units_own():
    """docs/deploy.md's drop-ins (a controller holding hosts for approval, agents in discovery
    mode): each resets ExecStart= and the conditions, and passes only flags the CLI has."""
    blocks = re.findall(r"```ini\n(# /etc/systemd/system/clockfabric-(\w+)\.service\.d/discover\.conf\n.*?)```",
                        DEPLOY_DOC.read_text(), re.S)
    assert sorted(name for _, name in blocks) == ["agent", "controller"]
    for text, name in blocks:
        lines = text.replace("\\\n", " ").splitlines()
        assert "ExecStart=" in lines and "ConditionPathExists=" in lines, name
        (start,) = [line.split("=", 1)[1] for line in lines if line.startswith("ExecStart=") and line != "ExecStart="]
        argv = shlex.split(start)[1:]
        assert argv[0] == name and unknown_options(argv) == [], argv
        assert "/etc/clockfabric/fleet.yaml" not in text and ("--discover" in argv or "pending" in argv)


def test_the_flag_check_catches_a_flag_the_cli_lacks():
    assert unknown_options(["agent", "--topology", "f.yaml", "--no-such-flag", "1"]) == ["--no-such-flag"]
    assert "--no-failover" in accepted_options("agent")


@pytest.mark.parametrize("unit", UNITS, ids=lambda u: u.name)
def test_units_are_sandboxed(unit):
    d = directives(unit)
    for key, value in {"ProtectSystem": "strict", "ProtectHome": "yes", "PrivateTmp": "yes",
                       "NoNewPrivileges": "yes", "DynamicUser": "yes",
                       "SystemCallArchitectures": "native"}.items():
        assert d.get(key) == [value], f"{unit.name}: {key}"
    assert d["SystemCallFilter"][0] == "@system-service"
    assert "AF_INET" in d["RestrictAddressFamilies"][0].split()
    assert d["SuccessExitStatus"] == ["130"], f"{unit.name}: a stop by SIGTERM exits 130, which is no failure"


@pytest.mark.parametrize("unit", UNITS, ids=lambda u: u.name)
def test_execstart_runs_the_command_where_the_quickstart_installs_it(unit):
    (line,) = directives(unit)["ExecStart"]
    assert shlex.split(line)[0] == installed_program()


@pytest.mark.parametrize("unit", UNITS, ids=lambda u: u.name)
def test_no_unit_reads_a_root_only_path_as_its_dynamic_user(unit):
    root_only = root_only_paths(DEPLOY_DOC.read_text())
    assert {"/etc/clockfabric/token", "/etc/clockfabric/fleet.key"} <= root_only
    d = directives(unit)
    assert unreadable_by_the_service(d, exec_argv(unit), root_only) == []
    # and the credentials systemd copies are the root-only files themselves, or certificates
    assert {v.split(":", 1)[1] for v in d["LoadCredential"]} <= root_only | certificates(DEPLOY_DOC.read_text())


def test_the_root_only_check_catches_a_key_read_in_place():
    d = {"DynamicUser": ["yes"], "LoadCredential": ["token:/etc/clockfabric/token"]}
    argv = ["agent", "--token-file", "%d/token", "--key-file", "/etc/clockfabric/fleet.key", "--ca-file=%d/ca"]
    assert unreadable_by_the_service(d, argv, {"/etc/clockfabric/fleet.key"}) == [
        "--key-file /etc/clockfabric/fleet.key: root-only, give it through LoadCredential=",
        "--ca-file %d/ca: no LoadCredential=ca:..."]
    assert unreadable_by_the_service({"User": ["root"]}, argv, {"/etc/clockfabric/fleet.key"}) == []


def test_the_agent_has_exactly_the_capabilities_and_socket_families_it_needs():
    d = directives(UNITS[0])
    caps = {"CAP_NET_ADMIN", "CAP_NET_RAW"}  # priority comes from Nice=, not CAP_SYS_NICE
    assert set(d["AmbientCapabilities"][0].split()) == caps
    assert set(d["CapabilityBoundingSet"][0].split()) == caps
    assert d["Nice"] == ["-5"]
    assert {"AF_NETLINK", "AF_PACKET"} <= set(d["RestrictAddressFamilies"][0].split())


def test_the_controller_has_no_capability():
    d = directives(UNITS[1])
    assert d["CapabilityBoundingSet"] == [""]
    assert "AF_PACKET" not in d["RestrictAddressFamilies"][0]


SYSTEM_UNITS = Path("/usr/lib/systemd/system")


def _verify(root: Path, program: bool) -> subprocess.CompletedProcess:
    """`systemd-analyze verify` of the units as shipped, in a root made of this machine's system
    units and, if `program`, an executable where the quickstart installs the command."""
    shutil.copytree(SYSTEM_UNITS, root / SYSTEM_UNITS.relative_to("/"), symlinks=True)
    units = root / "etc" / "systemd" / "system"
    units.mkdir(parents=True)
    for unit in UNITS:
        shutil.copy(unit, units / unit.name)
    if program:
        exe = root / installed_program().lstrip("/")
        exe.parent.mkdir(parents=True)
        exe.write_text("#!/bin/sh\n")
        exe.chmod(0o755)
    return subprocess.run(["systemd-analyze", "verify", "--man=no", f"--root={root}",
                           *(str(units / u.name) for u in UNITS)], capture_output=True, text=True, timeout=60)


@pytest.mark.skipif(shutil.which("systemd-analyze") is None, reason="systemd-analyze is not installed")
@pytest.mark.skipif(not SYSTEM_UNITS.is_dir(), reason="no systemd unit folder here to verify against")
def test_systemd_analyze_verifies_the_units_as_shipped(tmp_path):
    proc = _verify(tmp_path, program=True)
    assert proc.returncode == 0 and not proc.stderr.strip(), proc.stdout + proc.stderr


@pytest.mark.skipif(shutil.which("systemd-analyze") is None, reason="systemd-analyze is not installed")
@pytest.mark.skipif(not SYSTEM_UNITS.is_dir(), reason="no systemd unit folder here to verify against")
def test_verify_fails_where_the_command_is_not_installed(tmp_path):
    proc = _verify(tmp_path, program=False)
    assert proc.returncode != 0 and "is not executable" in proc.stderr, proc.stderr


@pytest.mark.skipif(shutil.which("systemd-analyze") is None, reason="systemd-analyze is not installed")
@pytest.mark.parametrize("unit", UNITS, ids=lambda u: u.name)
def test_systemd_rates_the_sandbox_ok(unit):
    # exposure at most 2.0 (the threshold is in tenths); docs/deploy.md gives each unit's figure
    proc = subprocess.run(["systemd-analyze", "security", "--offline=yes", "--threshold=20", str(unit)],
                          capture_output=True, text=True, timeout=60)
    assert proc.returncode == 0, proc.stdout[-2000:] + proc.stderr


def test_the_agent_keeps_the_priority_systemd_gave_it(monkeypatch):
    # Nice=-5 in the unit stands in for CAP_SYS_NICE: the agent must not try (and log) again
    from clockfabric.agent import agent

    calls = []
    monkeypatch.setattr(agent.os, "getpriority", lambda *_: agent.AGENT_NICE)
    monkeypatch.setattr(agent.os, "setpriority", lambda *a: calls.append(a))
    agent.raise_priority()
    assert calls == []
    monkeypatch.setattr(agent.os, "getpriority", lambda *_: 0)
    agent.raise_priority()
    assert calls == [(agent.os.PRIO_PROCESS, 0, agent.AGENT_NICE)]
