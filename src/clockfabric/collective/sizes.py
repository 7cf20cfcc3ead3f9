"""Message sizes as nccl-tests writes them: '1M' is 1048576 bytes (K, M, G are powers of 1024)."""

from __future__ import annotations

import re

from clockfabric.errors import ClockfabricError

_SCALE = {"": 1, "k": 1 << 10, "m": 1 << 20, "g": 1 << 30}
_SIZE = re.compile(r"^\s*(\d+)\s*([kmg]?)(?:i?b)?\s*$", re.IGNORECASE)


def parse_size(text: str | int) -> int:
    """Bytes from '64M', '512K', '1G', '4096' or '8MiB'."""
    m = _SIZE.match(str(text))
    if not m:
        raise ClockfabricError(f"size {text!r} does not parse; write it like 4096, 512K, 8M or 1G")
    size = int(m.group(1)) * _SCALE[m.group(2).lower()]
    if size <= 0:
        raise ClockfabricError(f"size {text!r} must be above zero")
    return size


def size_range(min_bytes: int, max_bytes: int, factor: float = 2.0) -> list[int]:
    """min, min*factor, ... up to max (nccl-tests' -b/-e/-f)."""
    if min_bytes > max_bytes:
        raise ClockfabricError(f"the smallest size ({format_size(min_bytes)}) is above the largest "
                               f"({format_size(max_bytes)})")
    if factor <= 1:
        raise ClockfabricError(f"the size factor must be above 1 (got {factor:g})")
    out, size = [], float(min_bytes)
    while size <= max_bytes:
        out.append(int(size))
        size *= factor
    return out


def format_size(size: int) -> str:
    """The shortest exact spelling: 1048576 -> '1M', 1536 -> '1536'."""
    for suffix, scale in (("G", 1 << 30), ("M", 1 << 20), ("K", 1 << 10)):
        if size % scale == 0:
            return f"{size // scale}{suffix}"
    return str(size)
