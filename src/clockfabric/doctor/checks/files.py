"""The fleet key and the push credential: readable by the agent's user, well formed, and the right kind."""

from __future__ import annotations

from pathlib import Path

from clockfabric.audit.model import Verdict
from clockfabric.auth import keys
from clockfabric.auth.credential import make_own, not_own
from clockfabric.controller.token import read_token
from clockfabric.doctor.base import CHECKS, Outcome, Setup
from clockfabric.doctor.readable import describe, readable
from clockfabric.errors import ClockfabricError


def _unreadable(check: str, path: Path, setup: Setup) -> Outcome | None:
    if not path.exists():
        made = "clockfabric key new FILE" if check == "key" else make_own(setup.config.host, path)
        return Outcome(check, Verdict.FAIL, f"{path} does not exist", f"give the file's path, or make it: {made}")
    why = readable(path, setup.user)
    if why is None:
        return None
    who = f"user {setup.user}" if setup.user else "this user"
    fix = (f"chown {setup.user} {path}, or give it to the unit as a credential (LoadCredential=)" if setup.user
           else f"run doctor as the agent's user (--user NAME), or check the path ({describe(path)})")
    return Outcome(check, Verdict.FAIL, f"{path} is not readable by {who}: {why} ({describe(path)})", fix)


@CHECKS.register("key", help="the fleet key file: readable, well formed, not the documentation's example")
def key(setup: Setup) -> list[Outcome]:
    path = setup.config.key_file
    if path is None:
        if setup.config.insecure:
            return [Outcome("key", Verdict.WARN, "no fleet key (--insecure): any host on the fabric can forge probes",
                            "make one with `clockfabric key new FILE`, copy it to every host, give --key-file")]
        return [Outcome("key", Verdict.FAIL, "no --key-file: the agent refuses to start without one",
                        "give --key-file FILE (made once with `clockfabric key new FILE`, the same on every host)")]
    if refused := _unreadable("key", path, setup):
        return [refused]
    try:
        ring = keys.Keyring.load(path)
    except ClockfabricError as e:
        return [Outcome("key", Verdict.FAIL, str(e), "make one with `clockfabric key new FILE` and copy it to every "
                                                     "host (keys are `id:hexkey` lines)")]
    return [Outcome("key", Verdict.PASS, f"{path}: key ids {', '.join(map(str, ring.ids()))}, "
                                         f"signing with {ring.signer()[0]}")]


@CHECKS.register("credential", help="the push credential: readable, this host's own, not the fleet token")
def credential(setup: Setup) -> list[Outcome]:
    cfg, path = setup.config, setup.token_file
    if not cfg.controller:
        return [Outcome("credential", Verdict.SKIP, "no --controller: the agent pushes nowhere")]
    if path is None:
        return [Outcome("credential", Verdict.FAIL, "no --token-file for --controller",
                        f"give --token-file FILE with this host's credential (`clockfabric token host {cfg.host}`)")]
    if refused := _unreadable("credential", path, setup):
        return [refused]
    fix = make_own(cfg.host, path)
    try:
        token = read_token(path)
    except ClockfabricError as e:
        return [Outcome("credential", Verdict.FAIL, str(e), fix)]
    if problem := not_own(token, cfg.host, str(path)):
        return [Outcome("credential", Verdict.FAIL, problem, fix)]
    return [Outcome("credential", Verdict.PASS, f"{path}: host {cfg.host}'s credential")]
