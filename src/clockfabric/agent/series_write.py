"""Agent -> series engine: each push's samples, straight to the engine's gate (vmauth) with the
host's own credential, in serieswire's lines. The controller's Python never carries them.

The controller names the gate's port in its answer to a push; the gate is at the address the
agent reaches the controller at. A failed write is counted and logged, never retried: samples are
the latest summaries, and the next push's replace them.
"""

from __future__ import annotations

import logging
import time
from urllib.parse import urlsplit

from clockfabric import serieswire
from clockfabric.agent.http_post import Poster, PostFailed

log = logging.getLogger(__name__)
IMPORT_PATH = "/api/v1/import/prometheus"


def gate_url(controller_url: str, port: int) -> str:
    """The gate's import URL beside the controller at `controller_url`."""
    parts = urlsplit(controller_url)
    host = parts.hostname or "127.0.0.1"
    host = f"[{host}]" if ":" in host else host
    return f"{parts.scheme}://{host}:{port}{IMPORT_PATH}"


class SeriesWriter:
    def __init__(self, client: Poster) -> None:
        """`client`: the pusher's, which carries the host's credential."""
        self.client = client
        self.counters = {"series_writes": 0, "series_write_failures": 0, "samples_written": 0}
        self._last_error = ""

    def write(self, url: str, samples: list[dict], now_ns: int | None = None) -> bool:
        lines = serieswire.body(samples, (time.time_ns() if now_ns is None else now_ns) // 1_000_000)
        if not lines:
            return True
        try:
            r = self.client.post(url, lines, content_type="text/plain")
            why = "" if r.status_code in (200, 204) else f"HTTP {r.status_code}: {self.client.scrub(r.text)[:200]}"
        except PostFailed as e:
            why = str(e)
        if why:
            self.counters["series_write_failures"] += 1
            if why != self._last_error:  # once per reason, not once per push
                log.warning("samples to the series engine at %s failed: %s", url, why)
            self._last_error = why
            return False
        self._last_error = ""
        self.counters["series_writes"] += 1
        self.counters["samples_written"] += lines.count(b"\n")
        return True
