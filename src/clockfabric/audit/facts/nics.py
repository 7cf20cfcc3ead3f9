"""NIC facts: link state, MTU, speed and addresses of the NICs the spec names, and their RDMA port.

Link files come from sysfs under `root` (`ip netns exec` mounts a namespace's own /sys).
Addresses do not live in sysfs at all: they come from netlink (facts.addrs), in the network
namespace this process runs in. The RDMA port is the one whose GID table names the NIC, or,
for a port with no GIDs on it (InfiniBand, a NIC without addresses), the device under the
NIC's PCI function.
"""

from __future__ import annotations

from collections.abc import Callable
from pathlib import Path

from clockfabric.audit.facts.addrs import ipv4 as addrs_ipv4
from clockfabric.telemetry.rdma import RdmaCollector, _entries, _int, _numbered, _read

IFF_UP = 0x1  # net/if.h: administratively up

Ipv4 = Callable[[list[str]], dict[str, list[str]]]  # NIC names -> their 'a.b.c.d/len' (missing: not here)


def read(spec_nics: list, root: Path = Path("/"), ipv4: Ipv4 | None = None) -> dict[str, dict]:
    names = [n["name"] if isinstance(n, dict) else str(n) for n in spec_nics]
    net = root / "sys/class/net"
    present = [n for n in names if (net / n).is_dir()]
    try:
        addrs, addr_error = (ipv4 or addrs_ipv4)(present), None
    except Exception as e:  # noqa: BLE001 - no netlink here: the link facts still stand
        addrs, addr_error = {}, f"{type(e).__name__}: {e}"
    gids = RdmaCollector(root / "sys/class/infiniband").gid_table()
    out = {}
    for name in names:
        if name not in present:
            out[name] = {"present": False}
            continue
        out[name] = nic = link(net / name)
        nic["ipv4"] = addrs.get(name)
        if nic["ipv4"] is None:
            nic["ipv4_error"] = addr_error or "not in this network namespace"
        nic["rdma"] = rdma(root, name, gids)
    return out


def link(d: Path) -> dict:
    flags = _read(d / "flags")
    carrier = _read(d / "carrier")  # EINVAL while administratively down
    speed = _int(_read(d / "speed"))  # EINVAL or -1 without a link; virtual devices have none
    return {
        "present": True,
        "operstate": _read(d / "operstate"),
        "carrier": None if carrier is None else carrier == "1",
        "admin_up": None if flags is None else bool(int(flags, 16) & IFF_UP),
        "mtu": _int(_read(d / "mtu")),
        "speed_mbps": speed if speed is not None and speed > 0 else None,
        "mac": _read(d / "address"),
        "carrier_changes": _int(_read(d / "carrier_changes")),
    }


def rdma(root: Path, nic: str, gids: list[dict]) -> dict | None:
    """The NIC's RDMA port, its state and its GIDs in use; None if it has none."""
    port = next(((g["device"], g["port"]) for g in gids if g["netdev"] == nic), None) or _port_by_pci(root, nic)
    if port is None:
        return None
    device, number = port
    d = root / "sys/class/infiniband" / device / "ports" / number
    state, phys = _numbered(_read(d / "state")), _numbered(_read(d / "phys_state"))  # '4: ACTIVE'
    return {
        "device": device,
        "port": int(number),
        "state": state[1] if state else None,
        "phys_state": phys[1] if phys else None,
        "link_layer": _read(d / "link_layer"),
        "rate": _read(d / "rate"),
        "fw_ver": _read(root / "sys/class/infiniband" / device / "fw_ver"),  # firmware should match fleet-wide
        "gids": [{"index": g["index"], "gid": g["gid"], "type": g["type"], "ndev": g["netdev"]}
                 for g in gids if (g["device"], g["port"]) == port],
    }


def _port_by_pci(root: Path, nic: str) -> tuple[str, str] | None:
    """The RDMA device on the NIC's PCI function; of several ports, the one dev_port (0-based) names."""
    devices = _entries(root / "sys/class/net" / nic / "device/infiniband")
    if not devices:
        return None
    device = devices[0].name
    ports = [p.name for p in _entries(root / "sys/class/infiniband" / device / "ports", numbered=True)]
    want = str((_int(_read(root / "sys/class/net" / nic / "dev_port")) or 0) + 1)
    if want in ports:
        return device, want
    return (device, ports[0]) if len(ports) == 1 else None
