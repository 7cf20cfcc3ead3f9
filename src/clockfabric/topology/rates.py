"""Link rates: parse the ways people write them, print them the way tc does."""

import re

from clockfabric.errors import ClockfabricError

_UNITS = {"": 1, "k": 10**3, "m": 10**6, "g": 10**9, "t": 10**12}
_RATE = re.compile(r"^\s*(\d+(?:\.\d+)?)\s*([kmgt]?)(?:bit/s|bits?|bps|b/s)?\s*$", re.IGNORECASE)


class RateError(ClockfabricError, ValueError):
    pass


def parse_rate(text: str | int | float) -> int:
    """Bits per second from '1gbit', '200Mbit/s', '10Gbps' (bits, as networks say), '100m' or 1e9."""
    if isinstance(text, bool):
        raise RateError(f"rate {text!r} is not a rate; write it like 1gbit or 200mbit")
    if isinstance(text, (int, float)):
        bps = int(text)
    else:
        m = _RATE.match(str(text))
        if not m:
            raise RateError(f"rate {text!r} does not parse; write it like 1gbit, 200mbit or 10Gbps")
        bps = round(float(m.group(1)) * _UNITS[m.group(2).lower()])
    if bps <= 0:
        raise RateError(f"rate {text!r} must be above zero; write it like 1gbit or 200mbit")
    return bps


def format_rate(bps: int) -> str:
    """The shortest exact tc-style spelling: 1000000000 -> '1gbit', 1500000 -> '1500kbit'."""
    for suffix, scale in (("tbit", 10**12), ("gbit", 10**9), ("mbit", 10**6), ("kbit", 10**3)):
        if bps % scale == 0:
            return f"{bps // scale}{suffix}"
    return f"{bps}bit"
