"""`Series`: the controller's one reader of samples, over the engine's PromQL query API.

"Latest" is an instant query of `last_over_time` (the value) and `tlast_over_time` (when it was
written) over a look-back window; a range is `query_range`; every sample as written, the engine's
export (what the detectors read each tick). Every query runs within a time budget,
passed to the engine as its own `timeout` and held here as the HTTP timeout: past it the query is
refused with SeriesError, which says so in one line, and no route waits longer.
"""

from __future__ import annotations

import json
import math
import re
import time
from collections.abc import Callable, Iterator
from concurrent.futures import ThreadPoolExecutor
from typing import NamedTuple

import httpx

from clockfabric.controller.series.promql import (
    SLICE_NAMES_BYTES,
    alternations,
    hosts_term,
    quote,
    selector,
    slice_end,
    terms,
)
from clockfabric.controller.series.sample import Sample
from clockfabric.serieswire import HOST, SERVED, from_engine, sample_name, series_name

BUDGET_S = 2.0
LOOKBACK_S = 3600  # "latest" with no `since`: a series silent for an hour is gone
# ... and of a series an agent writes at every push (a second): a probe path's readings (`delays`,
# `path_readings`), a link end's state (`latest_values`). One silent this long is no longer
# measured (its host down, the path gone). The engine reads every sample of a series inside the
# window, so an hour of a second's samples costs a fleet-wide read 1.2-1.6x what five minutes'
# do (docs/notes/2026-12-07-series-lookback.md)
PUSHED_LOOKBACK_S = 300
RANGE_POINTS = 1000  # query_range's steps at most, so a wide window does not ask for millions
FLUSH_EVERY_S = 1.0  # `fresh()`'s flushes at most this often, however many ask
# a fleet-wide read of delays is made in slices of hosts of about this many series: parsing one
# holds the interpreter about 0.1 s (pushes and routes wait that long), not the whole read's seconds
SLICE_SERIES = 40_000
FIRST_SLICE_HOSTS = 256


class Exported(NamedTuple):
    """One series of an export: its samples' times (ms) and values, oldest first."""

    name: str
    host: str
    labels: dict[str, str]  # as the engine writes them: sorted by name
    timestamps_ms: list[int]
    values: list[float]
    key: str  # the series as the engine wrote it, one text a series: what `export(fed=...)` is keyed by


_VALUES, _TIMES = ',"values":[', '"timestamps":['


def _newest_ms(line: str) -> tuple[str, int] | None:
    """An export line's series (its metric's JSON text, as the engine writes it, labels in one
    order) and its newest sample's time, read without parsing the line: None where the line is
    not in the shape the engine writes (then it is parsed whole). A label's value is a JSON
    string, inside which a quote is escaped, so the first `,"values":[` ends the metric."""
    cut, times = line.find(_VALUES), line.rfind(_TIMES)
    end = line.rfind("]")
    if cut < 0 or times < cut or end < times:
        return None
    last = line[max(line.rfind(",", times, end), times + len(_TIMES) - 1) + 1:end]
    return (line[:cut], int(last)) if last.isdigit() else None


class SeriesError(Exception):
    """The engine did not answer a query (down, past the budget, refused it): what and how to fix it."""


def _labels(name: str, metric: dict) -> tuple[str, dict[str, str], float]:
    """A result's host, its sample's labels, and what its values are multiplied by (serieswire)."""
    host = metric.get(HOST, "")
    return host, *from_engine(name, host, {k: v for k, v in metric.items() if k not in ("__name__", HOST)})


def _scaled(value: float, scale: float) -> float:
    """An engine's value as the sample's (seconds back to ns: to the picosecond, not a float's ulp off)."""
    return value if scale == 1.0 else round(value * scale, 3)


def _ns(t_s: float) -> int:
    """The engine's seconds (to the millisecond) as integer ns, exactly: not via a float's 1e9."""
    return round(t_s * 1000) * 1_000_000


def _key(metric: dict) -> tuple:
    """A series' identity in one result, to find it in the other: the engine writes a series'
    labels in one order (sorted by name), the same in both, so the items as they come suffice;
    last_over_time keeps the metric's name and tlast_over_time does not, so it is dropped here."""
    metric.pop("__name__", None)
    return tuple(metric.items())


def _joined(values: list[dict], times: list[dict]) -> Iterator[tuple[dict, float, float]]:
    """Each series' labels, newest value and its time (s), from the engine's two answers: row by
    row where they list the same series in one order (the engine sorts its answers by labels),
    else by each series' labels."""
    for r in values:
        r["metric"].pop("__name__", None)  # last_over_time keeps the name, tlast_over_time does not
    if len(values) == len(times) and all(v["metric"] == t["metric"] for v, t in zip(values, times, strict=True)):
        for v, t in zip(values, times, strict=True):
            yield v["metric"], float(v["value"][1]), float(t["value"][1])
        return
    when = {_key(r["metric"]): float(r["value"][1]) for r in times}
    for r in values:
        if (t_s := when.get(_key(r["metric"]))) is not None:
            yield r["metric"], float(r["value"][1]), t_s


class Series:
    def __init__(self, url: str, *, budget_s: float = BUDGET_S, flushes: bool = False) -> None:
        """`flushes`: the engine is the embedded one, whose buffers `fresh()` may flush."""
        self.url = url.rstrip("/")
        self.budget_s = budget_s
        self.flushes = flushes
        self._flushed = -math.inf  # monotonic seconds of the last flush
        # answers uncompressed: the engine sits beside the controller or on its LAN, where gzipping
        # an export of tens of MB costs the engine more CPU than the bytes cost the wire
        self._client = httpx.Client(timeout=httpx.Timeout(budget_s + 0.5, connect=min(1.0, budget_s)),
                                    headers={"Accept-Encoding": "identity"})
        self._pool = ThreadPoolExecutor(2, thread_name_prefix="series-read")

    def close(self) -> None:
        self._client.close()
        self._pool.shutdown(wait=False)

    def query(self, path: str, params: dict[str, str], *, budget_s: float | None = None) -> list[dict]:
        """One query's result list; SeriesError if the engine does not give one within the budget
        (the reader's, or `budget_s` for a read that no route waits on)."""
        what = params.get("query", "")[:120]
        budget = budget_s or self.budget_s
        return self._post(path, {**params, "timeout": f"{budget}s"}, what, budget).json()["data"]["result"]

    def _post(self, path: str, params: dict[str, str], what: str, budget_s: float | None = None) -> httpx.Response:
        """The engine's answer to `what`; SeriesError, in one line, where none comes within the budget."""
        budget = budget_s or self.budget_s
        try:
            r = self._client.post(self.url + path, data=params, timeout=httpx.Timeout(budget + 0.5,
                                                                                      connect=min(1.0, budget)))
        except httpx.TimeoutException:
            raise SeriesError(f"the series engine at {self.url} did not answer within the {budget:g} s "
                              f"budget for {what}: narrow the window, or raise the budget") from None
        except httpx.HTTPError as e:
            raise SeriesError(f"the series engine at {self.url} cannot be reached ({type(e).__name__}): "
                              "is it running? the controller's /readyz says") from None
        if r.status_code != 200:
            if "maxUniqueTimeseries" in r.text or "matching timeseries exceeds" in r.text:
                raise SeriesError(f"the series engine refused {what}: it selects more series than the engine's "
                                  "-search.maxUniqueTimeseries allows; raise that flag on the engine (docs/series.md)")
            raise SeriesError(f"the series engine refused {what}: HTTP {r.status_code}: {r.text[:200]}")
        return r

    def latest(self, name: str, *, since_ns: int | None = None, hosts: list[str] | None = None,
               match: dict[str, str] | None = None, now_ns: int | None = None) -> list[Sample]:
        """The newest sample of `name` for each (host, labels) written since `since_ns` (an hour
        if None); `hosts`: of those hosts only (a query pair a slice of them); `match`: labels
        that must equal these."""
        now_ns = time.time_ns() if now_ns is None else now_ns  # one instant for every slice
        sels = ([selector(name, match or {}, None)] if hosts is None else
                [selector(name, match or {}, None, {HOST: alt}) for alt in alternations(hosts)])
        out = []
        for sel in sels:
            for metric, value, t_ns in self._newest(sel, since_ns, now_ns):
                host, labels, scale = _labels(name, metric)
                out.append(Sample(host, t_ns, name, _scaled(value, scale), labels))
        return sorted(out, key=lambda s: (s.host, tuple(s.labels.items())))  # labels come sorted by name

    def latest_values(self, name: str) -> list[tuple[str, dict[str, str], float]]:
        """The newest value of each series of `name`, one that every push carries, written in the
        last PUSHED_LOOKBACK_S, as (host, labels, value): `latest` with no write times, one query
        where that is two (the fabric's link states, a series an end of every link)."""
        sel = f"{selector(name, {}, None)}[{PUSHED_LOOKBACK_S}s]"
        out = []
        for r in self.query("/api/v1/query", {"query": f"last_over_time({sel})"}):
            host, labels, scale = _labels(name, r["metric"])
            out.append((host, labels, _scaled(float(r["value"][1]), scale)))
        return out

    def _newest(self, sel: str, since_ns: int | None, now_ns: int | None,
                lookback_s: int = LOOKBACK_S) -> Iterator[tuple[dict, float, int]]:
        """Each series of the selector `sel` written since `since_ns` (None: `lookback_s` ago) as
        of `now_ns` (None: now): its labels, newest value and that value's time, the engine's two
        answers joined by series."""
        now_ns = time.time_ns() if now_ns is None else now_ns
        window_s = max(1, -(-(now_ns - since_ns) // 1_000_000_000)) if since_ns is not None else lookback_s
        ranged, at = f"{sel}[{window_s}s]", {"time": f"{now_ns / 1e9:.3f}"}
        values, times = self._pool.map(lambda fn: self.query("/api/v1/query", {"query": f"{fn}({ranged})", **at}),
                                       ("last_over_time", "tlast_over_time"))
        for metric, value, t_s in _joined(values, times):
            if since_ns is None or _ns(t_s) >= since_ns:
                yield metric, value, _ns(t_s)

    def delays(self, name: str, *, hosts: list[str] | None = None, peers: list[str] | None = None,
               budget_s: float | None = None) -> list[tuple[str, str, str, float]]:
        """The newest value of each probe path's delay `name` (owd_p50_ns, ...) of the last
        PUSHED_LOOKBACK_S, as (src, dst, path, ns): the heatmap's shape, with no write times and no
        Samples built (a fleet-wide read is 40 series a host, 400,000 at 10,000 hosts). Read in
        slices of `hosts` (None: the hosts that wrote it), each of about SLICE_SERIES series;
        `peers`: to those only (a page's pairs); `budget_s` is each query's."""
        if name not in SERVED:
            raise ValueError(f"{name} is not a probe path's delay")
        wanted = set(peers) if peers is not None else None
        peer = "|".join(re.escape(p) for p in sorted(wanted or ()))
        # named in the query where the names fit beside a slice of hosts, else kept here
        named = {"peer": peer} if wanted is not None and len(quote(peer)) <= SLICE_NAMES_BYTES // 2 else {}
        scale = from_engine(name, "", {})[1]
        rows = self._sliced(name, hosts, lambda part: f"last_over_time({selector(name, {}, part, named)}"
                            f"[{PUSHED_LOOKBACK_S}s])", budget_s, SLICE_NAMES_BYTES // 2 if named else None)
        out = [(m.get(HOST, ""), m.get("peer", ""), m.get("path", ""), _scaled(float(r["value"][1]), scale))
               for r in rows if (m := r["metric"])]
        return out if wanted is None else [d for d in out if d[1] in wanted]

    def pair_worst(self, name: str, *, path: str | None = None, less: str | None = None,
                   hosts: list[str] | None = None, budget_s: float | None = None) -> list[tuple[str, str, float]]:
        """Each pair's worst path, worked out by the engine: the largest newest `name` over the
        paths labelled `path` or on plane `path` (None: every path), less each path's own newest
        `less` (a floor: a path without one is left out), as (src, dst, ns). A third of `delays`'
        rows, with two labels where those have four: a fleet's heatmap overview at a fraction of
        the interpreter time. Read in slices of `hosts` (None: those that wrote `name`), as `delays`."""
        if bad := [n for n in (name, less) if n is not None and n not in SERVED]:
            raise ValueError(f"{bad[0]} is not a probe path's delay")
        only = {"path": f"{re.escape(path)}|{re.escape(path)}:.*"} if path is not None else {}

        def query(part: list[str]) -> str:
            newest = f"last_over_time({selector(name, {}, part, only)}[{PUSHED_LOOKBACK_S}s])"
            if less is not None:
                newest = f"({newest} - last_over_time({selector(less, {}, part, only)}[{PUSHED_LOOKBACK_S}s]))"
            return f"max by ({HOST}, peer) ({newest})"

        scale = from_engine(name, "", {})[1]
        return [(m.get(HOST, ""), m.get("peer", ""), _scaled(float(r["value"][1]), scale))
                for r in self._sliced(name, hosts, query, budget_s) if (m := r["metric"])]

    def writers(self, name: str, budget_s: float | None = None) -> list[str]:
        """The hosts that wrote the probe paths' `name` in the last PUSHED_LOOKBACK_S."""
        return self._label_values(name, HOST, budget_s)

    def path_labels(self, name: str, budget_s: float | None = None) -> list[str]:
        """Every path label of the probe paths whose `name` was written in the last PUSHED_LOOKBACK_S."""
        return self._label_values(name, "path", budget_s)

    def _sliced(self, name: str, hosts: list[str] | None, query: Callable[[list[str]], str],
                budget_s: float | None, max_bytes: int | None = None) -> Iterator[dict]:
        """The rows of `query(slice)` for slices of `hosts` (None: those that wrote `name`), each of
        about SLICE_SERIES rows: parsing one holds the interpreter about 0.1 s, not the read's seconds."""
        hosts = self.writers(name, budget_s) if hosts is None else hosts
        done, size, count = 0, FIRST_SLICE_HOSTS, 0
        while done < len(hosts):
            end = slice_end(hosts, done, size, max_bytes)
            rows = self.query("/api/v1/query", {"query": query(hosts[done:end])}, budget_s=budget_s)
            count += len(rows)
            yield from rows
            done = end
            size = max(1, SLICE_SERIES * done // max(1, count))  # the rows a host has so far

    def path_readings(self, name: str, *, hosts: list[str] | None = None, since_ns: int | None = None,
                      now_ns: int | None = None) -> list[tuple[str, str, str, float, int]]:
        """The newest reading of each probe path's `name` (a delay, a floor, the class stream's)
        written since `since_ns` (None: PUSHED_LOOKBACK_S) and when, as (src, dst, path, value, t_ns):
        `latest`'s, with no Samples built. `hosts`: those
        that measured them (None: every host that wrote `name`), a query pair a slice of them."""
        if hosts is None:
            hosts = self.writers(name)
        now_ns = time.time_ns() if now_ns is None else now_ns  # one instant for every slice
        dst = "peer" if name in SERVED else "dst"
        scale = from_engine(name, "", {})[1]
        return [(m.get(HOST, ""), m.get(dst, ""), m.get("path", ""), _scaled(value, scale), t_ns)
                for alt in alternations(hosts)
                for m, value, t_ns in self._newest(selector(name, {}, None, {HOST: alt}), since_ns, now_ns,
                                                   PUSHED_LOOKBACK_S)]

    def _label_values(self, name: str, label: str, budget_s: float | None) -> list[str]:
        """The values of `label` on the path readings `name` written in the last PUSHED_LOOKBACK_S
        (the hosts that wrote them, their paths: the engine's index, no sample read)."""
        budget = budget_s or self.budget_s
        try:
            params = {"match[]": selector(name, {}, None), "start": f"{time.time() - PUSHED_LOOKBACK_S:.3f}"}
            r = self._client.get(self.url + f"/api/v1/label/{label}/values", params=params,
                                 timeout=httpx.Timeout(budget + 0.5, connect=min(1.0, budget)))
            r.raise_for_status()
        except httpx.TimeoutException:
            raise SeriesError(f"the series engine at {self.url} did not answer within the {budget:g} s budget "
                              f"for the {label} labels of {name}") from None
        except httpx.HTTPError as e:
            raise SeriesError(f"the series engine at {self.url} did not list the {label} labels of {name} "
                              f"({type(e).__name__}): is it running? the controller's /readyz says") from None
        return sorted(r.json()["data"])

    def range(self, name: str, *, since_ns: int, until_ns: int, host: str | None = None,
              match: dict[str, str] | None = None, step_s: float | None = None,
              match_re: dict[str, str] | None = None) -> list[Sample]:
        """`name`'s values from since_ns up to until_ns, one per step (RANGE_POINTS steps at most),
        oldest first per series. `match_re`: labels whose values match these expressions."""
        return self.ranges([name], since_ns=since_ns, until_ns=until_ns, host=host, match=match, step_s=step_s,
                           match_re=match_re)

    def ranges(self, names: list[str], *, since_ns: int, until_ns: int, host: str | None = None,
               match: dict[str, str] | None = None, step_s: float | None = None,
               match_re: dict[str, str] | None = None) -> list[Sample]:
        """`range` of each of `names` (a job's flows: match={"jobid": ...}), one list, name by name:
        one query for the names whose selectors differ only by name (a round trip and a pass over
        the engine's index each, not a name each)."""
        span_s = max(1e-3, (until_ns - since_ns) / 1e9)
        step = max(step_s or 1.0, span_s / RANGE_POINTS)
        labels = {**(match or {}), **({HOST: host} if host is not None else {})}
        alike: dict[tuple[str, ...], list[str]] = {}  # a selector's label terms -> the names that share them
        for name in dict.fromkeys(names):
            alike.setdefault(tuple(terms(name, labels, None, match_re)), []).append(name)
        found: dict[str, list[Sample]] = {name: [] for name in names}
        for group in alike.values():
            sel = selector(group, labels, None, match_re)
            rows = self.query("/api/v1/query_range", {"query": f"last_over_time({sel}[{step:g}s]) keep_metric_names",
                                                      "start": f"{since_ns / 1e9:.3f}",
                                                      "end": f"{(until_ns - 1) / 1e9:.3f}", "step": f"{step:g}s"})
            for r in rows:
                name = sample_name(r["metric"].get("__name__", ""))
                if name not in found:
                    continue
                h, labels_of, scale = _labels(name, r["metric"])
                found[name] += [Sample(h, _ns(float(t)), name, _scaled(float(v), scale), labels_of)
                                for t, v in r["values"]]
        return [s for samples in found.values() for s in samples]

    def fresh(self) -> None:
        """Make what the embedded engine took searchable now, at most once per FLUSH_EVERY_S. A new
        series is not searchable for about ten seconds after its first sample (the engine's index
        buffers), so a flow that just started would not be read beside the delay it causes; an
        existing one's samples show within about a second. Where the engine is another's, or
        the flush fails, reads go on with the engine's lag."""
        now = time.monotonic()
        if not self.flushes or now - self._flushed < FLUSH_EVERY_S:
            return
        self._flushed = now
        try:
            self._client.get(self.url + "/internal/force_flush")
        except httpx.HTTPError:
            pass

    def export(self, names: tuple[str, ...], *, since_ns: int, until_ns: int, hosts: list[str] | None = None,
               fed: dict[str, int] | None = None, budget_s: float | None = None) -> Iterator[Exported]:
        """Every sample of `names` stamped from since_ns to until_ns, as written, a series at a
        time: one export for all names, so no sample between two reads is lost to a step or to
        "latest". `hosts`: of those hosts only. `fed`: Exported.key -> a time (ms): a series
        whose newest sample is no newer is skipped unparsed (the detectors' feed, whose reads
        overlap, has fed most of what each one finds); `budget_s`: for a read no route waits on."""
        if not names or (hosts is not None and not hosts):
            return
        pattern = quote("|".join(re.escape(series_name(n)) for n in names))
        only = "," + hosts_term(hosts) if hosts is not None else ""
        budget = budget_s or self.budget_s
        params = {"match[]": f'{{__name__=~"{pattern}"{only}}}', "start": f"{since_ns / 1e9:.3f}",
                  "end": f"{until_ns / 1e9:.3f}", "timeout": f"{budget}s"}  # the engine stops at it too
        r = self._post("/api/v1/export", params, f"an export of {len(names)} names", budget)
        for line in r.text.splitlines():
            seen = _newest_ms(line)
            if seen is not None and fed and seen[1] <= fed.get(seen[0], -1):
                continue
            row = json.loads(line)
            metric = row["metric"]
            key = seen[0] if seen is not None else json.dumps(metric, separators=(",", ":"))
            name = sample_name(metric.pop("__name__", ""))
            host = metric.pop(HOST, "")
            if name in SERVED and metric.get("direction") != "out":  # a reply's view, scraped off /metrics
                continue
            labels, scale = from_engine(name, host, metric)
            values = row["values"] if scale == 1.0 else [_scaled(v, scale) for v in row["values"]]
            yield Exported(name, host, labels, row["timestamps"], values, key)

    def names(self) -> list[str]:
        """Every sample name the engine holds."""
        try:
            r = self._client.get(self.url + "/api/v1/label/__name__/values")
            r.raise_for_status()
        except httpx.HTTPError as e:
            raise SeriesError(f"the series engine at {self.url} cannot be reached ({type(e).__name__})") from None
        return sorted(sample_name(n) for n in r.json()["data"] if n.startswith("clockfabric_"))

    def count(self) -> int:
        """How many series the engine holds (of ours)."""
        rows = self.query("/api/v1/query", {"query": 'count({__name__=~"clockfabric_.*"})'})
        return int(float(rows[0]["value"][1])) if rows else 0
