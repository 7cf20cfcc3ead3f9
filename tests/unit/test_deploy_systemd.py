"""The systemd units in deploy/systemd: valid for systemd, hardened, and passing only flags
the CLI has."""

from __future__ import annotations

import shlex
import shutil
import subprocess
import sys
from pathlib import Path

import pytest

from tests.unit.cli_flags import accepted_options, unknown_options

UNITS = sorted((Path(__file__).resolve().parents[2] / "deploy" / "systemd").glob("*.service"))


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
    argv = shlex.split(line)
    assert argv[0] == "/usr/bin/clockfabric", argv[0]
    return argv[1:]


def test_there_is_a_unit_for_the_agent_and_the_controller():
    assert [u.name for u in UNITS] == ["clockfabric-agent.service", "clockfabric-controller.service"]


@pytest.mark.parametrize("unit", UNITS, ids=lambda u: u.name)
def test_every_flag_in_execstart_exists_in_the_cli(unit):
    argv = exec_argv(unit)
    assert argv[0] in ("agent", "controller")
    assert unknown_options(argv) == []


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


def test_the_agent_has_exactly_the_capabilities_and_socket_families_it_needs():
    d = directives(UNITS[0])
    caps = {"CAP_NET_ADMIN", "CAP_NET_RAW", "CAP_SYS_NICE"}
    assert set(d["AmbientCapabilities"][0].split()) == caps
    assert set(d["CapabilityBoundingSet"][0].split()) == caps
    assert {"AF_NETLINK", "AF_PACKET"} <= set(d["RestrictAddressFamilies"][0].split())


def test_the_controller_has_no_capability():
    d = directives(UNITS[1])
    assert d["CapabilityBoundingSet"] == [""]
    assert "AF_PACKET" not in d["RestrictAddressFamilies"][0]


def _installed_clockfabric() -> str | None:
    beside = Path(sys.executable).with_name("clockfabric")
    return str(beside) if beside.exists() else shutil.which("clockfabric")


@pytest.mark.skipif(shutil.which("systemd-analyze") is None, reason="systemd-analyze is not installed")
@pytest.mark.skipif(_installed_clockfabric() is None, reason="no installed clockfabric command to point ExecStart at")
def test_systemd_analyze_verifies_the_units(tmp_path):
    # verify wants ExecStart's program to exist: point it at the installed command
    for unit in UNITS:
        (tmp_path / unit.name).write_text(unit.read_text().replace("/usr/bin/clockfabric", _installed_clockfabric()))
    proc = subprocess.run(["systemd-analyze", "verify", "--man=no", *(str(tmp_path / u.name) for u in UNITS)],
                          capture_output=True, text=True, timeout=60)
    assert proc.returncode == 0 and not proc.stderr.strip(), proc.stdout + proc.stderr


@pytest.mark.skipif(shutil.which("systemd-analyze") is None, reason="systemd-analyze is not installed")
@pytest.mark.parametrize("unit", UNITS, ids=lambda u: u.name)
def test_systemd_rates_the_sandbox_ok(unit):
    proc = subprocess.run(["systemd-analyze", "security", "--offline=yes", "--threshold=30", str(unit)],
                          capture_output=True, text=True, timeout=60)
    assert proc.returncode == 0, proc.stdout[-2000:] + proc.stderr
