"""What the fleet should look like: expected versions, sizes, MTU, thresholds, from a YAML file.

Every key is optional. An expectation left unset is taken from the fleet itself: the
majority for versions and settings, the median for sizes, so one odd host stands out
without anyone writing the right answer down. `docs/audit.md` lists the keys.
"""

from __future__ import annotations

import statistics
from collections import Counter
from collections.abc import Iterable
from copy import deepcopy
from pathlib import Path
from typing import Any

from clockfabric.errors import ClockfabricError
from clockfabric.yamlfile import read_yaml

NUMBER = (int, float)
# key -> (type, default); a default of None means "from the fleet"
SCHEMA: dict[str, dict[str, tuple[type | tuple, Any]]] = {
    "software": {"kernel": (str, None), "os": (str, None), "python": (str, None), "nvidia_driver": (str, None),
                 "nccl": (str, None), "rdma_core": (str, None), "packages": (dict, {})},
    "memory": {"total_gib": (NUMBER, None), "tolerance": (NUMBER, 0.03), "dimms": (int, None)},
    "pcie": {"ignore": (list, [])},  # PCI addresses or vendor:device ids whose links may run below their max
    "gpu": {"count": (int, None), "persistence": (bool, True), "ecc": (bool, True),
            "max_sm_mhz": (int, None)},
    "network": {"mtu": (int, None), "gid_index": (int, None), "rdma": (str, "optional"),
                "connectivity_loss": (NUMBER, 0.0)},  # share of pings that may be lost before a warning
    "latency": {"max_us": (NUMBER, None),  # absolute; None: the fleet's median + margin_us
                "margin_us": (NUMBER, 1000.0), "samples": (int, 5)},
    "collective": {"subflows": (list, [1, 2, 4, 8]), "algorithms": (list, ["ring", "hier"]),
                   "size": (str, "auto"),  # "auto": each ring step moves step_ms of link time
                   "step_ms": (NUMBER, 25.0), "iters": (int, 3), "min_ratio": (NUMBER, 0.8),
                   "timeout_s": (NUMBER, 60.0), "sweep_hosts": (int, 8)},
    "timeouts": {"host_s": (NUMBER, 20.0), "check_s": (NUMBER, 300.0),
                 "lldp_s": (NUMBER, 1.5)},  # how long hosts listen for their switch's LLDP
}
RDMA_MODES = ("optional", "required")


def defaults() -> dict:
    return {section: {k: deepcopy(d) for k, (_, d) in keys.items()} for section, keys in SCHEMA.items()}


def parse(data: Any, source: str = "expectations") -> dict:
    """Defaults overlaid with the document; one clear line for anything unknown or mistyped."""
    out = defaults()
    if data is None:
        return out
    if not isinstance(data, dict):
        raise ClockfabricError(f"{source}: expected a mapping of sections ({', '.join(SCHEMA)})")
    for section, values in data.items():
        if section not in SCHEMA:
            raise ClockfabricError(f"{source}: unknown section {section!r}; sections are {', '.join(SCHEMA)}")
        if not isinstance(values, dict):
            raise ClockfabricError(f"{source}: {section} must be a mapping of keys")
        for key, value in values.items():
            if key not in SCHEMA[section]:
                raise ClockfabricError(f"{source}: unknown key {section}.{key}; "
                                       f"{section} has {', '.join(SCHEMA[section])}")
            kind, default = SCHEMA[section][key]
            names = "number" if isinstance(kind, tuple) else kind.__name__
            if value is None and default is not None:
                raise ClockfabricError(f"{source}: {section}.{key} must be a {names}; leave it out for the default")
            if value is not None and (not isinstance(value, kind) or (kind is not bool and isinstance(value, bool))):
                raise ClockfabricError(f"{source}: {section}.{key} must be a {names} (got {value!r})")
            out[section][key] = value
    for name, version in out["software"]["packages"].items():
        if not isinstance(version, str):  # YAML reads 1.20 as the number 1.2
            raise ClockfabricError(f"{source}: software.packages.{name}: quote the version, like \"{version}\"")
    if out["network"]["rdma"] not in RDMA_MODES:
        raise ClockfabricError(f"{source}: network.rdma must be one of {', '.join(RDMA_MODES)}")
    if bad := [a for a in out["collective"]["algorithms"] if a not in ("ring", "hier")]:
        raise ClockfabricError(f"{source}: collective.algorithms: {bad[0]!r} is not ring or hier")
    if bad := [s for s in out["collective"]["subflows"] if not isinstance(s, int) or s < 1]:
        raise ClockfabricError(f"{source}: collective.subflows: {bad[0]!r} is not a positive whole number")
    if out["collective"]["size"] != "auto":
        from clockfabric.collective.sizes import parse_size

        try:  # one clear line now, not a failed check later
            parse_size(out["collective"]["size"])
        except ClockfabricError as e:
            raise ClockfabricError(f"{source}: collective.size: {e}, or auto") from None
    if out["collective"]["step_ms"] <= 0:
        raise ClockfabricError(f"{source}: collective.step_ms must be above 0")
    return out


def load(path: str | Path | None) -> dict:
    return parse(read_yaml(path, "audit expectations"), str(path)) if path else defaults()


# ---- the fleet's own answer, where nobody wrote one down -----------------------------------
def majority(values: Iterable) -> tuple[Any, bool]:
    """The most common value and whether it is a strict majority (None, False if no values)."""
    counts = Counter(v for v in values if v is not None)
    if not counts:
        return None, False
    (top, n), *rest = counts.most_common()
    return top, n * 2 > sum(counts.values()) and not (rest and rest[0][1] == n)


def median(values: Iterable) -> float | None:
    values = [v for v in values if v is not None]
    return statistics.median(values) if values else None
