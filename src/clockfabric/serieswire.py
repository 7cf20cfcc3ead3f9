"""A sample as the time-series engine takes it: one line of the Prometheus text format
(VictoriaMetrics' /api/v1/import/prometheus), `clockfabric_NAME{label="v",...} value ms`.

Shared by the agent (which writes) and the controller (which reads the names back). The `host`
label is never written by a host: the engine's proxy pins it to the host whose credential made the
request, so a label the body carries under that name is dropped here and would be overridden there.

A probe path's delays are held as an agent's `/metrics` serves them, so that the shipped rules and
dashboards read what the agents wrote, with no second copy: the sample
`owd_p50_ns{src, dst, path}`, as the product's code names it (written by the host `src`), is
`clockfabric_owd_p50_seconds{peer=dst, path, direction="out"}` in the engine. `line` writes it so,
and `served_match` and `from_engine` read it back.
"""

from __future__ import annotations

import functools
import math
import re

PREFIX = "clockfabric_"
HOST = "host"
_BAD = re.compile(r"[^a-zA-Z0-9_]")
SERIES_CACHED = 4096  # series kept built: labels are bounded, and a host writes a few hundred series


SERVED = {f"owd_{stat}_ns": f"{PREFIX}owd_{stat}_seconds" for stat in ("min", "p50", "p99", "floor")}
_SAMPLE_OF = {metric: name for name, metric in SERVED.items()}
_SECOND_NS = 1e9
OUT = {"direction": "out"}


def series_name(name: str) -> str:
    """The engine's metric name for a sample name ("rx_bytes" -> "clockfabric_rx_bytes"; a
    probe path's delay, "owd_p99_ns", under its /metrics name, "clockfabric_owd_p99_seconds")."""
    return SERVED.get(name) or PREFIX + _BAD.sub("_", name)


def sample_name(metric: str) -> str:
    """Back from the engine's name to the sample's."""
    return _SAMPLE_OF.get(metric) or (metric[len(PREFIX):] if metric.startswith(PREFIX) else metric)


def served_match(name: str, match: dict[str, str]) -> dict[str, str]:
    """The engine's labels for a selector's `match` on a sample `name` (the delays': `src` is the
    host, `dst` the peer, and only the probes' own direction)."""
    if name not in SERVED:
        return match
    renamed = {HOST if k == "src" else "peer" if k == "dst" else k: v for k, v in match.items()}
    return {**renamed, **OUT}


def from_engine(name: str, host: str, labels: dict[str, str]) -> tuple[dict[str, str], float]:
    """A series of sample `name` as the engine holds it, back: the sample's labels (sorted by
    name, as the engine's are), and what each of its values is multiplied by."""
    if name not in SERVED:
        return labels, 1.0
    return {"dst": labels.get("peer", ""), "path": labels.get("path", ""), "src": host}, _SECOND_NS


def _label_name(key: str) -> str:
    key = _BAD.sub("_", key)
    return "_" + key if key[:1].isdigit() else key


def _escape(value: str) -> str:
    return value.replace("\\", "\\\\").replace('"', '\\"').replace("\n", "\\n")


def line(name: str, value: float, labels: dict[str, str], t_ms: int | None, host: str | None = None) -> str:
    """One sample's line; labels with an empty value are left out (the engine drops them anyway).
    `t_ms` None: stamped by the engine as it takes it. `host`: written as the host label, by a
    writer the engine trusts (its own import, not the gate)."""
    if name in SERVED:  # seconds: a whole number of ns over 1e9 is the shortest decimal, as stated
        value = value / _SECOND_NS
        labels = {"peer": labels.get("dst", ""), "path": labels.get("path", ""), **OUT}
    # keyed by the values' text: 1, 1.0 and True are one key to a cache, three labels to the engine
    series = _series(name, tuple((k, str(v)) for k, v in labels.items()), host)
    return f"{series} {float(value)!r}" if t_ms is None else f"{series} {float(value)!r} {t_ms}"


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
