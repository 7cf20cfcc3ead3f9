"""The fleet token: what operators and tools present to the controller (hosts push with their own
credential, derived from it: auth.credential). Its own small module, so agents read it without
importing the web server."""

from __future__ import annotations

import secrets
from pathlib import Path

from clockfabric.errors import ClockfabricError


def read_token(path: Path | None, *, create: bool = False) -> str:
    """The fleet token from its file; with `create`, a new random one is written there (mode 600)."""
    if path is None:
        raise ClockfabricError("give --token-file FILE (the fleet token agents and tools present)")
    if create and not path.exists():
        path.parent.mkdir(parents=True, exist_ok=True)
        path.touch(mode=0o600)
        path.write_text(secrets.token_urlsafe(32) + "\n")
    try:
        token = path.read_text().strip()
    except OSError as e:
        raise ClockfabricError(f"cannot read the token file {path}: {e.strerror}") from None
    if len(token) < 16:
        raise ClockfabricError(f"the token in {path} is too short: use 16 characters or more")
    return token

