"""Records to rows and back, shared by both databases so that they store and read back alike."""

from __future__ import annotations

import json
import math

from clockfabric.controller.storage.base import Alert, Audit, Event, Host, Sample

HOST_COLS = "name, enrolled_ns, last_seen_ns, info"
EVENT_COLS = "id, host, seq, boot, t_ns, kind, device, detail, synced"
SAMPLE_COLS = "id, host, t_ns, name, value, labels"
ALERT_COLS = "id, key, kind, severity, message, opened_ns, resolved_ns, detail"
AUDIT_COLS = "id, t_ns, fleet, verdict, exit_code, counts"  # the summary; the report is a column of its own


# canonical JSON (sorted keys, no spaces): equal dicts give equal text, so labels compare as text.
# One encoder, made once: json.dumps with options builds a new one per call (~1 us a sample).
dumps = json.JSONEncoder(sort_keys=True, separators=(",", ":")).encode
# a report is only ever read back whole: it keeps its own key order (verdict before checks, a check's id first)
dumps_ordered = json.JSONEncoder(separators=(",", ":")).encode


def loads(text: str) -> dict:
    """A stored JSON object; one that cannot be read back (stored before input was bounded) is
    shown as what went wrong, so that one row never breaks a listing."""
    try:
        return json.loads(text)
    except (ValueError, RecursionError) as e:
        return {"unreadable": f"{type(e).__name__}: {str(e)[:200]}"}


def host(row) -> Host:
    name, enrolled_ns, last_seen_ns, info = row
    return Host(name, enrolled_ns, last_seen_ns, loads(info))


def event_values(e: Event) -> tuple:
    return e.host, e.seq, e.boot, e.t_ns, e.kind, e.device, dumps(e.detail), e.synced


def event(row) -> Event:
    id_, host_, seq, boot, t_ns, kind, device, detail, synced = row
    return Event(host_, seq, boot, t_ns, kind, device, loads(detail), bool(synced), id_)


def sample_values(s: Sample, id_: int) -> tuple:
    return id_, s.host, s.t_ns, s.name, s.value, labels_text(s.labels)


_LABELS_CACHE_MAX = 200_000  # series; past it the cache starts afresh
_labels_cache: dict[tuple, str] = {}


def labels_text(labels: dict) -> str:
    """`dumps(labels)`, remembered by the labels' items: a host pushes the same series every time,
    and a lookup costs a third of encoding them again. Only text values are remembered: 1, 1.0 and
    True are equal keys that encode apart."""
    if not all(type(v) is str for v in labels.values()):
        return dumps(labels)
    key = tuple(labels.items())
    text = _labels_cache.get(key)
    if text is None:
        if len(_labels_cache) >= _LABELS_CACHE_MAX:
            _labels_cache.clear()
        text = _labels_cache[key] = dumps(labels)
    return text


def sample(row) -> Sample:
    id_, host_, t_ns, name, value, labels = row
    # SQLite stores NaN as NULL; give back the NaN that was stored (PostgreSQL keeps it as is)
    return Sample(host_, t_ns, name, math.nan if value is None else value, loads(labels), id_)


def samples(found: list[tuple]) -> list[Sample]:
    """`sample` of each row, each distinct labels text parsed once: a series' rows share it (and
    so their `labels` dict, which readers never change)."""
    parsed: dict[str, dict] = {}
    out = []
    for id_, host_, t_ns, name, value, text in found:
        labels = parsed.get(text)
        if labels is None:
            labels = parsed[text] = loads(text)
        out.append(Sample(host_, t_ns, name, math.nan if value is None else value, labels, id_))
    return out


def newest_per_key(rows: list[tuple]) -> list[tuple]:
    """The newest of `sample_values` rows per (name, host, labels), as `latest` rows
    (name, host, labels, t_ns, value, sample_id): one upsert per key instead of one per sample.
    On equal times the later row wins, as it would in the database."""
    newest: dict[tuple, tuple] = {}
    for id_, host_, t_ns, name, value, labels in rows:
        key = (name, host_, labels)
        if key not in newest or t_ns >= newest[key][3]:
            newest[key] = (name, host_, labels, t_ns, value, id_)
    return list(newest.values())


def alert_values(a: Alert) -> tuple:
    return a.key, a.kind, a.severity, a.message, a.opened_ns, dumps(a.detail)


def alert(row) -> Alert:
    id_, key, kind, severity, message, opened_ns, resolved_ns, detail = row
    return Alert(key, kind, severity, message, opened_ns, resolved_ns, loads(detail), id_)


def audit_values(a: Audit) -> tuple:
    return a.t_ns, a.fleet, a.verdict, a.exit_code, dumps(a.counts), dumps_ordered(a.report)


def audit(row) -> Audit:
    """A summary row (AUDIT_COLS), or one with the report after them."""
    id_, t_ns, fleet, verdict, exit_code, counts, *report = row
    return Audit(t_ns, fleet, verdict, exit_code, loads(counts), loads(report[0]) if report else None, id_)
