"""A real victoria-metrics (and its vmauth gate) on loopback for tests: it starts in well under a
second, so a module or the session shares one.

What it takes is searchable after its buffers flush: about a second for a series it knows, about
ten for a new series (1.79's index). `until(check, engine_url)` asks it to flush (/internal/force_flush)
between checks, so a test waits about a second, not ten."""

from __future__ import annotations

import time
from collections.abc import Callable, Iterable, Iterator
from contextlib import contextmanager
from pathlib import Path

import httpx

from clockfabric import serieswire
from clockfabric.auth.credential import host_token
from clockfabric.controller.series.gate import IMPORT_PATH
from clockfabric.controller.series.path import SeriesPath

FLEET_TOKEN = "t" * 32  # the unit tests' fleet token


def until(check: Callable[[], bool], engine_url: str | None = None, timeout_s: float = 10.0) -> None:
    deadline = time.monotonic() + timeout_s
    while not check():
        if time.monotonic() > deadline:
            raise AssertionError(f"not true within {timeout_s} s: {check}")
        if engine_url:
            httpx.get(engine_url + "/internal/force_flush", timeout=5.0)
        time.sleep(0.05)


@contextmanager
def series_path(tmp_path: Path, hosts: Iterable[str] = (), token: str = FLEET_TOKEN) -> Iterator[SeriesPath]:
    """The controller's series path with an engine of its own (a test's series stay its own)."""
    path = SeriesPath(data_dir=tmp_path / "series", fleet_token=token)
    path.start(hosts)
    try:
        yield path
    finally:
        path.stop()


def write(path: SeriesPath, host: str, samples: list[dict], t_ns: int | None = None, *, wait: bool = True) -> None:
    """`samples` (dicts: name, value, labels) as `host`'s agent writes them, through the gate;
    `wait`: returns once the engine answers them to a reader (a second or so: a test writing
    many waits on its last write only, as the engine makes what it took searchable in order)."""
    t_ns = time.time_ns() if t_ns is None else t_ns
    path.allow([host])
    lines = serieswire.body(samples, t_ns // 1_000_000)
    headers = {"Authorization": f"Bearer {host_token(path.fleet_token, host)}"}
    until(lambda: httpx.post(path.write_url + IMPORT_PATH, content=lines, headers=headers).status_code == 204)
    reader = path.series
    assert reader is not None
    if not wait:
        return

    newest: dict[tuple, int] = {}  # each series written: the newest time it must show
    for s in samples:
        labels = tuple(sorted((k, v) for k, v in (s.get("labels") or {}).items() if v != "" and k != "host"))
        at = (s.get("t_ns") or t_ns) // 1_000_000 * 1_000_000
        newest[(s["name"], labels)] = max(at, newest.get((s["name"], labels), 0))

    def there() -> bool:
        now = max(time.time_ns(), t_ns + 1)
        for (name, labels), at in newest.items():
            if not any(tuple(sorted(r.labels.items())) == labels and r.t_ns >= at
                       for r in reader.latest(name, hosts=[host], now_ns=now)):
                return False
        return True

    until(there, path.url)


def write_pushed(client, host: str, samples, t_ns: int | None = None, *, wait: bool = True) -> None:
    """What an agent's push writes to the engine: `samples` through the gate of the controller
    behind `client` (a TestClient of create_app), at `t_ns` (now if None)."""
    samples = list(samples)
    if samples:
        series = client.app.state.operations.fleet.series
        write(series, host, samples, t_ns, wait=wait)
