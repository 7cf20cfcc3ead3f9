"""Talk to a controller's API, and find the one a lab keeps (`monitor --keep`)."""

from __future__ import annotations

import json
import urllib.parse
from pathlib import Path
from typing import Any

import httpx

from clockfabric import wirejson
from clockfabric.controller.token import read_token
from clockfabric.errors import ClockfabricError
from clockfabric.lab.state import Lab


def record_path(lab: Lab) -> Path:
    """Where a lab's running controller is recorded (url and token file)."""
    return lab.dir / "controller.json"


def locate(lab: Lab | None, url: str | None, token_file: Path | None) -> tuple[str, Path]:
    """The controller given, or else the lab's recorded one."""
    if url and token_file:
        return url, token_file
    if lab is None or not record_path(lab).exists():
        raise ClockfabricError("no controller known: give --controller URL --token-file FILE, "
                               "or start one on the lab with `clockfabric monitor --lab NAME --keep`")
    rec = json.loads(record_path(lab).read_text())
    return url or rec["url"], token_file or Path(rec["token_file"])


def api(lab: Lab | None, url: str, token_file: Path, path: str, *, body: dict | None = None, **params) -> dict:
    """GET from the controller (POST, with a body); a controller listening on a lab host's address
    is reached from inside that host."""
    query = {k: v for k, v in params.items() if v is not None}
    full = f"{url.rstrip('/')}{path}" + (f"?{urllib.parse.urlencode(query)}" if query else "")
    headers = {"Authorization": f"Bearer {read_token(token_file)}"}

    def call() -> dict:
        try:
            if body is None:
                r = httpx.get(full, headers=headers, timeout=5.0)
            else:
                r = httpx.post(full, json=body, headers=headers, timeout=10.0)
        except httpx.HTTPError as e:
            raise ClockfabricError(f"controller {url}: {e}; is it running?") from None
        if r.status_code not in (200, 201):
            raise ClockfabricError(f"controller {url} answered HTTP {r.status_code}: {r.text[:200]}")
        try:
            return wirejson.loads(r.content)
        except ValueError as e:
            raise ClockfabricError(f"controller {url} answered what is not JSON: {e}") from None

    address = urllib.parse.urlsplit(url).hostname
    inside = [h for h, node in lab.topology.hosts.items() if str(node.address) == address] if lab else []
    if lab is None or not inside:
        return call()
    from clockfabric.lab import netns  # pyroute2 is slow to import; only a lab-hosted controller needs it

    with netns.entered(lab.ns(inside[0])):
        return call()


def fetch_all(lab: Lab | None, url: str, token_file: Path, path: str, *, cursor: str, start: int | str,
              most: int | None = None, **params: Any) -> list[dict]:
    """Every item of a paged listing (`{"items": [...], "next": cursor or null}`), page after page,
    `most` at the most; `cursor` names the query parameter that takes the next page's start."""
    rows: list[dict] = []
    after = start
    while most is None or len(rows) < most:
        limit = 1000 if most is None else min(1000, most - len(rows))
        query: dict[str, Any] = {**params, cursor: after, "limit": limit}
        page = api(lab, url, token_file, path, **query)
        rows += page["items"]
        if page["next"] is None:
            break
        after = page["next"]
    return rows
