"""What one host knows about itself, as JSON: the host side of a fleet audit.

`collect(spec)` runs on every host (`python -m clockfabric.audit.facts '<spec json>'`), and
the audit judges the answers side by side. One module per concern; each reader fails on its
own: its section becomes {"error": ...}, the reason goes in "errors", and the others report.
It must be quick, so nothing heavy is imported (no torch, scipy, typer or rich), names resolve
in the background while the rest is read, and every file is read under `root` so recorded
trees can stand in for a host.

Spec: {"host": "h3", "nics": [{"name": "eth0", "plane": 0}, ...], "names": {"h0": "10.0.0.1", ...}}
"""

from __future__ import annotations

import json
import socket
import time
from collections.abc import Callable
from pathlib import Path

from clockfabric.audit.facts import gpus, memory, names, nics, pcie, software


class SpecError(ValueError):
    """The spec is missing or malformed; the message says what to fix."""


def collect(spec: dict, *, root: Path = Path("/"), nvml=None, ipv4: nics.Ipv4 | None = None,
            names_timeout: float = names.TIMEOUT_S) -> dict:
    """This host's facts. Never raises: a reader that fails leaves {"error": ...} in its section.

    nvml: a stand-in for pynvml (tests); ipv4: NIC names -> addresses, instead of netlink (tests).
    """
    errors: dict[str, str] = {}

    def section(name: str, read: Callable, *args):
        try:
            return read(*args)
        except Exception as e:  # noqa: BLE001 - one broken reader must not take the others down
            errors[name] = f"{type(e).__name__}: {e}".splitlines()[0]
            return {"error": errors[name]}

    collected_ns = time.time_ns()
    if not isinstance(spec, dict):  # still report the host; the spec's own sections say what went wrong
        errors["spec"] = f"spec must be an object, not {type(spec).__name__}"
        spec = {}
    # started first: lookups wait on the network while the files are read
    lookup = section("names", lambda: names.Lookup(names.hosts_of(spec.get("names", {})), names_timeout))
    gpu = section("gpus", gpus.read, nvml)  # before software: NVML's driver version is its fallback
    facts = {
        "host": spec.get("host"),
        "collected_ns": collected_ns,
        "hostname": socket.gethostname(),
        "software": section("software", software.read, root, gpu.get("driver")),
        "memory": section("memory", memory.read, root),
        "pcie": section("pcie", pcie.read, root),
        "nics": section("nics", nics.read, spec.get("nics", []), root, ipv4),
        "gpus": gpu,
        "names": section("names", lookup.result) if isinstance(lookup, names.Lookup) else lookup,
        "errors": errors,
    }
    return facts


def parse_spec(text: str) -> dict:
    """The spec from its JSON text, checked enough that collect() reads what was meant."""
    try:
        spec = json.loads(text)
    except json.JSONDecodeError as e:
        raise SpecError(f"spec is not JSON ({e.msg} at line {e.lineno} column {e.colno})") from None
    if not isinstance(spec, dict):
        raise SpecError(f"spec must be a JSON object, not {type(spec).__name__}")
    if not isinstance(spec.get("host"), str) or not spec["host"]:
        raise SpecError('spec needs "host": the name this host has in the audit, e.g. {"host": "h3", ...}')
    nic_list = spec.setdefault("nics", [])
    if not isinstance(nic_list, list) or not all(isinstance(n, dict) and isinstance(n.get("name"), str)
                                                 for n in nic_list):
        raise SpecError('spec "nics" must be a list of objects with a "name", e.g. [{"name": "eth0", "plane": 0}]')
    names_spec = spec.setdefault("names", {})
    if not isinstance(names_spec, (dict, list)):
        raise SpecError('spec "names" must map host names to addresses, e.g. {"h0": "10.0.0.1"}')
    return spec
