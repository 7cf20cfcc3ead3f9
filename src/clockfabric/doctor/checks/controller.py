"""The controller: reachable from here, taking this host's own credential, serving this fleet.
Asked with GET /api/v1/whoami: nothing is pushed."""

from __future__ import annotations

import ssl
import urllib.parse

from clockfabric.audit.model import Verdict
from clockfabric.auth.credential import credential_host
from clockfabric.controller.token import read_token
from clockfabric.doctor.base import CHECKS, Outcome, Setup
from clockfabric.errors import ClockfabricError

TIMEOUT_S = 5.0


@CHECKS.register("controller", help="each controller URL reachable, taking this host's credential, "
                                    "serving the same fleet")
def controller(setup: Setup) -> list[Outcome]:
    cfg = setup.config
    if not cfg.controller:
        return [Outcome("controller", Verdict.SKIP, "no --controller: the agent pushes nowhere")]
    try:
        token = read_token(setup.token_file)
    except ClockfabricError as e:
        return [Outcome("controller", Verdict.SKIP, f"no credential to ask with ({e})")]
    if credential_host(token) is None:
        return [Outcome("controller", Verdict.SKIP, "no host credential to ask with (see `credential`)")]
    try:
        verify: ssl.SSLContext | bool = ssl.create_default_context(cafile=cfg.ca_file) if cfg.ca_file else True
    except OSError as e:
        return [Outcome("controller", Verdict.FAIL, f"cannot read --ca-file {cfg.ca_file}: {e.strerror or e}",
                        "give the PEM file of the CA that signed the controller's certificate")]
    return [_ask(url.strip(), token, verify, setup) for url in cfg.controller.split(",")]


def _ask(url: str, token: str, verify: ssl.SSLContext | bool, setup: Setup) -> Outcome:
    import httpx  # here: a host without a controller never loads it

    cfg = setup.config
    try:
        r = httpx.get(f"{url.rstrip('/')}/api/v1/whoami", headers={"Authorization": f"Bearer {token}"},
                      timeout=TIMEOUT_S, verify=verify)
    except httpx.HTTPError as e:
        return _unreachable(url, e)
    if r.status_code in (401, 403):
        return Outcome("controller", Verdict.FAIL, f"{url} refuses this host's credential: {_detail(r)}",
                       f"make it again from the controller's fleet token: clockfabric token host {cfg.host} "
                       "--token-file FLEET_TOKEN -o FILE")
    if r.status_code == 404:
        return Outcome("controller", Verdict.WARN, f"{url} answered 404 for /api/v1/whoami: an older controller, "
                                                   "or not a clockfabric controller", "upgrade the controller")
    if r.status_code != 200:
        return Outcome("controller", Verdict.FAIL, f"{url} answered HTTP {r.status_code}: {_detail(r)}",
                       "look at the controller's log")
    who = r.json()
    fleet, served = cfg.topology.name, who.get("fleet")
    if served is not None and served != fleet:
        return Outcome("controller", Verdict.FAIL, f"{url} serves fleet {served!r}; the fleet file here is {fleet!r}",
                       "give the agent the fleet file the controller runs with (or --controller of this fleet's)")
    if not who.get("enrolled") and who.get("pending") == "pending":
        return Outcome("controller", Verdict.WARN, f"{url} takes the credential and holds host {who.get('host')!r} "
                                                   "for an operator's approval: its pushes wait until then",
                       f"approve it: clockfabric hosts approve {who.get('host')} --controller {url} "
                       "--token-file FLEET_TOKEN")
    if not who.get("enrolled") and who.get("pending") == "rejected":
        return Outcome("controller", Verdict.FAIL, f"{url} refuses host {who.get('host')!r}: an operator rejected it",
                       f"if it belongs to the fleet: clockfabric hosts approve {who.get('host')} --controller {url} "
                       "--token-file FLEET_TOKEN")
    if not who.get("enrolled"):
        return Outcome("controller", Verdict.FAIL, f"{url} takes the credential but does not know host "
                                                   f"{who.get('host')!r}: its pushes would be refused",
                       "add the host to the controller's fleet topology, or run it with --enroll pending "
                       "(and approve the host) or --enroll-unknown")
    return Outcome("controller", Verdict.PASS, f"{url} takes host {who.get('host')}'s credential"
                                               + (f", fleet {served}" if served else ""))


def _unreachable(url: str, e: Exception) -> Outcome:
    """The one line for a controller not reached: a certificate for another name, one no trusted CA
    signed, or no answer at all."""
    said = str(e) or type(e).__name__
    name = urllib.parse.urlsplit(url).hostname
    if "mismatch" in said.lower():
        return Outcome("controller", Verdict.FAIL, f"{url}: the controller's certificate is for another name than "
                                                   f"{name} ({said})",
                       f"reissue the certificate with {name} in its subjectAltName, or give --controller by a "
                       "name the certificate has")
    if "CERTIFICATE" in said.upper():
        return Outcome("controller", Verdict.FAIL, f"{url}: the controller's certificate is not trusted ({said})",
                       "give --ca-file with the CA that signed the controller's certificate")
    return Outcome("controller", Verdict.FAIL, f"{url} not reachable: {said}",
                   "check the URL, that the controller runs, and that a firewall lets this host reach its port")


def _detail(r) -> str:
    try:
        return str(r.json().get("detail", ""))[:200]
    except ValueError:
        return r.text[:200]
