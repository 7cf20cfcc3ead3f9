"""`clockfabric bench rootcause --random`: `job why` judged on random cases, each its own fabric
(2-4 leaves, 2-4 spines, 1-2 planes, 4-12 hosts, one FIFO a port or traffic classes), 1-3 jobs
and one fault of a random class at a random tier and intensity (draw.py), run one after another
on a lab of its own (case.py). Targets: right (verdict and link or host) >= 95% with no class
and no tier under 90%; named p90 <= 10 s; no verdict but healthy in healthy cases; the located
link right in >= 95% of the cases with a queue on the fault's link."""

from __future__ import annotations

import random
import time
from pathlib import Path

import typer

from clockfabric.bench.harness import BENCHMARKS, RESULTS, Target, machine, record, targets_table
from clockfabric.bench.rootcause.draw import draw
from clockfabric.bench.rootcause.report import accuracy_table, confusion_table, summary
from clockfabric.console import out, print_json
from clockfabric.errors import ClockfabricError

LAB = "rcbench"


def run(seed: int, indexes: list[int], watch_s: float, lab: str, say, keep) -> list[dict]:
    """Each drawn case of `indexes` in turn; one line as each ends, and the record so far kept (`keep(rows)`)."""
    from clockfabric.bench.rootcause.case import run_case

    rows = []
    cases = len(indexes)
    for n, i in enumerate(indexes):
        case = draw(seed, i)
        row = run_case(case, lab, watch_s)
        rows.append(row)
        named = f", named in {row['named_s']:.1f} s" if row.get("named_s") is not None else ""
        error = f" ({row['error'][:160]})" if row.get("error") else ""
        say(f"case {n + 1}/{cases} (#{i}) {case.fault.kind} at {case.fault.tier}: {row.get('verdict')} "
            f"{'right' if row['right'] else 'WRONG'}{named}, {row['cost_s']:.0f} s{error}")
        keep(rows)
    return rows


def targets(found: dict) -> list[Target]:
    ambiguous = (f"{found.get('ambiguous', 0)} verdicts named links the evidence could not tell apart: "
                 f"{found.get('ambiguous_twins', 0)} the fault's and the links no path tells from it (right), "
                 f"{found.get('ambiguous_with_truth', 0)} more with the fault's among them (not right)")
    return [Target(f"right (verdict and link or host), {found['cases']} cases", found["right_percent"], 95.0, "%",
                   note=ambiguous),
            Target("worst class right", found["worst_class_percent"], 90.0, "%"),
            Target("worst tier right", found["worst_tier_percent"], 90.0, "%"),
            Target("fault named after its onset, p90", found["named_p90_s"], 10.0, "s", better="lower"),
            Target(f"verdicts but healthy in {found['healthy_cases']} healthy cases", found["healthy_false_verdicts"],
                   0, better="lower"),
            Target(f"located link right, {found['queued_cases']} cases queueing on the fault's link",
                   found["located_percent"], 95.0, "%")]


@BENCHMARKS.register("rootcause")
def main(random_cases: bool = typer.Option(False, "--random", help="Random cases: the only mode there is."),
         seed: int | None = typer.Option(None, help="Seed of the draw; without it one is drawn and recorded."),
         cases: int = typer.Option(20, "--cases", min=1, help="Cases to draw and run."),
         only: str = typer.Option("", "--only", help="Replay these cases of the seed's draw (their index in "
                                                      "the record, comma-separated), not the first --cases."),
         watch_s: float = typer.Option(20.0, "--watch", min=5.0, help="Seconds each fault is watched."),
         out_file: Path = typer.Option(RESULTS / "rootcause.json", "--out", help="Where the record goes."),
         as_json: bool = typer.Option(False, "--json", help="Print the report as JSON.")) -> None:
    if not random_cases:
        raise ClockfabricError("bench rootcause draws its cases: give --random (with --seed S to replay a draw)")
    if only and seed is None:
        raise ClockfabricError("--only replays cases of one draw: give its --seed too (the record's `seed`)")
    try:
        indexes = sorted({int(i) for i in only.split(",")}) if only else list(range(cases))
    except ValueError:
        raise ClockfabricError(f"--only {only!r}: give case indexes, comma-separated (e.g. 6,20)") from None
    if indexes and indexes[0] < 0:
        raise ClockfabricError(f"--only {only!r}: case indexes start at 0")
    cases = len(indexes)
    seed = random.SystemRandom().randrange(10**6) if seed is None else seed
    facts = machine()
    say = (lambda line: None) if as_json else out.print
    say(f"seed {seed}, {cases} cases")
    started = time.monotonic()

    def keep(rows: list[dict]) -> dict:
        """The record of the cases run so far: an interrupted run keeps what it measured."""
        found = summary(rows)
        report = {"seed": seed, "cases": rows, "summary": found, "wall_s": round(time.monotonic() - started, 1)}
        record("rootcause", targets(found), facts, report,
               figures={"seed": seed, **{k: v for k, v in found.items() if k not in ("confusion", "per_class",
                                                                                      "per_tier")}},
               path=out_file)
        return report

    report = keep(run(seed, indexes, watch_s, LAB, say, keep))
    found = report["summary"]
    if as_json:
        print_json(report)
        return
    out.print(targets_table(f"rootcause, seed {seed}", targets(found)))
    out.print(accuracy_table("right per class", found["per_class"]))
    out.print(accuracy_table("right per tier", found["per_tier"]))
    out.print(confusion_table(found["confusion"]))
