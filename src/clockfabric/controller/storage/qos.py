"""Jobs' QoS policies (clockfabric.qos.policy): one row per job id, set, replaced or cleared by the
operator; the same SQL for SQLite and PostgreSQL. Kept whether or not the job runs yet."""

from __future__ import annotations

SCHEMA = """
CREATE TABLE IF NOT EXISTS qos_policies (
    jobid TEXT PRIMARY KEY, class TEXT NOT NULL, weight INTEGER NOT NULL, override_dscp BOOLEAN NOT NULL,
    set_ns BIGINT NOT NULL);
"""
COLS = "jobid, class, weight, override_dscp, set_ns"


class QosPolicies:
    """SqlStorage's QoS rows (a mixin: it brings _write, _fetch and _q)."""

    def set_qos(self, jobid: str, qos_class: str, weight: int, override_dscp: bool, now_ns: int) -> None:
        """The job's policy, replacing any it had."""
        with self._write() as cur:  # type: ignore[attr-defined]
            cur.execute(self._q(f"INSERT INTO qos_policies ({COLS}) VALUES (?, ?, ?, ?, ?) "  # type: ignore[attr-defined]
                                "ON CONFLICT (jobid) DO UPDATE SET class = excluded.class, weight = excluded.weight, "
                                "override_dscp = excluded.override_dscp, set_ns = excluded.set_ns"),
                        (jobid, qos_class, weight, override_dscp, now_ns))

    def clear_qos(self, jobid: str) -> bool:
        """Forget the job's policy; False if it had none."""
        with self._write() as cur:  # type: ignore[attr-defined]
            cur.execute(self._q("DELETE FROM qos_policies WHERE jobid = ?"), (jobid,))  # type: ignore[attr-defined]
            return cur.rowcount > 0

    def qos_policies(self) -> list[tuple[str, str, int, bool, int]]:
        """(jobid, class, weight, override_dscp, set_ns) of every policy, by job id."""
        found = self._fetch(f"SELECT {COLS} FROM qos_policies")  # type: ignore[attr-defined]
        return sorted((str(j), str(c), int(w), bool(o), int(t)) for j, c, w, o, t in found)
