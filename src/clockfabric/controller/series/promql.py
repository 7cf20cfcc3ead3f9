"""PromQL's text for the controller's reads: a sample's series selector (its engine name and
labels, escaped), and host names as regular-expression alternatives cut in slices short enough
for the engine to take (it refuses a query over 16 kB)."""

from __future__ import annotations

import re
from collections.abc import Iterator

from clockfabric.serieswire import HOST, series_name, served_match

SLICE_NAMES_BYTES = 8_000  # of host-name text at most in one query


def selector(name: str | list[str], match: dict[str, str], hosts: list[str] | None,
              match_re: dict[str, str] | None = None) -> str:
    """A series selector of sample `name`, or of any of several names whose label terms are alike
    (`terms`: all probe-path delays, or none)."""
    names = [name] if isinstance(name, str) else name
    parts = terms(names[0], match, hosts, match_re)
    if len(names) == 1:
        return f"{series_name(names[0])}{{{','.join(parts)}}}"
    pattern = quote("|".join(re.escape(series_name(n)) for n in names))
    return "{" + ",".join([f'__name__=~"{pattern}"', *parts]) + "}"


def terms(name: str, match: dict[str, str], hosts: list[str] | None, match_re: dict[str, str] | None) -> list[str]:
    """A selector's label terms: `match` equal (a delay's as the engine holds it), `match_re`
    matched, the host one of `hosts`."""
    parts = [f'{k}="{quote(v)}"' for k, v in sorted(served_match(name, match).items())]
    parts += [f'{k}=~"{quote(v)}"' for k, v in sorted((match_re or {}).items())]
    if hosts is not None:
        parts.append(hosts_term(hosts))
    return parts


def alternations(values: list[str], max_bytes: int | None = None) -> Iterator[str]:
    """`values` as regular-expression alternatives, `a|b|c`, each escaped, in slices of at most
    `max_bytes` (SLICE_NAMES_BYTES) as a query writes them (an engine refuses a query over 16 kB):
    a read of many hosts' or addresses' series is a query a slice."""
    start = 0
    while start < len(values):
        end = slice_end(values, start, len(values), max_bytes)
        yield "|".join(re.escape(v) for v in values[start:end])
        start = end


def hosts_term(hosts: list[str]) -> str:
    return f'{HOST}=~"{quote("|".join(re.escape(h) for h in hosts))}"'


def slice_end(hosts: list[str], start: int, size: int, max_bytes: int | None = None) -> int:
    """Where a slice of `hosts` from `start` ends: `size` hosts at most (one at least), their names
    `max_bytes` (SLICE_NAMES_BYTES) at most as the query writes them."""
    limit = SLICE_NAMES_BYTES if max_bytes is None else max_bytes
    end, text = start + 1, len(quote(re.escape(hosts[start])))
    while end < len(hosts) and end - start < size:
        text += len(quote(re.escape(hosts[end]))) + 1
        if text > limit:
            break
        end += 1
    return end


def quote(value: str) -> str:
    return value.replace("\\", "\\\\").replace('"', '\\"')
