"""What `bench rootcause` shows from its cases' records: accuracy per class and per tier, the
confusion matrix (true class x verdict), the time to name, healthy cases' false verdicts and
the located link's share right. Pure: records in, figures and rich tables out."""

from __future__ import annotations

from rich.table import Table

from clockfabric.bench.rootcause.draw import HEALTHY

QUEUED = ("congestion_other_job", "congestion_non_job", "degraded_link")  # a queue on the fault's link
NO_VERDICT = "(none)"  # a case that ended before any verdict (its error recorded)


def share(rows: list[dict], key: str = "right") -> float | None:
    return round(100 * sum(bool(r.get(key)) for r in rows) / len(rows), 1) if rows else None


def by(rows: list[dict], key: str) -> dict[str, dict]:
    """Per value of `key`: cases, right, and the share right in %."""
    out: dict[str, dict] = {}
    for value in sorted({r[key] for r in rows}):
        mine = [r for r in rows if r[key] == value]
        out[value] = {"cases": len(mine), "right": sum(bool(r.get("right")) for r in mine), "percent": share(mine)}
    return out


def confusion(rows: list[dict]) -> dict[str, dict[str, int]]:
    """True class -> verdict -> cases."""
    out: dict[str, dict[str, int]] = {}
    for r in rows:
        verdict = r.get("verdict") or NO_VERDICT
        out.setdefault(r["kind"], {})[verdict] = out.setdefault(r["kind"], {}).get(verdict, 0) + 1
    return out


def p90(values: list[float]) -> float | None:
    """The nearest-rank 90th percentile."""
    if not values:
        return None
    ordered = sorted(values)
    return ordered[min(len(ordered) - 1, max(0, -(-9 * len(ordered) // 10) - 1))]


def summary(rows: list[dict]) -> dict:
    faults = [r for r in rows if r["kind"] != HEALTHY]
    named = [r["named_s"] for r in faults if r.get("named_s") is not None]
    healthy = [r for r in rows if r["kind"] == HEALTHY]
    queued = [r for r in rows if r["kind"] in QUEUED]
    per_class, per_tier = by(rows, "kind"), by(faults, "tier")
    return {"cases": len(rows), "right": sum(bool(r.get("right")) for r in rows), "right_percent": share(rows),
            "worst_class_percent": min((v["percent"] for v in per_class.values()), default=None),
            "worst_tier_percent": min((v["percent"] for v in per_tier.values()), default=None),
            "named_p90_s": p90(named), "named": len(named),
            "healthy_cases": len(healthy),
            "healthy_false_verdicts": sum(r.get("verdict") not in (HEALTHY, None) for r in healthy),
            "queued_cases": len(queued), "located_percent": share(queued, "named_right"),
            "ambiguous": sum(len(r.get("links") or []) > 1 for r in faults),
            "ambiguous_with_truth": sum(bool(r.get("named_among")) for r in faults),
            "ambiguous_twins": sum(len(r.get("links") or []) > 1 and bool(r.get("named_right")) for r in faults),
            "errors": sum(bool(r.get("error")) for r in rows),
            "cost_s": round(sum(r.get("cost_s", 0.0) for r in rows), 1),
            "per_class": per_class, "per_tier": per_tier, "confusion": confusion(rows)}


def accuracy_table(title: str, per: dict[str, dict]) -> Table:
    table = Table(title=title)
    for col in ("", "cases", "right", "%"):
        table.add_column(col, justify="left" if not col else "right")
    for name, v in per.items():
        table.add_row(name, str(v["cases"]), str(v["right"]), f"{v['percent']:g}")
    return table


def confusion_table(matrix: dict[str, dict[str, int]]) -> Table:
    """Rows: the true class; columns: the verdicts given; cells: cases ('.' for none)."""
    verdicts = sorted({v for row in matrix.values() for v in row})
    table = Table(title="confusion: true class (rows) x verdict (columns)")
    table.add_column("truth")
    for v in verdicts:
        table.add_column(v.replace("_", " "), justify="right")
    for truth in sorted(matrix):
        table.add_row(truth, *(str(matrix[truth].get(v, ".")) for v in verdicts))
    return table
