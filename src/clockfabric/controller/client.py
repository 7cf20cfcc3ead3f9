"""Talk to a controller's API from Python: its URL and the fleet token, nothing else.

Where the controller is not reachable from here as is (it listens inside a network namespace,
say), the caller hands in an httpx transport that reaches it.
"""

from __future__ import annotations

import urllib.parse
from dataclasses import dataclass
from pathlib import Path
from typing import Any

import httpx

from clockfabric import wirejson
from clockfabric.controller.token import read_token
from clockfabric.errors import ClockfabricError


@dataclass(frozen=True)
class Controller:
    url: str
    token: str
    transport: httpx.BaseTransport | None = None  # how requests reach it; None: plainly, from here

    @classmethod
    def from_file(cls, url: str, token_file: Path, transport: httpx.BaseTransport | None = None) -> Controller:
        return cls(url, read_token(token_file), transport)


def locate(url: str | None, token_file: Path | None) -> Controller:
    """The controller given on the command line."""
    if not (url and token_file):
        raise ClockfabricError("no controller known: give --controller URL --token-file FILE")
    return Controller.from_file(url, token_file)


def api(ctl: Controller, path: str, *, body: dict | None = None, **params: Any) -> dict:
    """GET from the controller (POST, with a body); one ClockfabricError line on any failure."""
    query = {k: v for k, v in params.items() if v is not None}
    full = f"{ctl.url.rstrip('/')}{path}" + (f"?{urllib.parse.urlencode(query)}" if query else "")
    headers = {"Authorization": f"Bearer {ctl.token}"}
    try:
        with httpx.Client(transport=ctl.transport, timeout=5.0 if body is None else 10.0) as client:
            r = client.get(full, headers=headers) if body is None else client.post(full, json=body, headers=headers)
    except httpx.HTTPError as e:
        raise ClockfabricError(f"controller {ctl.url}: {e}; is it running?") from None
    if r.status_code not in (200, 201):
        raise ClockfabricError(f"controller {ctl.url} answered HTTP {r.status_code}: {r.text[:200]}")
    try:
        return wirejson.loads(r.content)
    except ValueError as e:
        raise ClockfabricError(f"controller {ctl.url} answered what is not JSON: {e}") from None


def fetch_all(ctl: Controller, path: str, *, cursor: str, start: int | str, most: int | None = None,
              **params: Any) -> list[dict]:
    """Every item of a paged listing (`{"items": [...], "next": cursor or null}`), page after page,
    `most` at the most; `cursor` names the query parameter that takes the next page's start."""
    rows: list[dict] = []
    after = start
    while most is None or len(rows) < most:
        limit = 1000 if most is None else min(1000, most - len(rows))
        query: dict[str, Any] = {**params, cursor: after, "limit": limit}
        page = api(ctl, path, **query)
        rows += page["items"]
        if page["next"] is None:
            break
        after = page["next"]
    return rows
