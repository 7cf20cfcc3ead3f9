"""A host's push credential, derived from the fleet token: HMAC-SHA256(fleet token, "host:" + name).

The controller checks one from the fleet token alone (no table of hosts' secrets); a host holding
its own can push as itself only, and the fleet token stays with the controller and its operators.
The credential names its host in the clear ("NAME:MAC"), so the controller knows whom it claims
to be before a push's body is read.

Revoking a host (`clockfabric token revoke`) raises the epoch the controller takes from it: a
credential of epoch N > 0 is made from "host:NAME#N" and reads "NAME#N:MAC", so the host's old
credential is refused and every other host's works on."""

from __future__ import annotations

import hashlib
import hmac


def host_token(fleet_token: str, host: str, epoch: int = 0) -> str:
    """Host (or switch) `host`'s push credential, of the epoch its revocations have brought it to."""
    name = f"{host}#{epoch}" if epoch else host
    mac = hmac.new(fleet_token.encode(), f"host:{name}".encode(), hashlib.sha256).hexdigest()
    return f"{name}:{mac}"


def credential_identity(given: str) -> tuple[str, int] | None:
    """The host and epoch a credential names, by its form alone (`NAME[#N]:` and 64 hex digits);
    None for anything else, such as the fleet token. Only the controller, holding the fleet token,
    can say it is genuine."""
    name, _, mac = given.rpartition(":")
    if not name or len(mac) != 64 or not all(c in "0123456789abcdef" for c in mac):
        return None
    host, sep, epoch = name.partition("#")
    if not host or (sep and not (epoch.isdigit() and epoch.isascii() and not epoch.startswith("0"))):
        return None
    return host, int(epoch) if sep else 0


def token_identity(fleet_token: str, given: str) -> tuple[str, int] | None:
    """The host and epoch of a genuine push credential (compared in constant time); else None."""
    found = credential_identity(given)
    if found is None or len(given) > 1024:
        return None
    return found if hmac.compare_digest(host_token(fleet_token, *found).encode(), given.encode()) else None


def token_host(fleet_token: str, given: str) -> str | None:
    """The host a genuine push credential is for, whatever its epoch; else None."""
    found = token_identity(fleet_token, given)
    return found[0] if found else None


def credential_host(given: str) -> str | None:
    """The host a credential names, by its form alone; see credential_identity."""
    found = credential_identity(given)
    return found[0] if found else None


def not_own(given: str, host: str, source: str) -> str | None:
    """Why the credential in `source` cannot push as `host` (the fleet token, another host's), or None:
    what the agent refuses at start and `clockfabric doctor` reports."""
    named = credential_host(given)
    if named is None:
        return f"{source} holds a fleet token, not a host credential: the controller refuses its pushes"
    if named != host:
        return f"{source} is host {named!r}'s credential, not {host!r}'s"
    return None


def make_own(host: str, path: object, epoch: int = 0) -> str:
    """The command that writes `host`'s credential to `path`."""
    return f"clockfabric token host {host} {f'--epoch {epoch} ' if epoch else ''}--token-file FLEET_TOKEN -o {path}"
