"""A sample as the time-series engine takes it: one line of the Prometheus text format
(VictoriaMetrics' /api/v1/import/prometheus), `clockfabric_NAME{label="v",...} value ms`.

Shared by the agent (which writes) and the controller (which reads the names back). The `host`
label is never written by a host: the engine's proxy pins it to the host whose credential made the
request, so a label the body carries under that name is dropped here and would be overridden there.
"""

from __future__ import annotations

import functools
import math
import re

PREFIX = "clockfabric_"
HOST = "host"
_BAD = re.compile(r"[^a-zA-Z0-9_]")
SERIES_CACHED = 4096  # series kept built: labels are bounded, and a host writes a few hundred series


def series_name(name: str) -> str:
    """The engine's metric name for a sample name ("owd_p99_ns" -> "clockfabric_owd_p99_ns")."""
    return PREFIX + _BAD.sub("_", name)


def sample_name(metric: str) -> str:
    """Back from the engine's name to the sample's."""
    return metric[len(PREFIX):] if metric.startswith(PREFIX) else metric


def _label_name(key: str) -> str:
    key = _BAD.sub("_", key)
    return "_" + key if key[:1].isdigit() else key


def _escape(value: str) -> str:
    return value.replace("\\", "\\\\").replace('"', '\\"').replace("\n", "\\n")


def line(name: str, value: float, labels: dict[str, str], t_ms: int, host: str | None = None) -> str:
    """One sample's line; labels with an empty value are left out (the engine drops them anyway).
    `host`: written as the host label, by a writer the engine trusts (its own import, not the gate)."""
    # keyed by the values' text: 1, 1.0 and True are one key to a cache, three labels to the engine
    return f"{_series(name, tuple((k, str(v)) for k, v in labels.items()), host)} {float(value)!r} {t_ms}"


@functools.lru_cache(maxsize=SERIES_CACHED)
def _series(name: str, labels: tuple[tuple[str, str], ...], host: str | None) -> str:
    """A series as its lines start, `clockfabric_NAME{label="v",...}`: an agent writes the same
    few hundred every second, and building one costs more than the rest of its line."""
    own = {HOST: host} if host is not None else {}
    pairs = ",".join(f'{_label_name(k)}="{_escape(v)}"' for k, v in sorted({**dict(labels), **own}.items())
                     if v != "" and (k != HOST or host is not None))
    return f"{series_name(name)}{{{pairs}}}"


def body(samples: list[dict], t_ms: int) -> bytes:
    """The lines of a push's samples (dicts with name, value, labels, and t_ns where one was taken
    at a time of its own), the others at `t_ms`; a value with no number to give (NaN, inf) is left out."""
    return "".join(line(s["name"], s["value"], s.get("labels") or {}, s["t_ns"] // 1_000_000 if s.get("t_ns") else t_ms)
                   + "\n" for s in samples if math.isfinite(s["value"])).encode()
