"""Link state and flaps as metrics, from the netlink watcher (link_watcher.py)."""

from __future__ import annotations

from clockfabric.telemetry.base import COLLECTORS, Collector, CollectorContext, Metric
from clockfabric.telemetry.link_watcher import LinkWatcher


class LinkCollector(Collector):
    """Link state and flaps as metrics, from a LinkWatcher (its own, started on first use,
    unless one is given)."""

    name = "links"

    def __init__(self, watcher: LinkWatcher | None = None, devices: list[str] | None = None, *,
                 flap_window_s: float = 60.0, netns: str | None = None):
        self.watcher = watcher
        self._own = watcher is None
        self._flap_window_s, self._netns = flap_window_s, netns
        self.devices = devices

    def absent(self) -> str | None:
        if self.watcher is None:
            try:
                self.watcher = LinkWatcher(self.devices, flap_window_s=self._flap_window_s, netns=self._netns).start()
            except Exception as e:  # noqa: BLE001 - no netlink here: the collector is absent, not broken
                return f"cannot watch netlink link events: {e}"
        elif not self.watcher.running:
            try:
                self.watcher.start()
            except Exception as e:  # noqa: BLE001
                return f"cannot watch netlink link events: {e}"
        return None

    def close(self) -> None:
        if self._own and self.watcher is not None:
            self.watcher.stop()

    def collect(self) -> list[Metric]:
        w = self.watcher
        if w is None or not w.running:
            raise RuntimeError("link watcher is not running")
        snap = w.snapshot()
        out = []
        for device, d in snap["devices"].items():
            labels = {"device": device}
            if d["state"] is not None:
                out.append(Metric("clockfabric_link_up", float(d["state"]["up"]), labels,
                                  help="1 if the link is up (admin up, operstate up), from netlink"))
            out.append(Metric("clockfabric_link_transitions_total", float(d["transitions"]), labels, "counter",
                              "Link state changes seen by netlink events since the agent started"))
            if d["last_change_ns"] is not None:
                out.append(Metric("clockfabric_link_last_change_timestamp_seconds", d["last_change_ns"] / 1e9,
                                  labels, help="When the link's state last changed (Unix time, seconds)"))
            out.append(Metric("clockfabric_link_flaps_in_window", float(d["count"]), labels,
                              help=f"Downs and ups of the link in the last {d['window_s']:g} s"))
            if d["down_durations_s"]:
                out.append(Metric("clockfabric_link_last_down_duration_seconds", d["down_durations_s"][-1], labels,
                                  help="How long the link's last finished down period lasted"))
        out.append(Metric("clockfabric_link_events_dropped_total", float(snap["dropped"]), {}, "counter",
                          "Link transitions pushed out of the watcher's bounded history"))
        return out


@COLLECTORS.register("links", help="Link state and flaps from netlink events")
def links_collector(ctx: CollectorContext) -> LinkCollector:
    return LinkCollector(ctx.links, ctx.rails)
