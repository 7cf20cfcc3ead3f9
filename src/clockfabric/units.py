"""Durations as people write them: '20s', '500ms', '1.5s', '2m', '10us', '50ns'."""

import re

_SCALE = {"ns": 1e-9, "us": 1e-6, "µs": 1e-6, "ms": 1e-3, "s": 1.0, "m": 60.0, "h": 3600.0}
_DURATION = re.compile(r"^\s*(-?\d+(?:\.\d+)?)\s*(ns|us|µs|ms|s|m|h)?\s*$")


def parse_duration(text: str, *, allow_negative: bool = False) -> float:
    """Seconds from a duration; a bare number is seconds."""
    m = _DURATION.match(str(text))
    if not m:
        raise ValueError(f"duration {text!r} does not parse; write it like 20s, 500ms or 50us")
    value = float(m.group(1)) * _SCALE[m.group(2) or "s"]
    if value < 0 and not allow_negative:
        raise ValueError(f"duration {text!r} must not be negative")
    return value
