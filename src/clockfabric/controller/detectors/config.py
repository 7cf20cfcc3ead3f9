"""What every detector's section of the monitor config has, and how a section is read.

Each detector declares its own section (a `DetectorConfig` subclass in its module, with its
defaults and its `KEYS`); controller/config.py reads the file and hands each section here.
Bad input raises one `Problem` naming the key; the caller adds the file's name.
"""

from __future__ import annotations

from collections.abc import Callable
from dataclasses import dataclass, replace
from typing import Any, ClassVar, TypeVar

from clockfabric.units import parse_duration

US = 1_000
MS = 1_000_000
S = 1_000_000_000
SEVERITIES = ("warning", "critical")

Parser = Callable[[Any, str], Any]  # (value, where) -> the value, or Problem naming `where`
Keys = dict[str, tuple[str, Parser]]  # file key -> (field, parser)
C = TypeVar("C", bound="DetectorConfig")


class Problem(Exception):
    """One thing wrong with the file, naming the key."""


def boolean(value: Any, where: str) -> bool:
    if not isinstance(value, bool):
        raise Problem(f"{where} must be true or false")
    return value


def positive_int(value: Any, where: str) -> int:
    if isinstance(value, bool) or not isinstance(value, int) or value <= 0:
        raise Problem(f"{where} must be a positive integer")
    return value


def duration_ns(value: Any, where: str) -> int:
    if isinstance(value, bool) or value is None:
        raise Problem(f"{where} must be a duration like 60s, 1ms or 50us")
    try:
        ns = round(parse_duration(value) * S)
    except ValueError as e:
        raise Problem(f"{where}: {e}") from None
    if ns <= 0:
        raise Problem(f"{where} must be above zero")
    return ns


def choice(options: tuple[str, ...]) -> Parser:
    def parse(value: Any, where: str) -> str:
        if value not in options:
            raise Problem(f"{where} must be one of {', '.join(options)}, not {value!r}")
        return value
    return parse


def mapping(value: Any, where: str, known: set[str]) -> None:
    """`value` is a mapping whose keys are all `known`."""
    if not isinstance(value, dict):
        raise Problem(f"{where} must be a mapping")
    unknown = sorted(str(k) for k in value if k not in known)
    if unknown:
        raise Problem(f"{where}: unknown key {unknown[0]!r}; known keys: {', '.join(sorted(known))}")


@dataclass(frozen=True)
class DetectorConfig:
    """Whether the detector runs, and how bad what it finds is; a subclass adds its thresholds."""

    enabled: bool = True
    severity: str = "warning"

    COMMON: ClassVar[Keys] = {"enabled": ("enabled", boolean), "severity": ("severity", choice(SEVERITIES))}
    KEYS: ClassVar[Keys] = {}  # the section's own keys, beyond enabled and severity

    @classmethod
    def parse(cls: type[C], section: Any, where: str) -> C:
        """The section `where` of the file (None: every default)."""
        config = cls()
        if section is None:
            return config
        spec = {**cls.COMMON, **cls.KEYS}
        mapping(section, where, set(spec))
        return replace(config, **{attr: parse(section[key], f"{where}.{key}")
                                  for key, (attr, parse) in spec.items() if key in section})
