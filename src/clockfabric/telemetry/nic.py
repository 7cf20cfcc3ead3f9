"""NIC counters and link state from sysfs (/sys/class/net), named as node_exporter names them.

Counters are the kernel's own (statistics/*, carrier_changes), so a scrape-based system
sees every flap even between scrapes; the moment of each flap comes from the netlink
watcher (`links`). In a lab namespace `ip netns exec` mounts the namespace's own /sys.
"""

from __future__ import annotations

from pathlib import Path

from clockfabric.telemetry.base import COLLECTORS, Collector, CollectorContext, Metric

# statistics file -> node_exporter metric
COUNTERS = {
    "rx_bytes": "node_network_receive_bytes_total",
    "tx_bytes": "node_network_transmit_bytes_total",
    "rx_packets": "node_network_receive_packets_total",
    "tx_packets": "node_network_transmit_packets_total",
    "rx_errors": "node_network_receive_errs_total",
    "tx_errors": "node_network_transmit_errs_total",
    "rx_dropped": "node_network_receive_drop_total",
    "tx_dropped": "node_network_transmit_drop_total",
}


def _read(path: Path) -> str | None:
    try:
        return path.read_text().strip()
    except OSError:  # e.g. speed of a link that is down: EINVAL
        return None


class NicCollector(Collector):
    name = "nic"

    def __init__(self, devices: list[str] | None = None, root: Path = Path("/sys/class/net")):
        self.root = root
        self.devices = devices  # None: every device but loopback

    def absent(self) -> str | None:
        if not self.root.is_dir():
            return f"no {self.root}"
        return None if self._devices() else "no network devices"

    def _devices(self) -> list[str]:
        if self.devices is not None:
            return [d for d in self.devices if (self.root / d).is_dir()]
        return sorted(p.name for p in self.root.iterdir() if p.name != "lo")

    def collect(self) -> list[Metric]:
        out = []
        for dev in self._devices():
            d = self.root / dev
            labels = {"device": dev}
            for stat, metric in COUNTERS.items():
                if (v := _read(d / "statistics" / stat)) is not None:
                    out.append(Metric(metric, float(v), labels, "counter", f"{stat} from sysfs statistics"))
            if (v := _read(d / "carrier_changes")) is not None:
                out.append(Metric("node_network_carrier_changes_total", float(v), labels, "counter",
                                  "Times the link went up or down"))
            if (v := _read(d / "carrier")) is not None:
                out.append(Metric("node_network_carrier", float(v), labels, help="1 if the link has carrier"))
            operstate = _read(d / "operstate") or "unknown"
            out.append(Metric("node_network_up", float(operstate == "up"), labels, help="1 if operstate is up"))
            if (v := _read(d / "speed")) is not None and int(v) > 0:
                out.append(Metric("node_network_speed_bytes", int(v) * 1e6 / 8, labels,
                                  help="Link speed the driver reports, bytes per second"))
        return out


class NicRates:
    """Each NIC's bits a second sent and received since the last read, from the kernel's byte
    counters: every packet that crossed the host's own link, whoever sent it."""

    def __init__(self, devices: list[str], root: Path = Path("/sys/class/net")):
        self.root = root
        self.devices = devices
        self._last: dict[str, tuple[float, int, int]] = {}  # device -> (when, tx bytes, rx bytes)

    def read(self, now_s: float) -> dict[str, tuple[float, float]]:
        """device -> (tx, rx) bits a second since the last read; a device read first, or whose
        counters went back (a NIC reset), has none yet."""
        out = {}
        for dev in self.devices:
            tx, rx = (_read(self.root / dev / "statistics" / f"{d}_bytes") for d in ("tx", "rx"))
            if tx is None or rx is None:
                self._last.pop(dev, None)
                continue
            before, self._last[dev] = self._last.get(dev), (now_s, int(tx), int(rx))
            if before is not None and now_s > before[0] and int(tx) >= before[1] and int(rx) >= before[2]:
                span = now_s - before[0]
                out[dev] = ((int(tx) - before[1]) * 8 / span, (int(rx) - before[2]) * 8 / span)
        return out


@COLLECTORS.register("nic", help="NIC counters and link state from sysfs, as node_exporter names them")
def nic_collector(ctx: CollectorContext) -> NicCollector:
    return NicCollector(ctx.rails)
