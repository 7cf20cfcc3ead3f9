"""The clock source the kernel times with, and the PTP hardware clocks the host has."""

from __future__ import annotations

import platform
from pathlib import Path

from clockfabric.audit.model import Verdict
from clockfabric.doctor.base import CHECKS, Outcome, Setup

CLOCKSOURCE = Path("/sys/devices/system/clocksource/clocksource0")
PTP = Path("/sys/class/ptp")


@CHECKS.register("clock", help="the kernel's clock source (tsc on x86) and the PTP clocks present")
def clock(setup: Setup, sysfs: Path = CLOCKSOURCE, ptp: Path = PTP) -> list[Outcome]:
    try:
        current = (sysfs / "current_clocksource").read_text().strip()
        available = (sysfs / "available_clocksource").read_text().split()
    except OSError:
        return [Outcome("clock", Verdict.SKIP, f"no {sysfs} here (not Linux sysfs): clock source not known")]
    clocks = sorted(p.name for p in ptp.iterdir()) if ptp.is_dir() else []
    said = f"clock source {current}; PTP clocks: {', '.join(clocks) or 'none'}"
    if platform.machine() in ("x86_64", "i686") and current != "tsc":
        # hpet or acpi_pm: each read costs a microsecond or more, and the kernel fell back for a reason
        fix = ("the kernel distrusts the TSC (dmesg | grep -i tsc); fix the BIOS or VM setting, then "
               "echo tsc > /sys/devices/system/clocksource/clocksource0/current_clocksource"
               if "tsc" not in available else
               "echo tsc > /sys/devices/system/clocksource/clocksource0/current_clocksource")
        return [Outcome("clock", Verdict.WARN, f"{said}: tsc expected on x86 (slow, coarse reads)", fix)]
    return [Outcome("clock", Verdict.PASS, said)]
