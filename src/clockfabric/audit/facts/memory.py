"""Memory facts: total size, and the DIMMs that make it up.

A host that lost a DIMM boots with less memory and less bandwidth and says nothing, so the
DIMM count matters as much as the total. EDAC's sysfs lists populated DIMMs to any user;
dmidecode needs root and a real host, so it is only the fallback (and only for root "/").
"""

from __future__ import annotations

import re
import shutil
import subprocess
from collections.abc import Callable
from pathlib import Path
from typing import Any

from clockfabric.telemetry.rdma import _entries, _int, _read

MIB = 2**20
UNITS = {"kB": 2**10, "KB": 2**10, "MB": 2**20, "GB": 2**30, "TB": 2**40}


def read(root: Path = Path("/"), dmidecode: Callable[[], str | None] | None = None) -> dict:
    """dmidecode: returns `dmidecode -t 17` output or None; default: run it, on the real host only."""
    out: dict[str, Any] = {"total_bytes": mem_total(root), "dimms": None, "dimm_bytes": None, "dimm_labels": None,
                           "source": None}
    if dimms := edac_dimms(root):
        source = "edac"
    else:
        if dmidecode is None:
            dmidecode = run_dmidecode if root == Path("/") else (lambda: None)
        dimms, source = parse_dmidecode(dmidecode() or ""), "dmidecode"
    if dimms:
        out.update(dimms=len(dimms), dimm_bytes=[size for size, _ in dimms], dimm_labels=[label for _, label in dimms],
                   source=source)
    return out


def mem_total(root: Path) -> int | None:
    m = re.search(r"^MemTotal:\s+(\d+) kB", _read(root / "proc/meminfo") or "", re.M)
    return int(m[1]) * 1024 if m else None


def edac_dimms(root: Path) -> list[tuple[int, str | None]]:
    """(bytes, label) per populated DIMM. The kernel creates dimmN only for populated slots; csrow-based
    drivers name ranks (rankN) instead, which do not count DIMMs, so those are left out."""
    out = []
    mcs = [p for p in _entries(root / "sys/devices/system/edac/mc") if re.fullmatch(r"mc\d+", p.name)]
    for mc in sorted(mcs, key=lambda p: int(p.name[2:])):
        dimms = [p for p in _entries(mc) if re.fullmatch(r"dimm\d+", p.name)]
        for d in sorted(dimms, key=lambda p: int(p.name[4:])):
            if mib := _int(_read(d / "size")):  # MiB
                out.append((mib * MIB, _read(d / "dimm_label") or None))
    return out


def parse_dmidecode(text: str) -> list[tuple[int, str | None]]:
    """(bytes, locator) per installed module from `dmidecode -t 17`; empty slots say 'No Module Installed'."""
    out = []
    for block in re.split(r"\n\s*\n", text):
        if not re.search(r"^Memory Device\s*$", block, re.M):
            continue
        size = re.search(r"^\s*Size:\s*(\d+)\s*(kB|KB|MB|GB|TB)\s*$", block, re.M)  # not 'Volatile Size:' etc.
        if size:
            locator = re.search(r"^\s*Locator:\s*(.+?)\s*$", block, re.M)
            out.append((int(size[1]) * UNITS[size[2]], locator[1] if locator else None))
    return out


def run_dmidecode() -> str | None:
    exe = shutil.which("dmidecode") or next((p for p in ("/usr/sbin/dmidecode", "/sbin/dmidecode")
                                             if Path(p).exists()), None)
    if exe is None:
        return None
    try:
        out = subprocess.run([exe, "-t", "17"], capture_output=True, text=True, timeout=5, check=False)
    except (OSError, subprocess.SubprocessError):
        return None
    return out.stdout if out.returncode == 0 else None  # not root: permission denied on the DMI table
