"""The embedded engine: a single-node victoria-metrics bound to loopback, its data beside the
controller's database. A fleet that outgrows it gives --series-url of its own (docs/series.md)."""

from __future__ import annotations

from pathlib import Path

from clockfabric.controller.series.child import Child, binary

RETENTION = "90d"
# the series one query may select: the engine's default (300,000) refuses a fleet-wide read of one
# delay statistic past 7,500 hosts (40 paths each); this holds 50,000, and a read that large
# costs about 13 us a series of the engine's CPU (docs/series.md), not a refusal
MAX_QUERY_SERIES = 2_000_000


def engine(data_dir: Path, *, port: int = 0, retention: str = RETENTION, flags: tuple[str, ...] = ()) -> Child:
    """A victoria-metrics (not yet started) keeping its data under `data_dir`; `flags`: more of
    its own command-line flags (e.g. -storage.minFreeDiskSpaceBytes)."""
    data_dir.mkdir(parents=True, exist_ok=True)
    exe = binary("victoria-metrics")

    def argv(p: int) -> list[str]:
        return [exe, f"-storageDataPath={data_dir}", f"-httpListenAddr=127.0.0.1:{p}",
                f"-retentionPeriod={retention}", "-loggerLevel=ERROR",
                # a sample is read back as soon as it is written: "latest" means the last push
                "-search.latencyOffset=0s", "-search.disableCache",
                f"-search.maxUniqueTimeseries={MAX_QUERY_SERIES}", *flags]

    return Child("victoria-metrics", argv, data_dir / "engine.log", port=port)


def beside(database: str) -> Path:
    """Where the embedded engine keeps its data for a controller database path or URL."""
    if "://" in database:  # a PostgreSQL server: nothing on this disk to sit beside
        return Path("series-data")
    return Path(database).with_name(Path(database).name + ".series")
