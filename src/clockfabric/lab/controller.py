"""The lab's kept controller (`monitor --keep`): where it is recorded, and how to reach one
that listens on a lab host's address: its API client is handed a transport that enters the
host's namespace for each request."""

from __future__ import annotations

import json
import urllib.parse
from pathlib import Path

import httpx

from clockfabric.controller.client import Controller
from clockfabric.errors import ClockfabricError
from clockfabric.lab.state import Lab


def record_path(lab: Lab) -> Path:
    """Where a lab's kept controller (`monitor --keep`) is recorded: its url and token file."""
    return lab.dir / "controller.json"


def lab_controller(lab: Lab | None, url: str | None = None, token_file: Path | None = None) -> Controller:
    """The controller given, or else the lab's kept one; reached from inside the lab host it listens on."""
    if not (url and token_file):
        if lab is None or not record_path(lab).exists():
            raise ClockfabricError("no controller known: give --controller URL --token-file FILE, "
                                   "or start one on the lab with `clockfabric monitor --lab NAME --keep`")
        rec = json.loads(record_path(lab).read_text())
        url, token_file = url or rec["url"], token_file or Path(rec["token_file"])
    address = urllib.parse.urlsplit(url).hostname
    inside = [h for h, node in lab.topology.hosts.items() if str(node.address) == address] if lab else []
    return Controller.from_file(url, token_file, InNamespace(lab.ns(inside[0])) if lab and inside else None)


class InNamespace(httpx.BaseTransport):
    """Each request connects from inside a namespace (the socket stays bound to it)."""

    def __init__(self, ns: str):
        self.ns = ns

    def handle_request(self, request: httpx.Request) -> httpx.Response:
        from clockfabric.lab import netns  # pyroute2 is slow to import; only a lab-hosted controller needs it

        with netns.entered(self.ns), httpx.HTTPTransport() as transport:
            response = transport.handle_request(request)
            content = response.read()
            return httpx.Response(response.status_code, headers=response.headers, content=content,
                                  request=request)
