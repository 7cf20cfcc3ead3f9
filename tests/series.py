"""A real victoria-metrics (and its vmauth gate) on loopback for tests: it starts in well under a
second, so a module or the session shares one.

What it takes is searchable after its buffers flush: about a second for a series it knows, about
ten for a new series (1.79's index). `until(check, engine_url)` asks it to flush (/internal/force_flush)
between checks, so a test waits about a second, not ten."""

from __future__ import annotations

import time
from collections.abc import Callable

import httpx


def until(check: Callable[[], bool], engine_url: str | None = None, timeout_s: float = 10.0) -> None:
    deadline = time.monotonic() + timeout_s
    while not check():
        if time.monotonic() > deadline:
            raise AssertionError(f"not true within {timeout_s} s: {check}")
        if engine_url:
            httpx.get(engine_url + "/internal/force_flush", timeout=5.0)
        time.sleep(0.05)
