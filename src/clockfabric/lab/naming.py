"""Names: every namespace and cable of a lab carries the lab's name, so any lab, even a
crashed one, can be found and removed without touching anything else on the machine."""

from __future__ import annotations

import re

from clockfabric.errors import ClockfabricError

PREFIX = "cf"
SEP = "."  # not allowed in lab or node names, so "cf.<lab>.<node>" splits one way only
LAB_NAME = re.compile(r"^[a-z0-9][a-z0-9_-]{0,23}$")


def check_lab_name(name: str) -> str:
    if not LAB_NAME.match(name):
        raise ClockfabricError(f"lab name {name!r}: use lower-case letters, digits, '-' and '_' (at most 24)")
    return name


def netns_name(lab: str, node: str) -> str:
    return f"{PREFIX}{SEP}{lab}{SEP}{node}"


def netns_prefix(lab: str) -> str:
    return f"{PREFIX}{SEP}{lab}{SEP}"


def parse_netns(name: str) -> tuple[str, str] | None:
    """(lab, node) for one of our namespace names, else None."""
    parts = name.split(SEP)
    if len(parts) == 3 and parts[0] == PREFIX:
        return parts[1], parts[2]
    return None


def link_alias(lab: str, link_name: str) -> str:
    return f"clockfabric lab={lab} link={link_name}"
