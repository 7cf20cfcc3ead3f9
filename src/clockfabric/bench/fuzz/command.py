"""`clockfabric bench fuzz`: 10^6 mutated inputs per parser (bench/fuzz/parsers.py), by a pure
Python mutation fuzzer (bench/fuzz/mutate.py), counted.

Each input is either refused cleanly (one of the parser's refusal exceptions, or a "not mine"
answer), taken, or a crash (any other exception, or a handler bug a catch-all logged): the
first few crashes are kept, hex, in the record. A sealed parser must take nothing: each
input is a mutation or a replay of a datagram it already opened. A threaded parser runs on a
loop thread of its own, which must be alive, and still take a good input, at the end.
"""

from __future__ import annotations

import queue
import sys
import threading
import time
from collections.abc import Callable, Iterator
from contextlib import contextmanager
from dataclasses import asdict, dataclass, field
from pathlib import Path
from typing import Annotated, Any

import typer
from rich.table import Table

from clockfabric.bench import harness
from clockfabric.bench.fuzz.mutate import inputs
from clockfabric.bench.fuzz.parsers import PARSERS, Parser
from clockfabric.bench.harness import BENCHMARKS, RESULTS, Target, record
from clockfabric.console import err, out, print_json, progress_bar

DEFAULT_COUNT = 1_000_000
KEPT_CRASHES = 5  # per parser: the first few, enough to reproduce
KEPT_HEX = 2048  # bytes of each kept input
BATCH = 500  # inputs handed to a loop thread at once
TAKEN, REFUSED = "taken", "refused"


@dataclass
class Tally:
    parser: str
    inputs: int = 0
    refused: int = 0
    accepted: int = 0
    crashes: int = 0
    seconds: float = 0.0
    forgeries_accepted: int | None = None  # sealed parsers only
    loop_alive: bool | None = None  # threaded parsers only
    # exceptions a finalizer raised meanwhile, which Python can only print (sys.unraisablehook):
    # not tied to one input (the collector runs when it runs), so counted apart from crashes
    unraisable: list[str] = field(default_factory=list)
    first_crashes: list[dict[str, str]] = field(default_factory=list)

    @property
    def per_s(self) -> float:
        return self.inputs / self.seconds if self.seconds else 0.0

    def as_dict(self) -> dict[str, Any]:
        return {**asdict(self), "inputs_per_s": round(self.per_s)}


def outcome(parser: Parser, data: bytes) -> str | BaseException:
    """TAKEN, REFUSED, or the exception that is a crash."""
    try:
        return TAKEN if parser.step(data) else REFUSED
    except parser.refusals:
        return REFUSED
    except Exception as e:  # noqa: BLE001 - anything else is what the fuzz looks for
        return e


class LoopThread(threading.Thread):
    """Steps a parser on each input handed to it, as the agent's control loop or the controller's
    push path does on its own thread; something escaping a step ends it, as it would that loop."""

    def __init__(self, parser: Parser):
        super().__init__(name="fuzz-loop", daemon=True)
        self.parser = parser
        self.inbox: queue.SimpleQueue[list[bytes] | None] = queue.SimpleQueue()
        self.outbox: queue.SimpleQueue[list[str | BaseException]] = queue.SimpleQueue()
        self.healthy: bool | None = None

    def run(self) -> None:
        while (batch := self.inbox.get()) is not None:
            self.outbox.put([outcome(self.parser, d) for d in batch])
        self.healthy = self.parser.healthy() if self.parser.healthy else True

    def outcomes(self, batch: list[bytes]) -> list[str | BaseException]:
        self.inbox.put(batch)
        while self.is_alive():
            try:
                return self.outbox.get(timeout=1.0)
            except queue.Empty:
                continue
        return []

    def finish(self) -> bool:
        """Whether the loop was alive at the end and then still took a good input."""
        alive = self.is_alive()
        self.inbox.put(None)
        self.join(timeout=60)
        return alive and bool(self.healthy)


def _batches(source: Iterator[bytes], count: int, deadline: float) -> Iterator[list[bytes]]:
    done = 0
    while done < count and time.monotonic() < deadline:
        batch = [next(source) for _ in range(min(BATCH, count - done))]
        done += len(batch)
        yield batch


def fuzz(name: str, parser: Parser, count: int, seconds: float | None, seed: int = 0,
         progress: Callable[[str, int, int], None] = lambda *_: None) -> Tally:
    """Feed `parser` `count` inputs (or as many as fit in `seconds`) and count what became of them."""
    tally = Tally(name, forgeries_accepted=0 if parser.sealed else None)
    loop = LoopThread(parser) if parser.threaded else None
    if loop:
        loop.start()
    source = inputs(parser.seeds, parser.structured, parser.max_size, seed)
    start = time.monotonic()
    deadline = start + seconds if seconds else float("inf")
    for batch in _batches(source, count, deadline):
        results = loop.outcomes(batch) if loop else [outcome(parser, d) for d in batch]
        if len(results) < len(batch):  # the loop thread died: what it did not answer is lost with it
            results = [*results, *[RuntimeError("the loop thread died")] * (len(batch) - len(results))]
        for data, result in zip(batch, results, strict=True):
            if result is TAKEN:
                tally.accepted += 1
            elif result is REFUSED:
                tally.refused += 1
            else:
                tally.crashes += 1
                if len(tally.first_crashes) < KEPT_CRASHES:
                    tally.first_crashes.append({"error": repr(result)[:500], "input_hex": data[:KEPT_HEX].hex(),
                                                "input_bytes": str(len(data))})
        tally.inputs += len(batch)
        progress(name, tally.inputs, count)
    tally.seconds = round(time.monotonic() - start, 3)
    if parser.sealed:
        tally.forgeries_accepted = tally.accepted
    if loop:
        tally.loop_alive = loop.finish()
    return tally


@contextmanager
def finalizer_faults() -> Iterator[list[str]]:
    """What finalizers raise meanwhile (Python prints those, sys.unraisablehook), one line each."""
    faults: list[str] = []
    hook, sys.unraisablehook = sys.unraisablehook, lambda u: faults.append(
        f"{type(u.exc_value).__name__} in a finalizer of {type(u.object).__name__}")
    try:
        yield faults
    finally:
        sys.unraisablehook = hook


def run(names: list[str], count: int, seconds: float | None, seed: int = 0,
        progress: Callable[[str, int, int], None] = lambda *_: None,
        parsers: dict[str, Callable[[], Parser]] | None = None,
        done: Callable[[Tally], None] = lambda _: None) -> list[Tally]:
    """Fuzz each named parser in turn (`parsers`: name -> factory; PARSERS by default); `done`
    is told each parser's tally as it is finished."""
    factories = parsers or {n: PARSERS.get(n).factory for n in names}
    tallies = []
    for name in names:
        with finalizer_faults() as unraisable:
            parser = factories[name]()
            try:
                tallies.append(fuzz(name, parser, count, seconds, seed, progress))
            finally:
                parser.close()
        tallies[-1].unraisable = unraisable
        done(tallies[-1])
    return tallies


def summary(tally: Tally) -> str:
    """'1,000,000 inputs, 84,595/s, 0 crashes' (and forgeries taken, the loop's state)."""
    text = f"{tally.inputs:,} inputs, {tally.per_s:,.0f}/s, {tally.crashes} crashes"
    if tally.forgeries_accepted is not None:
        text += f", {tally.forgeries_accepted} forged or replayed accepted"
    if tally.unraisable:
        text += f", {len(tally.unraisable)} exceptions in finalizers"
    if tally.loop_alive is not None:
        text += ", loop thread alive" if tally.loop_alive else ", loop thread DEAD"
    return text


def said(tally: Tally) -> None:
    """One line on stderr per parser done: a long run into a log shows where it is."""
    err.print(f"fuzz: {tally.parser}: {summary(tally)} ({tally.seconds:.0f} s)")


def table(tallies: list[Tally]) -> Table:
    t = Table(title="fuzzed inputs per parser")
    for col in ("parser", "inputs", "inputs/s", "refused", "accepted", "crashes", "forgeries accepted", "loop alive"):
        t.add_column(col, justify="left" if col == "parser" else "right")
    for x in tallies:
        t.add_row(x.parser, f"{x.inputs:,}", f"{x.per_s:,.0f}", f"{x.refused:,}", f"{x.accepted:,}", str(x.crashes),
                  "-" if x.forgeries_accepted is None else str(x.forgeries_accepted),
                  "-" if x.loop_alive is None else "yes" if x.loop_alive else "NO")
    return t


def targets(tallies: list[Tally], count: int) -> list[Target]:
    sealed = [x for x in tallies if x.forgeries_accepted is not None]
    threaded = [x for x in tallies if x.loop_alive is not None]
    return [
        Target("crashes, all parsers", sum(x.crashes for x in tallies), 0, better="lower"),
        Target("forged or replayed packets accepted", sum(x.forgeries_accepted or 0 for x in sealed), 0,
               better="lower"),
        Target("dead loop threads", sum(not x.loop_alive for x in threaded), 0, better="lower"),
        Target("inputs, the parser given fewest", min((x.inputs for x in tallies), default=0), count, "inputs"),
    ]


@BENCHMARKS.register("fuzz")
def main(count: Annotated[int, typer.Option("--count", min=1, help="Inputs per parser.")] = DEFAULT_COUNT,
         seconds: Annotated[float | None, typer.Option("--seconds", min=0.1,
                                                       help="Stop each parser after this long, if sooner.")] = None,
         only: Annotated[list[str] | None, typer.Option("--parser", help="Only this parser (repeatable).")] = None,
         seed: Annotated[int, typer.Option(help="The mutator's seed: a run repeats input for input.")] = 0,
         out_file: Annotated[Path, typer.Option("--out", help="Where the record goes.")] = RESULTS / "fuzz.json",
         as_json: Annotated[bool, typer.Option("--json", help="Print the record's report as JSON.")] = False) -> None:
    """Every parser fed --count mutated inputs (default 10^6): any crash, forgery taken or dead loop fails it."""
    names = [PARSERS.get(n).name for n in only] if only else PARSERS.names()
    facts = harness.machine()
    with progress_bar("fuzz") as progress:
        tallies = run(names, count, seconds, seed, progress, done=said)
    judged = targets(tallies, count)
    report = {"count": count, "seconds_cap": seconds, "seed": seed, "parsers": [x.as_dict() for x in tallies]}
    figures = {x.parser: summary(x) for x in tallies}
    record("fuzz", judged, facts, report, figures, path=out_file)
    if as_json:
        print_json(report)
    else:
        out.print(table(tallies))
        out.print(harness.targets_table("fuzz", judged))
    for x in tallies:
        for crash in x.first_crashes:
            err.print(f"crash in {x.parser}: {crash['error']} on {crash['input_bytes']} bytes")
        for what in sorted(set(x.unraisable)):
            err.print(f"in {x.parser}: {what} (printed by Python, not raised)")
    err.print(f"raw: {out_file}")
    if any(not t.met for t in judged[:3]):
        raise typer.Exit(1)
