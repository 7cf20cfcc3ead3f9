"""Flapping: `count` downs and ups of one link within `window`; quiet for `window` resolves it.

Per reporting end, the detector keeps the transitions of the current episode: a run of
transitions with gaps shorter than the window. A gap of a whole window ends an episode, so
whatever came before it can never count again and is dropped. Both ends of one cable see
the same flaps: the link's finding shows the end that saw the most.
"""

from __future__ import annotations

import bisect
from collections.abc import Iterable
from dataclasses import dataclass
from typing import ClassVar

from clockfabric.controller.detectors.base import DETECTORS, Detector, DetectorContext, Finding, format_ns
from clockfabric.controller.detectors.config import DetectorConfig, Keys, S, duration_ns, positive_int
from clockfabric.controller.storage.base import Event
from clockfabric.topology.model import Port

UPNESS = {"link_down": False, "link_up": True}
EPISODE_MAX = 1000  # transitions kept per end: a link that flaps for days stays bounded
DETAIL_MAX = 50  # transitions shown in a finding


@dataclass(frozen=True)
class FlappingConfig(DetectorConfig):
    count: int = 3  # transitions (downs and ups) ...
    window_ns: int = 60 * S  # ... within this long; quiet this long resolves

    KEYS: ClassVar[Keys] = {"count": ("count", positive_int), "window": ("window_ns", duration_ns)}


@DETECTORS.register("flapping", help="Downs and ups of one link, `count` within `window`")
class Flapping(Detector[FlappingConfig]):
    config_type = FlappingConfig

    def __init__(self, config: FlappingConfig, ctx: DetectorContext):
        super().__init__(config, ctx)
        self.links = ctx.links
        self.episodes: dict[Port, list[tuple[int, bool]]] = {}  # end -> sorted (t_ns, up)

    def on_events(self, events: Iterable[Event], now_ns: int) -> None:
        for e in events:
            if e.kind not in UPNESS or not e.device:
                continue
            episode = self.episodes.setdefault(Port(e.host, e.device), [])
            item = (e.t_ns, UPNESS[e.kind])
            i = bisect.bisect_left(episode, item)
            if i == len(episode) or episode[i] != item:  # the same report twice is one transition
                episode.insert(i, item)
        window = self.config.window_ns
        for port, episode in list(self.episodes.items()):
            gaps = [i for i in range(1, len(episode)) if episode[i][0] - episode[i - 1][0] >= window]
            del episode[:max(gaps[-1] if gaps else 0, len(episode) - EPISODE_MAX)]
            if episode[-1][0] <= now_ns - window:  # quiet for a window: the episode is over
                del self.episodes[port]

    def findings(self, now_ns: int) -> list[Finding]:
        by_link: dict[str, list[tuple[Port, list[tuple[int, bool]]]]] = {}
        for port, episode in self.episodes.items():
            if episode[-1][0] > now_ns - self.config.window_ns and self._crossed(episode):
                by_link.setdefault(self.links.key(port.node, port.iface), []).append((port, episode))
        return [self._finding(key, *max(ends, key=lambda pe: (len(pe[1]), pe[0])), now_ns)
                for key, ends in sorted(by_link.items())]

    def _crossed(self, episode: list[tuple[int, bool]]) -> bool:
        n, window = self.config.count, self.config.window_ns
        return any(episode[i + n - 1][0] - episode[i][0] <= window for i in range(len(episode) - n + 1))

    def _finding(self, key: str, port: Port, episode: list[tuple[int, bool]], now_ns: int) -> Finding:
        downs, down_since = [], None  # completed down durations; the start of one still going
        for t_ns, up in episode:
            if not up:
                down_since = t_ns
            elif down_since is not None:
                downs.append(t_ns - down_since)
                down_since = None
        window = self.config.window_ns
        recent = sum(1 for t, _ in episode if t > now_ns - window)
        state = f", down for {format_ns(now_ns - down_since)} now" if down_since is not None else ""
        return Finding(
            key=f"flapping:{key}", kind="flapping", severity=self.config.severity,
            message=(f"link {key} is flapping: {len(episode)} transitions seen at {port}, "
                     f"{recent} in the last {format_ns(window)}{state}"),
            detail={"link": key if key in self.links.by_name else None, "end": str(port),
                    "transitions": len(episode), "in_window": recent, "window_ns": window,
                    "times_ns": [[t, "up" if up else "down"] for t, up in episode[-DETAIL_MAX:]],
                    "down_durations_ns": downs[-DETAIL_MAX:], "down_since_ns": down_since})
