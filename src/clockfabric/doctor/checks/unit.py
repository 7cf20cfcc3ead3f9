"""A systemd unit's ExecStart: the program it starts exists and may be run."""

from __future__ import annotations

import os
import shlex
import shutil
from pathlib import Path

from clockfabric.audit.model import Verdict
from clockfabric.doctor.base import CHECKS, Outcome, Setup

PREFIXES = "@-:+!|"  # ExecStart= prefixes (systemd.service(5)): not part of the path
SYSTEMD_PATH = "/usr/local/sbin:/usr/local/bin:/usr/sbin:/usr/bin"  # where it looks for a bare name


def exec_starts(text: str) -> list[str]:
    """The programs of a unit's ExecStart= lines (continuation lines joined)."""
    joined = text.replace("\\\n", " ")
    programs = []
    for line in joined.splitlines():
        key, sep, value = line.strip().partition("=")
        if sep and key.strip() == "ExecStart" and value.strip():
            words = shlex.split(value, comments=False, posix=True)
            programs.append(words[0].lstrip(PREFIXES) if words else "")
    return programs


@CHECKS.register("unit", help="--unit PATH: its ExecStart program exists and is executable")
def unit(setup: Setup) -> list[Outcome]:
    if setup.unit is None:
        return [Outcome("unit", Verdict.SKIP, "no --unit given")]
    try:
        programs = exec_starts(setup.unit.read_text())
    except OSError as e:
        return [Outcome("unit", Verdict.FAIL, f"cannot read {setup.unit}: {e.strerror}", "give the unit file's path "
                                                                                         "(systemctl cat UNIT)")]
    if not programs:
        return [Outcome("unit", Verdict.FAIL, f"{setup.unit} has no ExecStart=", "use deploy/systemd/"
                                                                                 "clockfabric-agent.service")]
    out = []
    for program in programs:
        found = program if Path(program).is_absolute() else shutil.which(program, path=SYSTEMD_PATH)
        path = Path(found or program)
        if not path.is_absolute() or not path.is_file():
            out.append(Outcome("unit", Verdict.FAIL, f"{setup.unit}: ExecStart program {program} does not exist",
                               "install clockfabric there (docs/quickstart.md), or edit ExecStart= to "
                               "`command -v clockfabric`'s path, then systemctl daemon-reload"))
        elif not os.access(path, os.X_OK):
            out.append(Outcome("unit", Verdict.FAIL, f"{setup.unit}: {program} is not executable",
                               f"chmod 755 {program}"))
        else:
            out.append(Outcome("unit", Verdict.PASS, f"{setup.unit}: ExecStart {program} exists"))
    return out
