"""Log setup for the daemons (agent, switch agent, controller): text for a terminal or journald,
or JSON lines for a log pipeline (Loki, Elasticsearch, a Kubernetes node's collector).

A JSON line is one object: `ts` (RFC 3339, UTC, milliseconds), `level`, `logger`, `msg` (the
message with its arguments), each field passed with `extra={...}`, and `exc` when an exception
is logged. One handler on the root logger, so every library's lines (uvicorn's too) take the
same shape.
"""

from __future__ import annotations

import json
import logging
import sys
import time
from typing import TextIO

from clockfabric.errors import ClockfabricError

FORMATS = ("text", "json")
LOG_FORMAT_HELP = "Log lines as text, or json: one object a line (ts, level, logger, msg, fields)."
TEXT_FORMAT = "%(asctime)s %(message)s"
QUIET_BELOW_WARNING = ("httpx", "httpcore")
# what every LogRecord carries: anything else on a record came from `extra=`
_STANDARD = frozenset(vars(logging.LogRecord("", 0, "", 0, "", (), None))) | {"message", "asctime", "taskName"}


class JsonFormatter(logging.Formatter):
    def format(self, record: logging.LogRecord) -> str:
        line = {"ts": _rfc3339(record.created), "level": record.levelname.lower(), "logger": record.name,
                "msg": record.getMessage()}
        for key, value in vars(record).items():
            if key not in _STANDARD and key not in line:
                line[key] = value
        if record.exc_info:
            line["exc"] = self.formatException(record.exc_info)
        elif record.exc_text:
            line["exc"] = record.exc_text
        # default=str: a field that is not JSON (a Path, an exception) is still written, as text
        return json.dumps(line, default=str, ensure_ascii=False)


def setup_logging(log_format: str = "text", *, verbose: bool = False, stream: TextIO | None = None) -> None:
    """Send every logger's lines to `stream` (stderr) in `log_format`, at INFO (DEBUG if verbose).
    Replaces handlers set before, so it may be called again (tests, a command run twice)."""
    if log_format not in FORMATS:
        raise ClockfabricError(f"--log-format {log_format!r}: give one of {', '.join(FORMATS)}")
    handler = logging.StreamHandler(stream) if stream is not None else _Stderr()
    handler.setFormatter(JsonFormatter() if log_format == "json" else logging.Formatter(TEXT_FORMAT))
    root = logging.getLogger()
    for old in list(root.handlers):
        root.removeHandler(old)
    root.addHandler(handler)
    root.setLevel(logging.DEBUG if verbose else logging.INFO)
    # httpx logs every request at INFO: a daemon polling once a second would drown its own lines
    for chatty in QUIET_BELOW_WARNING:
        logging.getLogger(chatty).setLevel(logging.DEBUG if verbose else logging.WARNING)


class _Stderr(logging.StreamHandler):
    """stderr as it is when each line is written, as logging's own last resort does: a process
    whose stderr was replaced after setup (a test's capture, a daemon's redirect) never writes
    to a stream that is closed by then."""

    def __init__(self) -> None:
        super().__init__(sys.stderr)

    @property
    def stream(self) -> TextIO:
        return sys.stderr

    @stream.setter
    def stream(self, _value: TextIO) -> None:
        pass


def _rfc3339(created: float) -> str:
    seconds = int(created)
    return time.strftime("%Y-%m-%dT%H:%M:%S", time.gmtime(seconds)) + f".{int((created - seconds) * 1000):03d}Z"
