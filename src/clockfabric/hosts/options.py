"""How each host of a fleet is reached over ssh: the fleet file's `ssh:` sections.

By default it is what `ssh HOST` does: the user's ssh-agent and ~/.ssh/id_* keys,
~/.ssh/known_hosts, and ~/.ssh/config (Port, User, IdentityFile, ProxyJump: per-host settings
belong there). The fleet file (the fleet's topology YAML) may carry an `ssh:` section for the
fleet and one per host; the CLI's options win over both:

    ssh: {user: ops, port: 22, key: keys/fleet_ed25519, known_hosts: keys/known_hosts,
          python: "sudo -n /opt/clockfabric/bin/python"}
    hosts:
      - {name: h0, address: 10.0.0.1, ssh: {port: 2222}}

`python` is the command that runs clockfabric's modules on the host (a venv's python, or
`sudo -n python3` when logging in as a user who is not root).
"""

from __future__ import annotations

from dataclasses import dataclass, replace
from pathlib import Path
from typing import Any

from clockfabric.errors import ClockfabricError
from clockfabric.topology import Topology
from clockfabric.yamlfile import read_yaml


@dataclass(frozen=True)
class SshOptions:
    user: str | None = None  # None: ~/.ssh/config's User, else the local user
    port: int | None = None  # None: ~/.ssh/config's Port, else 22
    key: str | None = None  # a private key file instead of the agent and ~/.ssh/id_*
    known_hosts: str | None = None  # instead of ~/.ssh/known_hosts
    python: str = "python3"


_TYPES: dict[str, Any] = {"user": str, "port": int, "key": str, "known_hosts": str, "python": str}
_PATHS = {"key", "known_hosts"}


def options(topo: Topology, hosts_file: Path | None = None, **cli) -> dict[str, SshOptions]:
    """Each host's options: the CLI's (cli: SshOptions' fields, None for unset) over the host's own
    `ssh:` in the hosts file, over the file's fleet-wide `ssh:`. Bad values: one ClockfabricError line."""
    fleet, per_host = SshOptions(), {}
    if hosts_file is not None:
        data = read_yaml(hosts_file, "hosts file")
        where, base = str(hosts_file), Path(hosts_file).parent
        if isinstance(data, dict) and data.get("ssh") is not None:
            fleet = replace(fleet, **_section(data["ssh"], f"{where}: ssh", base))
        for raw in (data.get("hosts") or []) if isinstance(data, dict) else []:
            if isinstance(raw, dict) and raw.get("ssh") is not None:
                name = str(raw.get("name"))
                per_host[name] = _section(raw["ssh"], f"{where}: host {name!r}: ssh", base)
    given = _section({k: v for k, v in cli.items() if v is not None}, "option", Path.cwd(), cli=True)
    return {h: replace(fleet, **{**per_host.get(h, {}), **given}) for h in topo.hosts}


def _section(raw: object, where: str, base: Path, cli: bool = False) -> dict:
    if not isinstance(raw, dict):
        raise ClockfabricError(f"{where} must be a mapping, like {{user: ops, port: 22, key: ~/.ssh/fleet}}")
    if unknown := sorted(set(raw) - set(_TYPES)):
        raise ClockfabricError(f"{where}: unknown key {unknown[0]!r}; known: {', '.join(_TYPES)}")
    out = {}
    for key, value in raw.items():
        name = f"--ssh-{key.replace('_', '-')}" if cli else f"{where}.{key}"
        if not isinstance(value, _TYPES[key]) or isinstance(value, bool) or value == "":
            raise ClockfabricError(f"{name} must be a {_TYPES[key].__name__}, not {value!r}")
        if key == "port" and not 0 < value < 65536:
            raise ClockfabricError(f"{name} must be 1..65535, not {value}")
        if key in _PATHS:  # relative to the hosts file, as the file's author meant
            value = str(base / Path(value).expanduser())
        out[key] = value
    return out
