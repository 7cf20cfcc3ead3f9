"""The audit's ssh transport (clockfabric.audit.ssh) against a real OpenSSH server.

A throwaway sshd (its own host key, one authorized client key, a generated config) listens on
127.0.0.2 and 127.0.0.3; the audit logs in with the client key, checks the host key against a
generated known_hosts, and runs the real host side there. Around it: a "host" that accepts
TCP and never speaks (127.0.0.4 and .5), one that refuses (127.0.0.6), a wrong key, an unknown
host key, a report that hangs after login. Each is one line for its host, within the per-host
timeout, while the others report. Everything stays on loopback; sshd is stopped by its pid.
"""

from __future__ import annotations

import getpass
import json
import os
import shutil
import socket
import subprocess
import sys
import textwrap
import time
from contextlib import contextmanager
from pathlib import Path

import pytest

from clockfabric.audit import ssh
from clockfabric.audit.gather import gather, specs
from clockfabric.errors import ClockfabricError
from clockfabric.topology import load

SSHD = "/usr/sbin/sshd"
GOOD, HUNG, REFUSED = ["127.0.0.2", "127.0.0.3"], ["127.0.0.4", "127.0.0.5"], "127.0.0.6"

pytestmark = pytest.mark.skipif(not (os.path.exists(SSHD) and shutil.which("ssh-keygen")),
                                reason="needs OpenSSH's sshd and ssh-keygen (scripts/setup.sh installs openssh-server)")


def keygen(path: Path, passphrase: str = "") -> Path:
    subprocess.run(["ssh-keygen", "-q", "-t", "ed25519", "-N", passphrase, "-C", "clockfabric-test", "-f", str(path)],
                   check=True, timeout=30)
    return path


def free_port(address: str) -> int:
    with socket.socket() as s:
        s.bind((address, 0))
        return s.getsockname()[1]


def banner(address: str, port: int) -> bool:
    try:
        with socket.create_connection((address, port), timeout=1) as s:
            return s.recv(8).startswith(b"SSH-2.0")
    except OSError:
        return False


@contextmanager
def sshd(workdir: Path, addresses: list[str], port: int):
    """A real sshd on addresses:port that lets this user in with workdir/client_key; yields workdir."""
    host_key, client_key = keygen(workdir / "host_key"), keygen(workdir / "client_key")
    (workdir / "authorized_keys").write_text((workdir / "client_key.pub").read_text())
    pub = " ".join((workdir / "host_key.pub").read_text().split()[:2])
    at = "{}" if port == 22 else f"[{{}}]:{port}"  # as OpenSSH writes it: the port only when not 22
    (workdir / "known_hosts").write_text("".join(f"{at.format(a)} {pub}\n" for a in addresses))
    config = workdir / "sshd_config"
    config.write_text("".join(f"ListenAddress {a}:{port}\n" for a in addresses) + textwrap.dedent(f"""\
        HostKey {host_key}
        AuthorizedKeysFile {workdir / 'authorized_keys'}
        PidFile {workdir / 'sshd.pid'}
        UsePAM no
        StrictModes no
        PasswordAuthentication no
        KbdInteractiveAuthentication no
        PermitRootLogin prohibit-password
        """))
    if os.geteuid() == 0:  # root's sshd wants its privilege-separation directory (systemd makes it at boot)
        os.makedirs("/run/sshd", mode=0o755, exist_ok=True)
    with open(workdir / "sshd.log", "wb") as log:
        proc = subprocess.Popen([SSHD, "-D", "-e", "-f", str(config)], stdout=log, stderr=subprocess.STDOUT)
    try:
        deadline = time.monotonic() + 10
        while not all(banner(a, port) for a in addresses):
            if proc.poll() is not None or time.monotonic() > deadline:
                pytest.fail(f"sshd did not start: {(workdir / 'sshd.log').read_text()[-500:]}")
            time.sleep(0.05)
        assert client_key.exists()
        yield workdir
    finally:
        proc.terminate()  # by its pid; sessions it forked end with their commands
        try:
            proc.wait(5)
        except subprocess.TimeoutExpired:
            proc.kill()
            proc.wait(5)


@pytest.fixture(scope="module")
def server(tmp_path_factory):
    work = tmp_path_factory.mktemp("sshd")
    port = free_port(GOOD[0])
    with sshd(work, GOOD, port) as w:
        yield w, port


@pytest.fixture
def hung():
    """Hosts whose port accepts the TCP connection (the kernel's backlog) and never sends a banner."""
    socks = []
    for a in HUNG:
        s = socket.socket()
        s.bind((a, 0))
        s.listen(8)
        socks.append(s)
    yield [s.getsockname()[1] for s in socks]
    for s in socks:
        s.close()


def fleet(tmp_path: Path, work: Path, port: int, extra: dict[str, dict] | None = None, ssh_section: dict | None = None):
    """A hosts file: h0, h1 behind the real sshd, then what `extra` adds or changes (name -> host entry)."""
    hosts = {f"h{i}": {"name": f"h{i}", "address": a, "nics": [{"name": "cfssh0", "plane": 0}]}
             for i, a in enumerate(GOOD)}
    for name, entry in (extra or {}).items():
        hosts.setdefault(name, {"name": name, "nics": [{"name": "cfssh0", "plane": 0}]}).update(entry)
    hosts = list(hosts.values())
    section = {"user": getpass.getuser(), "port": port, "key": str(work / "client_key"),
               "known_hosts": str(work / "known_hosts"), "python": sys.executable, **(ssh_section or {})}
    doc = {"name": "sshfleet", "addressing": {"hosts": "127.0.0.0/24"}, "ssh": section, "hosts": hosts,
           "switches": [{"name": "leaf0", "role": "leaf", "plane": 0}],
           "links": [{"a": f"{h['name']}:cfssh0", "b": "leaf0"} for h in hosts]}
    path = tmp_path / "fleet.yaml"
    path.write_text(json.dumps(doc))  # JSON is YAML
    return path


def quick(topo) -> dict:
    asked = specs(topo, list(topo.hosts), pings=0, lldp_wait_s=0.1)
    for s in asked.values():
        s["names"] = {"localhost": "127.0.0.1"}  # resolve nothing that would ask a DNS server
    return asked


def audit_over_ssh(path: Path, timeout_s: float, **cli):
    topo = load(path)
    return gather(quick(topo), ssh.SshTransport(topo, ssh.options(topo, path, **cli)), timeout_s=timeout_s)


# ---- through the real sshd ------------------------------------------------------------------------

def test_reports_come_back_over_ssh(server, tmp_path):
    work, port = server
    reports, missing = audit_over_ssh(fleet(tmp_path, work, port), 30)
    assert missing == {}
    for h in ("h0", "h1"):  # the real host side ran there: its own facts, for the host it was told it is
        assert reports[h]["host"] == h and reports[h]["hostname"] == socket.gethostname()
        assert reports[h]["nics"] == {"cfssh0": {"present": False}} and reports[h]["memory"]["total_bytes"] > 0
    accepted = (work / "sshd.log").read_text()
    assert accepted.count("Accepted publickey for") >= 2  # sshd saw the logins: no shortcut was taken


def test_hung_and_refusing_hosts_cost_one_timeout_and_hold_up_no_one(server, hung, tmp_path):
    work, port = server
    extra = {"h2": {"address": HUNG[0], "ssh": {"port": hung[0]}}, "h3": {"address": HUNG[1], "ssh": {"port": hung[1]}},
             "h4": {"address": REFUSED, "ssh": {"port": free_port(REFUSED)}}}
    t0 = time.monotonic()
    reports, missing = audit_over_ssh(fleet(tmp_path, work, port, extra), 4)
    took = time.monotonic() - t0
    assert sorted(reports) == ["h0", "h1"]
    assert missing["h2"] == missing["h3"] == "no answer within 4 s (in the ssh handshake)"
    assert missing["h4"].startswith(f"ssh: cannot connect to {REFUSED} port ") \
        and missing["h4"].endswith(": Connection refused")
    assert 4 <= took < 7  # both hung hosts at once, not one after the other


def test_a_report_that_hangs_after_login_times_out_too(server, tmp_path):
    work, port = server
    stuck = tmp_path / "stuck.py"  # writes until the connection is gone, so it dies with it
    stuck.write_text("import sys, time\nwhile True:\n    sys.stdout.write(' '); sys.stdout.flush(); time.sleep(0.2)\n")
    path = fleet(tmp_path, work, port, {"h1": {"ssh": {"python": f"{sys.executable} {stuck}"}}})
    t0 = time.monotonic()
    reports, missing = audit_over_ssh(path, 3)
    assert sorted(reports) == ["h0"]
    assert missing == {"h1": "no answer within 3 s (running the report)"}
    assert time.monotonic() - t0 < 6


def test_a_key_the_host_does_not_accept(server, tmp_path):
    work, port = server
    other = keygen(tmp_path / "other_key")
    reports, missing = audit_over_ssh(fleet(tmp_path, work, port), 20, key=str(other))  # the CLI's --ssh-key wins
    assert reports == {}
    user = getpass.getuser()
    assert missing == {h: f"ssh: {a} port {port} refused the login as {user} with {other}"
                       for h, a in zip(("h0", "h1"), GOOD)}


def test_a_host_key_not_in_known_hosts(server, tmp_path):
    work, port = server
    known = tmp_path / "known_hosts"
    known.write_text(f"[{GOOD[0]}]:{port} " + " ".join(keygen(tmp_path / "impostor").with_suffix(".pub")
                                                      .read_text().split()[:2]) + "\n")
    reports, missing = audit_over_ssh(fleet(tmp_path, work, port), 20, known_hosts=str(known))
    assert reports == {}
    for h, a in zip(("h0", "h1"), GOOD):
        assert missing[h] == (f"ssh: {a} port {port}: Host key is not trusted for host {a}; add its key to "
                              f"known_hosts (ssh-keyscan -p {port} {a}) or name the file with ssh.known_hosts / "
                              "--ssh-known-hosts")


def test_clockfabric_missing_on_the_host(server, tmp_path):
    work, port = server
    reports, missing = audit_over_ssh(fleet(tmp_path, work, port, ssh_section={"python": "/usr/bin/env -i python3"}),
                                      20)  # a python without clockfabric
    assert reports == {}
    for h in ("h0", "h1"):  # Python's own last line, through sshd
        assert missing[h].startswith("its report failed: ") and "No module named 'clockfabric'" in missing[h]


# ---- options: the hosts file and the CLI --------------------------------------------------------

def write(tmp_path: Path, text: str) -> Path:
    path = tmp_path / "fleet.yaml"
    path.write_text(textwrap.dedent(text))
    return path


FLEET = """\
    name: f
    ssh: {user: ops, port: 2222, key: keys/fleet, known_hosts: ~/fleet_known_hosts}
    hosts:
      - {name: h0, address: 10.0.0.1}
      - {name: h1, address: 10.0.0.2, ssh: {port: 22, python: "sudo -n python3"}}
    switches: [{name: s0, role: leaf}]
    links: [{a: "h0:eth0", b: s0}, {a: "h1:eth0", b: s0}]
"""


def test_options_from_the_file_per_host_and_the_cli(tmp_path):
    path = write(tmp_path, FLEET)
    topo = load(path)
    opts = ssh.options(topo, path)
    assert opts["h0"] == ssh.SshOptions(user="ops", port=2222, key=str(tmp_path / "keys" / "fleet"),
                                        known_hosts=str(Path.home() / "fleet_known_hosts"))
    assert (opts["h1"].port, opts["h1"].user, opts["h1"].python) == (22, "ops", "sudo -n python3")
    over = ssh.options(topo, path, user="root", port=None, key=None, known_hosts=None, python=None)
    assert (over["h0"].user, over["h1"].user, over["h1"].port) == ("root", "root", 22)
    assert ssh.options(topo)["h0"] == ssh.SshOptions()  # nothing given: what `ssh HOST` would do


def test_the_command_run_on_the_host(tmp_path):
    path = write(tmp_path, FLEET.replace(", key: keys/fleet, known_hosts: ~/fleet_known_hosts", ""))
    topo = load(path)
    t = ssh.SshTransport(topo, ssh.options(topo, path))
    assert t.command("h0") == "python3 -m clockfabric.audit.host"
    assert t.command("h1") == "sudo -n python3 -m clockfabric.audit.host"


@pytest.mark.parametrize("section, says", [
    # the topology's schema, which takes the ssh section's keys too, finds a misspelt one first
    ("ssh: {usr: ops}", "fleet.yaml: line 2: ssh: unknown key 'usr'; did you mean user?"),
    ("ssh: {port: '22'}", "fleet.yaml: ssh.port must be a int, not '22'"),
    ("ssh: {port: 70000}", "fleet.yaml: ssh.port must be 1..65535, not 70000"),
    ("ssh: ops", "fleet.yaml: ssh must be a mapping, like {user: ops, port: 22, key: ~/.ssh/fleet}"),
])
def test_bad_options_are_one_line(tmp_path, section, says):
    path = write(tmp_path, FLEET.replace(FLEET.splitlines()[1].strip(), section))
    with pytest.raises(ClockfabricError) as e:
        ssh.options(load(path), path)
    assert str(e.value) == f"{tmp_path}/{says}"


def test_unusable_key_files_are_said_before_any_host_is_tried(tmp_path):
    path = write(tmp_path, FLEET)
    topo = load(path)
    with pytest.raises(ClockfabricError, match=r"^cannot read ssh key .*/keys/fleet: No such file or directory; "
                                               r"check the path$"):
        ssh.SshTransport(topo, ssh.options(topo, path))
    locked = keygen(tmp_path / "locked", passphrase="secret")
    with pytest.raises(ClockfabricError) as e:
        ssh.SshTransport(topo, ssh.options(topo, path, key=str(locked), known_hosts=None))
    assert str(e.value) == (f"ssh key {locked} is passphrase-protected: add it to the agent (ssh-add {locked}) and "
                            "leave the key option out")
    with pytest.raises(ClockfabricError, match=r"^--ssh-port must be 1\.\.65535, not 0$"):
        ssh.options(topo, path, port=0)


# ---- the CLI, end to end, in a network namespace of its own ---------------------------------------

DRIVER = """
import subprocess, sys, time, socket
sys.path.insert(0, {tests!r})
from tests.unit.test_audit_ssh import sshd
from pathlib import Path
subprocess.run(["ip", "link", "set", "lo", "up"], check=True)
with sshd(Path({work!r}), {good!r}, 22):
    proc = subprocess.run([sys.executable, "-m", "clockfabric.cli", *{argv!r}], capture_output=True, text=True,
                          timeout=120)
print(proc.returncode)
sys.stdout.write(proc.stdout)
sys.stderr.write(proc.stderr)
"""


def test_cli_audits_over_ssh(tmp_path):
    """`clockfabric audit --hosts FILE --ssh-*` with the real sshd, in a fresh network namespace:
    only its loopback exists, so the hosts' name lookups (h0, h1, ...) go nowhere."""
    if os.geteuid() != 0 or not shutil.which("unshare"):
        pytest.skip("needs root and unshare for a private network namespace (CI runs as root)")
    work = tmp_path / "sshd"
    work.mkdir()
    path = fleet(tmp_path, work, 22, {"h2": {"address": HUNG[0]}})  # nothing listens there: refused
    expect = tmp_path / "expect.yaml"
    expect.write_text("timeouts: {host_s: 20, lldp_s: 0.2}\n")
    argv = ["audit", "--hosts", str(path), "--expect", str(expect), "--only", "frontend.reach,configuration",
            "--ssh-key", str(work / "client_key"), "--ssh-known-hosts", str(work / "known_hosts"), "--json"]
    script = DRIVER.format(tests=str(Path(__file__).parents[2]), work=str(work), good=GOOD, argv=argv)
    proc = subprocess.run(["unshare", "--net", sys.executable, "-c", script], check=False, capture_output=True,
                          text=True, timeout=180)
    assert proc.returncode == 0, proc.stderr
    code, _, out = proc.stdout.partition("\n")
    assert "Traceback" not in proc.stderr
    report = json.loads(out)
    assert int(code) == report["exit_code"] == 2  # h2 fails frontend.reach
    checks = {c["id"]: c for c in report["checks"]}
    reach = checks["frontend.reach"]
    assert reach["summary"] == "2 of 3 hosts answered", reach["findings"]
    assert [(f["host"], f["message"]) for f in reach["findings"]] == [
        ("h2", f"ssh: cannot connect to {HUNG[0]} port 22: Connection refused")]
    assert checks["configuration.software"]["verdict"] == "pass"  # h0 and h1 reported, through ssh
    assert not (work / "sshd.pid").exists() or not Path(f"/proc/{(work / 'sshd.pid').read_text().strip()}").exists()
