"""RDMA ports from sysfs (/sys/class/infiniband): state, rate, counters, and the RoCE GID table.

Each port lives at <root>/<device>/ports/<n>/. Its counters are the adapter's own, so a link
that went down and up between two scrapes still shows in link_downed. A file that cannot be
read or parsed (a vanished port, a driver quirk) drops that one sample, never the collector.
"""

from __future__ import annotations

import re
from pathlib import Path

from clockfabric.telemetry.base import COLLECTORS, Collector, CollectorContext, Metric

P = "clockfabric_rdma_"
# PortRcvData / PortXmitData count 4-byte words (IB spec, PortCounters), and sysfs passes
# them through unscaled: bytes = words * 4.
WORD_COUNTERS = {"port_rcv_data", "port_xmit_data"}
# hw_counters entries that are not counts: mlx5's lifespan is how long (ms) a read is
# cached; bnxt_re's active_* and watermark_* are resources in use and their peaks.
HW_GAUGE_PREFIXES = ("active_", "watermark_")
HW_SKIP = {"lifespan"}
ZERO_GID = "0000:0000:0000:0000:0000:0000:0000:0000"  # an unused slot of the GID table


def _read(path: Path) -> str | None:
    try:
        return path.read_text().strip()
    except (OSError, ValueError):  # gone, a directory, EINVAL (unused GID slot), not text
        return None


def _int(text: str | None) -> int | None:
    try:
        return int(text) if text is not None else None
    except ValueError:
        return None


def _numbered(text: str | None) -> tuple[int, str] | None:
    """'4: ACTIVE' -> (4, 'ACTIVE')."""
    m = re.fullmatch(r"(\d+):\s*(.*)", text or "")
    return (int(m[1]), m[2]) if m else None


def _rate_bytes(text: str | None) -> float | None:
    """'100 Gb/sec (4X EDR)' -> 12.5e9 bytes per second."""
    m = re.match(r"([\d.]+) Gb/sec", text or "")
    return float(m[1]) * 1e9 / 8 if m else None


def _metric_name(file: str) -> str:
    return re.sub(r"[^a-z0-9_]", "_", file.lower())


def _entries(d: Path, numbered: bool = False) -> list[Path]:
    """What d holds (nothing if d is missing), by name; numbered: only entries named 0, 1, ... in order."""
    try:
        found = list(d.iterdir())
    except OSError:
        return []
    if numbered:
        return sorted((p for p in found if p.name.isdigit()), key=lambda p: int(p.name))
    return sorted(found)


class RdmaCollector(Collector):
    name = "rdma"

    def __init__(self, root: Path = Path("/sys/class/infiniband")):
        self.root = root

    def absent(self) -> str | None:
        if not self.root.is_dir():
            return f"no {self.root}"
        return None if self._ports() else f"no RDMA ports under {self.root}"

    def _ports(self) -> list[tuple[str, str, Path]]:
        """(device, port, its directory) for every port of every device."""
        return [(dev.name, port.name, port) for dev in sorted(self.root.iterdir())
                for port in _entries(dev / "ports", numbered=True) if port.is_dir()]

    def collect(self) -> list[Metric]:
        out = []
        for dev, port, d in self._ports():
            out += self._port(d, {"device": dev, "port": port})
            out += [Metric(P + "gid_info", 1.0,
                           {"device": dev, "port": port, "gid_index": str(g["index"]), "gid": g["gid"],
                            "type": g["type"] or "", "netdev": g["netdev"] or ""},
                           help="One per GID table entry in use; value is always 1")
                    for g in self._gids(dev, port, d)]
        return out

    def _port(self, d: Path, labels: dict[str, str]) -> list[Metric]:
        out = []
        state, phys, rate = _numbered(_read(d / "state")), _numbered(_read(d / "phys_state")), _read(d / "rate")
        if state:
            out.append(Metric(P + "port_state", state[0], labels,
                              help="Logical port state: 1 down, 2 init, 3 armed, 4 active, 5 active defer"))
        if phys:
            out.append(Metric(P + "port_phys_state", phys[0], labels,
                              help="Physical port state: 2 polling, 3 disabled, 4 training, 5 link up, "
                                   "6 error recovery"))
        if (bps := _rate_bytes(rate)) is not None:
            out.append(Metric(P + "port_rate_bytes_per_second", bps, labels,
                              help="Port rate the adapter reports, bytes per second"))
        out.append(Metric(P + "port_info", 1.0,
                          {**labels, "state": state[1] if state else "", "phys_state": phys[1] if phys else "",
                           "rate": rate or "", "link_layer": _read(d / "link_layer") or ""},
                          help="The port's state, rate and link layer as text; value is always 1"))
        for f in _entries(d / "counters"):
            if (v := _int(_read(f))) is None:
                continue
            name = _metric_name(f.name)
            if name in WORD_COUNTERS:
                out.append(Metric(f"{P}{name}_bytes_total", v * 4, labels, "counter",
                                  f"{f.name} from sysfs counters, 4-byte words converted to bytes"))
            else:
                out.append(Metric(f"{P}{name}_total", v, labels, "counter", f"{f.name} from sysfs counters"))
        for f in _entries(d / "hw_counters"):
            if f.name in HW_SKIP or (v := _int(_read(f))) is None:
                continue
            name = _metric_name(f.name)
            if name.startswith(HW_GAUGE_PREFIXES):
                out.append(Metric(f"{P}hw_{name}", v, labels, help=f"{f.name} from sysfs hw_counters"))
            else:
                out.append(Metric(f"{P}hw_{name}_total", v, labels, "counter", f"{f.name} from sysfs hw_counters"))
        return out

    def _gids(self, dev: str, port: str, d: Path) -> list[dict]:
        out = []
        attrs = d / "gid_attrs"
        for f in _entries(d / "gids", numbered=True):
            if (gid := _read(f)) is None or gid == ZERO_GID:
                continue
            out.append({"device": dev, "port": port, "index": int(f.name), "gid": gid,
                        "type": _read(attrs / "types" / f.name),  # "IB/RoCE v1" or "RoCE v2"
                        "netdev": _read(attrs / "ndevs" / f.name)})  # None on InfiniBand ports
        return out

    def gid_table(self) -> list[dict]:
        """The GID entries in use on every port, as plain data: device, port, index, gid, type, netdev."""
        if not self.root.is_dir():
            return []
        return [g for dev, port, d in self._ports() for g in self._gids(dev, port, d)]


@COLLECTORS.register("rdma", help="RDMA ports from sysfs: state, rate, counters, RoCE GIDs")
def rdma_collector(ctx: CollectorContext) -> RdmaCollector:
    return RdmaCollector()
