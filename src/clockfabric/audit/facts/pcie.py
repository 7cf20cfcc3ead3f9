"""PCIe facts: each device's link as trained against what it can do.

A NIC that trained at x8 instead of x16, or at Gen3 instead of Gen4, halves its bandwidth and
raises no error; sysfs shows the negotiated link next to the capable one. Only devices with a
PCIe capability have these files (host bridges and integrated devices do not).
"""

from __future__ import annotations

import re
from pathlib import Path

from clockfabric.telemetry.rdma import _entries, _int, _read


def read(root: Path = Path("/")) -> list[dict]:
    out = []
    for d in _entries(root / "sys/bus/pci/devices"):
        if not (d / "current_link_speed").exists():
            continue
        numa = _int(_read(d / "numa_node"))
        out.append({
            "address": d.name,
            "class": _read(d / "class"),
            "vendor": _read(d / "vendor"),
            "device": _read(d / "device"),
            "driver": _driver(d),
            "current_speed_gts": speed_gts(_read(d / "current_link_speed")),
            "max_speed_gts": speed_gts(_read(d / "max_link_speed")),
            "current_width": _int(_read(d / "current_link_width")),
            "max_width": _int(_read(d / "max_link_width")),
            "numa_node": numa if numa is not None and numa >= 0 else None,  # -1: no NUMA affinity
        })
    return out


def speed_gts(text: str | None) -> float | None:
    """'8.0 GT/s PCIe' (kernels since 5.7), '8 GT/s' (older) -> 8.0; 'Unknown' / 'Unknown speed' -> None."""
    m = re.match(r"([\d.]+) GT/s", text or "")
    return float(m[1]) if m else None


def _driver(d: Path) -> str | None:
    try:
        return (d / "driver").readlink().name  # a link to .../bus/pci/drivers/<name>
    except OSError:  # no driver bound
        return None
