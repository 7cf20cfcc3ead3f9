"""`clockfabric doctor`: each failure is one line with its fix, from the real thing where it runs
here (files and users, sockets, a controller on loopback, a network namespace of its own)."""

from __future__ import annotations

import json
import os
import shutil
import socket
import subprocess
import sys
from pathlib import Path

import pytest
import yaml

from clockfabric.agent.config import AgentConfig
from clockfabric.audit.model import Verdict
from clockfabric.auth.credential import host_token
from clockfabric.controller.fleet import Fleet
from clockfabric.controller.monitor import Monitor
from clockfabric.controller.server import Listen, server, start_in_thread
from clockfabric.controller.storage.sqlite import SqliteStorage
from clockfabric.doctor.base import Outcome, Setup
from clockfabric.doctor.checks import clock, controller, files, nics, ports, unit
from clockfabric.errors import USAGE_EXIT
from clockfabric.topology import parse

ROOT = Path(__file__).resolve().parents[2]
SOURCE_ENV = {**os.environ, "PYTHONPATH": f"{ROOT / 'src'}{os.pathsep}{ROOT}"}  # children import this tree
FLEET = """\
name: {name}
addressing: {{hosts: 127.0.0.0/16, fabric: 10.64.0.0/10}}
hosts:
  - {{name: gpu0, nics: [{{name: eth0, plane: 0}}]}}
  - {{name: gpu1, nics: [{{name: eth0, plane: 0}}]}}
switches:
  - {{name: rack0, role: leaf}}
links:
  - {{a: gpu0, b: rack0}}
  - {{a: gpu1, b: rack0}}
"""
FLEET_TOKEN = "doctor-fleet-token-0123456789abcdef"


def topology(name: str = "site-a"):
    return parse(yaml.safe_load(FLEET.format(name=name)))


def setup(tmp_path: Path, *, key: str | None = None, token: str | None = None, controller_url: str | None = None,
          user: str | None = None, unit_file: Path | None = None, **config) -> Setup:
    key_file = token_file = None
    if key is not None:
        key_file = tmp_path / "fleet.key"
        key_file.write_text(key)
        key_file.chmod(0o600)
    if token is not None:
        token_file = tmp_path / "host.token"
        token_file.write_text(token + "\n")
        token_file.chmod(0o600)
    cfg = AgentConfig("gpu0", config.pop("topo", None) or topology(), tmp_path, key_file=key_file,
                      controller=controller_url, **config)
    return Setup(cfg, token_file=token_file, user=user, unit=unit_file)


def one(outcomes: list[Outcome]) -> Outcome:
    (o,) = outcomes
    assert "\n" not in o.line()
    return o


def test_a_key_the_agents_user_cannot_read_fails_naming_the_user_and_the_fix(tmp_path):
    if os.geteuid() != 0:
        pytest.skip("needs root: the check becomes the user to open the file")
    s = setup(tmp_path, key=f"1:{'ab' * 32}\n", user="nobody")
    o = one(files.key(s))
    assert o.verdict is Verdict.FAIL
    assert "not readable by user nobody: Permission denied (mode 0600, owner root:root)" in o.message
    assert o.fix.startswith(f"chown nobody {tmp_path / 'fleet.key'}")
    assert one(files.key(setup(tmp_path, key=f"1:{'ab' * 32}\n"))).verdict is Verdict.PASS  # root reads it


def test_the_modes_say_no_for_another_user_where_doctor_cannot_become_it(tmp_path):
    from clockfabric.doctor.readable import _by_modes

    path = tmp_path / "fleet.key"
    path.write_text("x")
    path.chmod(0o600)
    nobody = 65534
    assert _by_modes(path, nobody, [nobody]) is not None
    assert _by_modes(path, path.stat().st_uid, []) is None


def test_the_documentations_example_key_fails_here_as_the_agent_refuses_it(tmp_path):
    o = one(files.key(setup(tmp_path, key="3:9f86d081884c7d659a2feaa0c55ad015a3bf4f1b2b0b822cd15d6c15b0f00a08\n")))
    assert o.verdict is Verdict.FAIL and "the documentation's example key" in o.message
    assert "clockfabric key new FILE" in o.fix
    bad = one(files.key(setup(tmp_path, key="1:nothex\n")))
    assert bad.verdict is Verdict.FAIL and "expected `id:hexkey`" in bad.message


def test_the_fleet_token_given_as_the_host_credential_fails_with_the_command_that_makes_one(tmp_path):
    s = setup(tmp_path, key=f"1:{'ab' * 32}\n", token=FLEET_TOKEN, controller_url="http://127.0.0.1:1")
    o = one(files.credential(s))
    assert o.verdict is Verdict.FAIL and "holds a fleet token, not a host credential" in o.message
    assert o.fix.startswith("clockfabric token host gpu0 ")
    other = one(files.credential(setup(tmp_path, token=host_token(FLEET_TOKEN, "gpu1"),
                                       controller_url="http://127.0.0.1:1")))
    assert other.verdict is Verdict.FAIL and "host 'gpu1''s credential, not 'gpu0''s" in other.message
    own = one(files.credential(setup(tmp_path, token=host_token(FLEET_TOKEN, "gpu0"),
                                     controller_url="http://127.0.0.1:1")))
    assert own.verdict is Verdict.PASS


@pytest.fixture
def controller_url(tmp_path):
    """A real controller on a free loopback port, serving fleet site-a with gpu0 and gpu1 enrolled."""
    storage = SqliteStorage(tmp_path / "controller.db")
    topo = topology("site-a")
    fleet = Fleet(storage, hosts=sorted(topo.hosts), monitor=Monitor.create(storage, topology=topo))
    srv = server(fleet, FLEET_TOKEN, Listen("127.0.0.1", 0))
    thread = start_in_thread(srv)
    yield f"http://127.0.0.1:{srv.servers[0].sockets[0].getsockname()[1]}"
    srv.should_exit = True
    thread.join(10)
    storage.close()


def test_the_controller_refusing_the_credential_fails_and_its_own_passes(tmp_path, controller_url):
    forged = host_token("another-fleets-token-0123456789", "gpu0")
    o = one(controller.controller(setup(tmp_path, token=forged, controller_url=controller_url)))
    assert o.verdict is Verdict.FAIL and o.message.startswith(f"{controller_url} refuses this host's credential")
    assert "clockfabric token host gpu0" in o.fix
    good = setup(tmp_path, token=host_token(FLEET_TOKEN, "gpu0"), controller_url=controller_url)
    assert one(controller.controller(good)) == Outcome(
        "controller", Verdict.PASS, f"{controller_url} takes host gpu0's credential, fleet site-a")
    elsewhere = setup(tmp_path, token=host_token(FLEET_TOKEN, "gpu0"), controller_url=controller_url,
                      topo=topology("site-b"))
    o = one(controller.controller(elsewhere))
    assert o.verdict is Verdict.FAIL and o.message.endswith("serves fleet 'site-a'; the fleet file here is 'site-b'")


def test_a_controller_that_is_not_there_fails_with_what_to_look_at(tmp_path):
    with socket.socket() as s:
        s.bind(("127.0.0.1", 0))
        port = s.getsockname()[1]  # closed again: nothing listens there
    o = one(controller.controller(setup(tmp_path, token=host_token(FLEET_TOKEN, "gpu0"),
                                        controller_url=f"http://127.0.0.1:{port}")))
    assert o.verdict is Verdict.FAIL and "not reachable" in o.message and "that the controller runs" in o.fix


def test_a_certificate_for_another_name_fails_naming_the_name(tmp_path):
    from tests.conftest import run_cli as clockfabric

    clockfabric("tls", "new", str(tmp_path / "pki"), "--name", "127.0.0.1")  # for IP 127.0.0.1 alone
    ca, cert, key = (tmp_path / "pki" / "ca.crt",), tmp_path / "pki" / "tls.crt", tmp_path / "pki" / "tls.key"
    storage = SqliteStorage(tmp_path / "controller.db")
    srv = server(Fleet(storage, hosts=["gpu0"]), FLEET_TOKEN, Listen("127.0.0.1", 0, tls_cert=cert, tls_key=key))
    thread = start_in_thread(srv)
    port = srv.servers[0].sockets[0].getsockname()[1]
    try:
        credential = host_token(FLEET_TOKEN, "gpu0")
        by_name = setup(tmp_path, token=credential, controller_url=f"https://localhost:{port}", ca_file=str(ca[0]))
        o = one(controller.controller(by_name))
        assert o.verdict is Verdict.FAIL
        assert "the controller's certificate is for another name than localhost" in o.message
        assert o.fix.startswith("reissue the certificate with localhost in its subjectAltName")
        untrusted = one(controller.controller(setup(tmp_path, token=credential,
                                                    controller_url=f"https://127.0.0.1:{port}")))
        assert untrusted.verdict is Verdict.FAIL and "--ca-file" in untrusted.fix
        by_address = setup(tmp_path, token=credential, controller_url=f"https://127.0.0.1:{port}", ca_file=str(ca[0]))
        assert one(controller.controller(by_address)).verdict is Verdict.PASS
    finally:
        srv.should_exit = True
        thread.join(10)
        storage.close()


def test_a_port_in_use_fails_naming_it(tmp_path):
    with socket.socket(socket.AF_INET, socket.SOCK_DGRAM) as probe, socket.socket() as metrics:
        probe.bind(("127.0.0.1", 0))
        metrics.bind(("127.0.0.1", 0))
        metrics.listen()
        base, port = probe.getsockname()[1] - 1, metrics.getsockname()[1]
        o = one(ports.ports(setup(tmp_path, base_port=base, ports=1, metrics_port=port)))
    assert o.verdict is Verdict.FAIL
    assert f"udp/{base + 1} (probes): Address already in use" in o.message
    assert f"tcp/{port} (/metrics): Address already in use" in o.message
    assert f"'sport = :{base + 1}'" in o.fix


def test_an_address_not_on_this_host_fails_before_any_port(tmp_path):
    unused = "198.51.100.0/24"  # TEST-NET-2: on no host
    topo = parse(yaml.safe_load(FLEET.format(name="x").replace("127.0.0.0/16", unused)))
    o = one(ports.ports(setup(tmp_path, topo=topo)))
    assert o.verdict is Verdict.FAIL and o.message.startswith("198.51.100.1, host gpu0's address in the fleet file")


NETNS_ROUTES = """
import sys
from pyroute2 import IPRoute
with IPRoute() as ipr:
    ipr.link("add", ifname="eth0", kind="veth", peer="eth0p")
    for name in ("eth0", "eth0p"):
        ipr.link("set", index=ipr.link_lookup(ifname=name)[0], state="up")
    ipr.link("set", index=ipr.link_lookup(ifname="lo")[0], state="up")
    if sys.argv[1] == "routed":
        ipr.route("add", dst="10.9.0.0/16", oif=ipr.link_lookup(ifname="eth0")[0])
from tests.unit.test_doctor import routes_here
print(routes_here())
"""


def routes_here() -> str:
    import tempfile

    topo = parse(yaml.safe_load(FLEET.format(name="x").replace("127.0.0.0/16", "10.9.0.0/16")))
    return one(nics.routes(setup(Path(tempfile.gettempdir()), topo=topo))).line()


@pytest.mark.skipif(os.geteuid() != 0 or shutil.which("unshare") is None,
                    reason="a network namespace of its own needs root and util-linux's unshare")
@pytest.mark.parametrize("state", ["bare", "routed"])
def test_a_plane_without_a_route_to_its_peers_fails(state):
    # a namespace of the child's own, gone with it: eth0 there is one end of a veth pair; the root
    # namespace is untouched
    done = subprocess.run(["unshare", "--net", sys.executable, "-c", NETNS_ROUTES, state], capture_output=True,
                          text=True, timeout=30, cwd=ROOT, env=SOURCE_ENV)
    assert done.returncode == 0, done.stderr
    if state == "bare":
        assert done.stdout.startswith("fail  routes      plane 0: no route out of eth0 to gpu1 (10.9.0.2)")
    else:
        assert done.stdout.startswith("pass  routes      plane 0: 1 peer(s) routed out of eth0")


def test_a_unit_whose_program_does_not_exist_fails(tmp_path):
    path = tmp_path / "clockfabric-agent.service"
    path.write_text("[Service]\nExecStart=/opt/nowhere/bin/clockfabric agent --topology /etc/f.yaml \\\n"
                    "    --host %H\n")
    o = one(unit.unit(setup(tmp_path, unit_file=path)))
    assert o.verdict is Verdict.FAIL
    assert o.message == f"{path}: ExecStart program /opt/nowhere/bin/clockfabric does not exist"
    shipped = (ROOT / "deploy/systemd/clockfabric-agent.service").read_text()
    assert unit.exec_starts(shipped) == ["/opt/clockfabric/bin/clockfabric"]
    path.write_text(f"[Service]\nExecStart=-{sys.executable} -c pass\n")
    assert one(unit.unit(setup(tmp_path, unit_file=path))).verdict is Verdict.PASS


def run_cli(*args: str) -> subprocess.CompletedProcess:
    return subprocess.run([sys.executable, "-m", "clockfabric.cli", "doctor", *args], capture_output=True,
                          text=True, timeout=60, cwd=ROOT, env=SOURCE_ENV)


def test_the_command_prints_a_line_per_check_and_exits_1_on_a_failure(tmp_path):
    fleet = tmp_path / "fleet.yaml"
    fleet.write_text(FLEET.format(name="site-a"))
    key = tmp_path / "fleet.key"
    key.write_text("3:9f86d081884c7d659a2feaa0c55ad015a3bf4f1b2b0b822cd15d6c15b0f00a08\n")
    done = run_cli("--host", "gpu0", "--topology", str(fleet), "--key-file", str(key), "--json")
    assert done.returncode == 1, done.stderr
    report = json.loads(done.stdout)
    assert report["failed"] and [c["check"] for c in report["checks"]][:2] == ["key", "credential"]
    assert report["checks"][0]["verdict"] == "fail" and report["checks"][0]["fix"]
    bad = run_cli("--host", "gpu0", "--topology", str(fleet), "--user", "no-such-user-here")
    assert bad.returncode == USAGE_EXIT and bad.stdout == ""
    assert bad.stderr.count("\n") == 1 and "--user no-such-user-here: no such user on this host" in bad.stderr


def test_the_agent_refuses_the_fleet_token_as_doctor_does(tmp_path):
    fleet, token = tmp_path / "fleet.yaml", tmp_path / "token"
    fleet.write_text(FLEET.format(name="site-a"))
    token.write_text(FLEET_TOKEN + "\n")
    done = subprocess.run([sys.executable, "-m", "clockfabric.cli", "agent", "--topology", str(fleet), "--host", "gpu0",
                           "--state-dir", str(tmp_path / "state"), "--controller", "http://127.0.0.1:1",
                           "--token-file", str(token), "--insecure"],
                          capture_output=True, text=True, timeout=60, cwd=ROOT, env=SOURCE_ENV)
    assert done.returncode == USAGE_EXIT and done.stderr.count("\n") == 1, done.stderr
    assert f"--token-file {token} holds a fleet token, not a host credential" in done.stderr
    assert f"clockfabric token host gpu0 --token-file FLEET_TOKEN -o {token}" in done.stderr


def test_a_unit_naming_its_program_bare_finds_it_where_systemd_looks(tmp_path):
    path = tmp_path / "clockfabric-agent.service"
    path.write_text("[Service]\nExecStart=sh -c true\n")  # systemd resolves a bare name in its fixed PATH
    assert one(unit.unit(setup(tmp_path, unit_file=path))).verdict is Verdict.PASS
    path.write_text("[Service]\nExecStart=no-such-program-here --x\n")
    assert one(unit.unit(setup(tmp_path, unit_file=path))).verdict is Verdict.FAIL


def test_a_nic_the_fleet_file_names_that_is_not_here_fails(tmp_path):
    topo = parse(yaml.safe_load(FLEET.format(name="x").replace("eth0", "nosuchnic0")))
    o = one(nics.nic(setup(tmp_path, topo=topo)))
    assert o.verdict is Verdict.FAIL and o.message == "nosuchnic0 (plane 0) is not on this host"
    assert one(nics.routes(setup(tmp_path, topo=topo))).verdict is Verdict.SKIP


def test_a_clock_source_other_than_tsc_warns_on_x86(tmp_path, monkeypatch):
    sysfs, ptp = tmp_path / "clocksource0", tmp_path / "ptp"
    sysfs.mkdir()
    (ptp / "ptp0").mkdir(parents=True)
    (sysfs / "current_clocksource").write_text("hpet\n")
    (sysfs / "available_clocksource").write_text("tsc hpet acpi_pm\n")
    monkeypatch.setattr(clock.platform, "machine", lambda: "x86_64")
    o = one(clock.clock(setup(tmp_path), sysfs, ptp))
    assert o.verdict is Verdict.WARN and o.message.startswith("clock source hpet; PTP clocks: ptp0: tsc expected")
    assert o.fix == "echo tsc > /sys/devices/system/clocksource/clocksource0/current_clocksource"
    (sysfs / "current_clocksource").write_text("tsc\n")
    assert one(clock.clock(setup(tmp_path), sysfs, ptp)).verdict is Verdict.PASS


def test_no_key_fails_and_insecure_warns(tmp_path):
    o = one(files.key(setup(tmp_path)))
    assert o.verdict is Verdict.FAIL and "clockfabric key new FILE" in o.fix
    assert one(files.key(setup(tmp_path, insecure=True))).verdict is Verdict.WARN
