"""`clockfabric job why`'s page: the verdict, its evidence, and each flow as judged."""

from __future__ import annotations

from rich.table import Table

from clockfabric.console import out


def _mbit(bps: float | None) -> str:
    return "-" if bps is None else f"{bps / 1e6:.1f}"


def show_why(found: dict) -> None:
    out.print(f"[bold]{found['sentence']}[/]")
    ratio = found.get("throughput_ratio")
    if ratio is not None:
        out.print(f"  throughput now {ratio:.0%} of the window's start")
    for key, value in found["evidence"].items():
        if key not in ("slow_flows", "flows") or not isinstance(value, list):
            out.print(f"  {key}: {value}")
    for late in found.get("late", []):
        apart = "" if late["spacing_s"] is None else f" {late['spacing_s']:g} s apart"
        out.print(f"  [yellow]late:[/] {late['host']}'s readings come{apart} (the job's other hosts' "
                  f"{late['usual_spacing_s']:g} s), the newest {late['newest_age_s']:g} s old: its flows are "
                  "judged on fewer, older readings")
    t = Table(title=f"{len(found['flows'])} flows that sent, their latest readings")
    for col in ("host", "flow", "peer", "plane", "links", "Mbit/s", "delay us", "from", "probe floor us", "judged"):
        t.add_column(col)
    for f in found["flows"]:
        state = "slow (network)" if f["network_slow"] else "starved" if f["starved"] else "ok"
        t.add_row(f["host"], f["flow"], f["peer"] or "?", "-" if f["plane"] is None else str(f["plane"]),
                  ", ".join(f["links"]) or "-", _mbit(f["rate_bps"]),
                  "-" if f["delay_us"] is None else f"{f['delay_us']:.0f}", f["delay_source"],
                  "-" if f["probe_floor_us"] is None else f"{f['probe_floor_us']:.0f}",
                  state + ("" if not f["why"] else ": " + "; ".join(f["why"])))
    out.print(t)
