"""The hosts seam: this machine, and ssh hosts through a stand-in `ssh` that runs the remote
command here (what sshd would do) or fails as the real client does."""

from __future__ import annotations

import signal
import stat
import time
from pathlib import Path

import pytest

from clockfabric.errors import ClockfabricError
from clockfabric.hosts import LocalHost, SshHost, SshOptions, fleet_hosts, stop

FAKE_SSH = """#!/bin/sh
# the last argument is the remote command line, as ssh hands it to the login shell
for last; do :; done
exec sh -c "$last"
"""


def fake(tmp_path: Path, script: str) -> str:
    path = tmp_path / "ssh"
    path.write_text(script)
    path.chmod(path.stat().st_mode | stat.S_IEXEC)
    return str(path)


def failing(tmp_path: Path, said: str) -> str:
    return fake(tmp_path, f"#!/bin/sh\necho '{said}' >&2\nexit 255\n")


def test_local_run_and_read(tmp_path):
    h = LocalHost("here", "10.0.0.1")
    done = h.run(["sh", "-c", "cat; echo err >&2; exit 3"], input=b"hi")
    assert (done.returncode, done.stdout, done.stderr) == (3, b"hi", b"err\n")
    (tmp_path / "f").write_bytes(b"x")
    assert h.read_file(str(tmp_path / "f")) == b"x"
    with pytest.raises(ClockfabricError, match="cannot read"):
        h.read_file(str(tmp_path / "missing"))
    with pytest.raises(ClockfabricError, match="no answer within 0.2 s"):
        h.run(["sleep", "5"], timeout_s=0.2)
    assert h.clock().now_ns() > 0


def test_local_spawn_logs_and_signals_its_group(tmp_path):
    h = LocalHost()
    log = tmp_path / "out.log"
    p = h.spawn(["sh", "-c", 'echo "$X"; sleep 30 & wait'], env={"X": "hello"}, log=log)
    time.sleep(0.3)
    assert p.poll() is None
    stop([p], grace_s=2.0)
    assert p.poll() is not None
    assert log.read_text() == "hello\n"
    p.signal(signal.SIGTERM)  # gone: no error


def test_local_spawn_with_pipes():
    p = LocalHost().spawn(["sh", "-c", "read x; echo got $x; echo bad >&2"], pipes=True)
    assert p.stdin and p.stdout and p.stderr
    p.stdin.write("go\n")
    p.stdin.flush()
    assert p.stdout.readline() == "got go\n"
    assert p.stderr.readline() == "bad\n"
    assert p.wait(5) == 0


def test_ssh_runs_through_the_client(tmp_path):
    h = SshHost("h0", "10.0.0.1", SshOptions(user="ops", port=2222), ssh=fake(tmp_path, FAKE_SSH))
    argv = h.argv(["echo", "a b"])
    assert argv[:4] == [h.ssh, "-T", "-o", "BatchMode=yes"] and ["-p", "2222"] == argv[6:8]
    assert argv[-2:] == ["10.0.0.1", "echo 'a b'"]
    assert h.run(["echo", "a b"]).stdout == b"a b\n"
    assert h.read_file("/proc/self/comm").strip() == b"cat"


def test_ssh_spawn_knows_the_remote_group(tmp_path):
    h = SshHost("h0", "10.0.0.1", ssh=fake(tmp_path, FAKE_SSH))
    log = tmp_path / "log"
    p = h.spawn(["sh", "-c", 'echo "$Y"; exec sleep 30'], env={"Y": "yes"}, log=log)
    assert p.pid > 0
    time.sleep(0.3)
    assert p.poll() is None
    p.signal(signal.SIGTERM)  # `kill -TERM -- -PGID`, run through the client
    assert p.wait(5) is not None
    time.sleep(0.1)
    assert log.read_text().startswith("yes\n")  # then maybe the stand-in shell's "Terminated"
    piped = h.spawn(["sh", "-c", "read x; echo $x"], pipes=True)
    assert piped.stdin and piped.stdout
    piped.stdin.write("back\n")
    assert piped.stdout.readline() == "back\n"
    assert piped.wait(5) == 0


@pytest.mark.parametrize("said, says", [
    ("ops@10.0.0.1: Permission denied (publickey).", "login was refused"),
    ("Host key verification failed.", "ssh-keyscan -p 2222 10.0.0.1"),
    ("ssh: Could not resolve hostname nowhere: Name or service not known", "cannot resolve"),
    ("ssh: connect to host 10.0.0.1 port 2222: Connection refused", "Connection refused; is the host up"),
    ("ssh: connect to host 10.0.0.1 port 2222: Connection timed out", "timed out"),
])
def test_ssh_failures_say_what_to_fix(tmp_path, said, says):
    h = SshHost("h0", "10.0.0.1", SshOptions(user="ops", port=2222), ssh=failing(tmp_path, said))
    with pytest.raises(ClockfabricError, match=says) as e:
        h.run(["true"])
    assert "\n" not in str(e.value)
    with pytest.raises(ClockfabricError, match=says):
        h.spawn(["true"])


def test_fleet_file_hosts(tmp_path):
    fleet = tmp_path / "fleet.yaml"
    fleet.write_text("name: f\nssh: {user: ops}\nhosts:\n  - {name: a, address: 10.0.0.1, ssh: {port: 2222}}\n"
                     "  - {name: b, address: 10.0.0.2}\nswitches: [{name: s0, role: leaf}]\n"
                     "links: [{a: 'a:eth0', b: s0}, {a: 'b:eth0', b: s0}]\n")
    hosts = fleet_hosts(fleet)
    assert sorted(hosts) == ["a", "b"]
    a = hosts["a"]
    assert isinstance(a, SshHost) and a.address == "10.0.0.1"
    assert a.options == SshOptions(user="ops", port=2222)
    with pytest.raises(ClockfabricError, match=r"'c' is not a host of fleet file .*; hosts are a, b"):
        hosts["c"]
