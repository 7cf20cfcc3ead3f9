"""A host's push credential, derived from the fleet token: HMAC-SHA256(fleet token, "host:" + name).

The controller checks one from the fleet token alone (no table of hosts' secrets); a host holding
its own can push as itself only, and the fleet token stays with the controller and its operators.
The credential names its host in the clear ("NAME:MAC"), so the controller knows whom it claims
to be before a push's body is read."""

from __future__ import annotations

import hashlib
import hmac


def host_token(fleet_token: str, host: str) -> str:
    """Host (or switch) `host`'s push credential."""
    mac = hmac.new(fleet_token.encode(), f"host:{host}".encode(), hashlib.sha256).hexdigest()
    return f"{host}:{mac}"


def token_host(fleet_token: str, given: str) -> str | None:
    """The host a push credential is for, if it is one (compared in constant time); else None."""
    host, _, mac = given.rpartition(":")
    if not host or len(mac) != 64:
        return None
    return host if hmac.compare_digest(host_token(fleet_token, host).encode(), given.encode()) else None


def credential_host(given: str) -> str | None:
    """The host a credential names, by its form alone (`NAME:` and 64 hex digits); None for anything
    else, such as the fleet token. Only the controller, holding the fleet token, can say it is genuine."""
    host, _, mac = given.rpartition(":")
    return host if host and len(mac) == 64 and all(c in "0123456789abcdef" for c in mac) else None


def not_own(given: str, host: str, source: str) -> str | None:
    """Why the credential in `source` cannot push as `host` (the fleet token, another host's), or None:
    what the agent refuses at start and `clockfabric doctor` reports."""
    named = credential_host(given)
    if named is None:
        return f"{source} holds a fleet token, not a host credential: the controller refuses its pushes"
    if named != host:
        return f"{source} is host {named!r}'s credential, not {host!r}'s"
    return None


def make_own(host: str, path: object) -> str:
    """The command that writes `host`'s credential to `path`."""
    return f"clockfabric token host {host} --token-file FLEET_TOKEN -o {path}"
