"""Records to rows and back, shared by both databases so that they store and read back alike."""

from __future__ import annotations

import json

from clockfabric.controller.storage.base import Alert, Audit, Event, Host

HOST_COLS = "name, enrolled_ns, last_seen_ns, info"
EVENT_COLS = "id, host, seq, boot, t_ns, kind, device, detail, synced"
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
