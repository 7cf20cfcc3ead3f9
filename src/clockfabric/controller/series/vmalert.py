"""vmalert on loopback: the shipped rules (controller/rules) evaluated against the series engine,
their alerts posted to the Alertmanagers the controller posts to. Without it a controller alone
raises no rule's alert (docs/alerts.md: a threshold on a series is a rule).

Recording rules are written back to the engine (-remoteWrite.url) and an alert's pending time
restored from it after a restart (-remoteRead.url); vmalert keeps no data of its own.
"""

from __future__ import annotations

from collections.abc import Sequence
from dataclasses import dataclass
from pathlib import Path

from clockfabric.controller.rules import BRIDGE, RULES
from clockfabric.controller.series.child import Child, binary

INTERVAL_S = 30.0


def rule_files(given: Sequence[Path] = ()) -> list[Path]:
    """The shipped rules, or an operator's own files instead; the engine bridge always."""
    return [*(given or [RULES]), BRIDGE]


@dataclass(frozen=True)
class RuleOptions:
    """`notifiers`: the Alertmanagers' URLs; `files`: rules instead of the shipped ones;
    `external_url`: the controller's URL (an alert's source link is its dashboard)."""
    notifiers: tuple[str, ...]
    files: tuple[Path, ...] = ()
    interval_s: float = INTERVAL_S
    external_url: str = ""


def vmalert(work_dir: Path, engine_url: str, opts: RuleOptions) -> Child:
    """A vmalert (not yet started) reading and writing `engine_url`."""
    work_dir.mkdir(parents=True, exist_ok=True)
    exe = binary("vmalert", "give --no-rules where your own vmalert or Prometheus evaluates the rules")
    engine = engine_url.rstrip("/")
    flags = [f"-rule={p}" for p in rule_files(opts.files)] + [f"-notifier.url={u}" for u in opts.notifiers]
    if opts.external_url:  # generatorURL: the dashboard, as the controller's own alerts give
        flags += [f"-external.url={opts.external_url.rstrip('/')}", "-external.alert.source=dashboard/"]
    interval_s = opts.interval_s

    def argv(p: int) -> list[str]:
        return [exe, f"-httpListenAddr=127.0.0.1:{p}", f"-datasource.url={engine}",
                f"-remoteWrite.url={engine}", f"-remoteRead.url={engine}", f"-evaluationInterval={interval_s:g}s",
                # recorded series reach the engine within a second, not vmalert's default 5 s
                "-remoteWrite.flushInterval=1s", "-loggerLevel=ERROR", *flags]

    return Child("vmalert", argv, work_dir / "vmalert.log")
