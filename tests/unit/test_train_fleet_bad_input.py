"""`clockfabric train run --fleet`: a host not in the fleet file, or one ssh cannot reach, is
one line saying what is wrong and how to fix it, and nothing is left started."""

from __future__ import annotations

import shutil
import socket
import subprocess
import sys
from pathlib import Path

import pytest

pytest.importorskip("torch", reason="torch is not installed (make setup installs the job extra)")
pytestmark = pytest.mark.skipif(shutil.which("ssh") is None, reason="no OpenSSH client")

SCRIPT = Path(__file__).resolve().parents[2] / "examples" / "ddp_spares.py"


def closed_port() -> int:
    with socket.socket() as s:
        s.bind(("127.0.0.1", 0))
        return s.getsockname()[1]  # nothing listens there once it is closed


def fleet(tmp_path: Path) -> Path:
    path = tmp_path / "fleet.yaml"
    path.write_text(f"name: f\naddressing: {{hosts: 127.0.0.0/24}}\nssh: {{user: root, port: {closed_port()}}}\n"
                    "hosts:\n  - {name: a, address: 127.0.0.2}\n  - {name: b, address: 127.0.0.3}\n"
                    "switches: [{name: s0, role: leaf}]\nlinks: [{a: 'a:eth0', b: s0}, {a: 'b:eth0', b: s0}]\n")
    return path


def train_run(path: Path, hosts: str, tmp_path: Path) -> subprocess.CompletedProcess:
    return subprocess.run([sys.executable, "-m", "clockfabric.cli", "train", "run", "--fleet", str(path), "--hosts",
                           hosts, "--dir", str(tmp_path / "job"), "--no-watch-gpus", "--no-readmit", "--",
                           str(SCRIPT), "--steps", "2"], capture_output=True, text=True, timeout=120)


def test_a_host_not_in_the_fleet_file_is_one_line(tmp_path):
    done = train_run(fleet(tmp_path), "a,c", tmp_path)
    assert done.returncode != 0 and "Traceback" not in done.stderr
    lines = done.stderr.strip().splitlines()
    assert len(lines) == 1 and "'c' is not a host of the fleet" in lines[0] and "known: a, b" in lines[0]


def test_a_host_ssh_cannot_reach_is_one_line_and_nothing_is_left(tmp_path):
    done = train_run(fleet(tmp_path), "a,b", tmp_path)
    assert done.returncode != 0 and "Traceback" not in done.stderr
    lines = done.stderr.strip().splitlines()
    assert len(lines) == 1 and "Connection refused" in lines[0] and "127.0.0." in lines[0], done.stderr
    assert not list((tmp_path / "job").glob("rank*.jsonl"))  # no member started
