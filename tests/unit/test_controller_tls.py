"""The controller over TLS, end to end on loopback: a private CA and the controller's certificate
made as docs/deploy.md makes them (`clockfabric tls new`), another CA made apart (openssl CLI),
the real `clockfabric controller --tls-cert --tls-key` in a subprocess, the real agent Pusher.

Why: agents authenticate to the controller with the fleet token, and TLS is what keeps that
token (and the fleet's telemetry) off the wire in clear; a TLS path nobody runs is one that
quietly breaks."""

from __future__ import annotations

import shutil
import ssl
import subprocess
import sys
import time
from pathlib import Path

import httpx
import pytest

from clockfabric.agent.push import Pusher
from clockfabric.auth.credential import host_token
from clockfabric.errors import ClockfabricError
from clockfabric.topology import leafspine, save
from tests.conftest import run_cli
from tests.ports import controller_port

pytestmark = pytest.mark.skipif(shutil.which("openssl") is None, reason="needs the openssl CLI to make certificates")

TOKEN = "tls-test-token-" + "x" * 20
HOST = "h1"


def openssl(*args: str, cwd: Path) -> None:
    proc = subprocess.run(["openssl", *args], check=False, cwd=cwd, capture_output=True, text=True, timeout=30)
    assert proc.returncode == 0, f"openssl {' '.join(args)}:\n{proc.stderr}"


def make_ca(d: Path, name: str) -> tuple[Path, Path]:
    """A self-signed CA (EC P-256: fast to make), with the key usages strict verifiers insist on."""
    key, cert = d / f"{name}.key", d / f"{name}.pem"
    openssl("req", "-x509", "-newkey", "ec", "-pkeyopt", "ec_paramgen_curve:P-256", "-nodes", "-days", "2",
            "-subj", f"/CN=clockfabric test {name}", "-keyout", str(key), "-out", str(cert),
            "-addext", "basicConstraints=critical,CA:TRUE", "-addext", "keyUsage=critical,keyCertSign,cRLSign",
            "-addext", "subjectKeyIdentifier=hash", cwd=d)
    return cert, key


def trusting(ca: Path) -> ssl.SSLContext:
    """For the test's own reads (httpx 0.28 deprecates verify=<path>; the Pusher still takes one)."""
    return ssl.create_default_context(cafile=str(ca))


def wait_healthy(proc: subprocess.Popen, url: str, ca: Path, log_file: Path, last: bool) -> bool:
    """Whether the controller answers; False if it lost its port to another process and may try
    another; any other exit, or no answer in 15 s, fails the test."""
    deadline = time.monotonic() + 15
    while True:
        if proc.poll() is not None:
            said = log_file.read_text()
            if not last and "address already in use" in said.lower():
                return False
            pytest.fail(f"the controller exited {proc.returncode}:\n{said}")
        try:
            if httpx.get(f"{url}/healthz", verify=trusting(ca), timeout=1.0).status_code == 200:
                return True
        except httpx.HTTPError:
            pass
        if time.monotonic() > deadline:
            proc.kill()
            pytest.fail(f"the controller did not answer on {url}:\n{log_file.read_text()}")
        time.sleep(0.1)


@pytest.fixture(scope="module")
def controller(tmp_path_factory):
    """The real controller, TLS on, on a free loopback port; stopped by its own Popen handle."""
    d = tmp_path_factory.mktemp("tls")
    run_cli("tls", "new", str(d / "pki"), "--name", "127.0.0.1")  # an IP SAN: clients match the IP, not the CN
    ca, cert, key = (d / "pki" / "ca.crt",), d / "pki" / "tls.crt", d / "pki" / "tls.key"
    assert oct(key.stat().st_mode & 0o777) == oct((d / "pki" / "ca.key").stat().st_mode & 0o777) == "0o600"
    other_ca = make_ca(d, "other-ca")
    token_file = d / "fleet.token"
    token_file.write_text(TOKEN + "\n")
    token_file.chmod(0o600)
    topo_file = d / "fleet.yaml"
    save(leafspine(2, 1, 1), topo_file)  # h1 is enrolled, not seen yet
    log_file = d / "controller.log"
    for attempt in range(3):  # a free port may be taken by another process before the controller binds it
        port = controller_port()
        argv = [sys.executable, "-m", "clockfabric.cli", "controller", "--listen", f"127.0.0.1:{port}",
                "--db", str(d / "controller.db"), "--token-file", str(token_file), "--topology", str(topo_file),
                "--tls-cert", str(cert), "--tls-key", str(key)]
        url = f"https://127.0.0.1:{port}"
        with open(log_file, "w") as log:
            proc = subprocess.Popen(argv, stdout=log, stderr=subprocess.STDOUT)
        if wait_healthy(proc, url, ca[0], log_file, last=attempt == 2):
            break
    try:
        yield {"url": url, "port": port, "ca": ca[0], "other_ca": other_ca[0]}
    finally:
        proc.terminate()
        try:
            proc.wait(10)
        except subprocess.TimeoutExpired:
            proc.kill()
            proc.wait(5)


def pusher(url: str, *, verify: str | bool, token: str = TOKEN) -> Pusher:
    """The agent's own pusher, driven by hand (push_once), not as a thread."""
    info = {"version": "test"}
    return Pusher(url, host_token(token, HOST), HOST, verify=verify,
                  snapshot=lambda: ([], [{"name": "up", "value": 1.0, "labels": {}}], info))


def host_state(c: dict, host: str = HOST) -> str:
    r = httpx.get(f"{c['url']}/api/v1/hosts", headers={"Authorization": f"Bearer {TOKEN}"},
                  verify=trusting(c["ca"]), timeout=5.0)
    assert r.status_code == 200, r.text
    return {h["host"]: h["state"] for h in r.json()["items"]}[host]


def test_an_agent_trusting_the_ca_pushes_over_tls(controller):
    """The way agents are told to run against an https controller: --ca-file, i.e. verify=CA."""
    assert host_state(controller) == "never seen"
    p = pusher(controller["url"], verify=str(controller["ca"]))
    assert p.push_once(), "a push to the TLS controller with its CA failed"
    assert p.counters["pushes"] == 1 and p.counters["push_failures"] == 0
    assert host_state(controller) == "ok"


def test_an_agent_reaching_the_controller_by_a_name_its_certificate_lacks_cannot_push(controller):
    """The certificate is for 127.0.0.1; localhost is the same server by another name."""
    p = pusher(f"https://localhost:{controller['port']}", verify=str(controller["ca"]))
    assert not p.push_once()
    assert p.counters["push_failures"] == 1


@pytest.mark.parametrize("trust", ["system CAs", "another CA"])
def test_an_agent_not_trusting_the_ca_cannot_push(controller, trust):
    """The certificate must be checked, not merely present: an unknown issuer is refused."""
    p = pusher(controller["url"], verify=True if trust == "system CAs" else str(controller["other_ca"]))
    assert not p.push_once()
    assert not p.push_once()
    assert p.counters["pushes"] == 0 and p.counters["push_failures"] == 2


def test_plain_http_to_the_tls_port_fails(controller):
    """No downgrade: the TLS listener does not also answer cleartext HTTP."""
    p = pusher(f"http://127.0.0.1:{controller['port']}", verify=str(controller["ca"]))
    assert not p.push_once()
    assert p.counters["push_failures"] == 1
    with pytest.raises(httpx.HTTPError):
        httpx.get(f"http://127.0.0.1:{controller['port']}/healthz", timeout=5.0)


def test_tls_does_not_replace_the_token(controller):
    """TLS protects the token; it does not stand in for it: a trusted client with a wrong token is refused."""
    p = pusher(controller["url"], verify=str(controller["ca"]), token="wrong-token-" + "y" * 20)
    assert not p.push_once()
    assert p.counters["push_failures"] == 1
    r = httpx.get(f"{controller['url']}/api/v1/fleet", verify=trusting(controller["ca"]), timeout=5.0)
    assert r.status_code == 401


@pytest.mark.parametrize("given", ["--tls-cert", "--tls-key"])
def test_half_a_tls_configuration_is_refused_in_one_line(cli, tmp_path, given):
    """A cert without its key (or the reverse) must stop the controller with a clear error, not a
    traceback, and not fall back to cleartext."""
    token_file = tmp_path / "fleet.token"
    token_file.write_text(TOKEN + "\n")
    pem = tmp_path / "some.pem"
    pem.write_text("not used\n")
    proc = cli("controller", "--listen", f"127.0.0.1:{controller_port()}", "--db", str(tmp_path / "c.db"),
               "--token-file", str(token_file), given, str(pem), check=False)
    assert proc.returncode != 0
    assert "Traceback" not in proc.stderr + proc.stdout
    assert proc.stderr.strip() == "error: TLS needs both --tls-cert and --tls-key", proc.stderr
    assert not (tmp_path / "c.db").exists()  # refused before anything was opened


def test_a_certificate_that_does_not_load_is_refused_in_one_line(cli, tmp_path, controller):
    token_file = tmp_path / "fleet.token"
    token_file.write_text(TOKEN + "\n")
    junk = tmp_path / "junk.pem"
    junk.write_text("not a certificate\n")
    for cert, key in ((tmp_path / "missing.pem", junk), (junk, junk)):
        proc = cli("controller", "--listen", f"127.0.0.1:{controller_port()}", "--db", str(tmp_path / "c.db"),
                   "--token-file", str(token_file), "--tls-cert", str(cert), "--tls-key", str(key), check=False)
        assert proc.returncode != 0 and "Traceback" not in proc.stderr + proc.stdout
        (line,) = proc.stderr.strip().splitlines()
        assert line.startswith(f"error: cannot load --tls-cert {cert}") and "PEM" in line, line


def test_an_unreadable_ca_file_is_one_clear_error(tmp_path):
    with pytest.raises(ClockfabricError, match="cannot read the CA file .*missing.pem"):
        pusher("https://127.0.0.1:1", verify=str(tmp_path / "missing.pem"))
