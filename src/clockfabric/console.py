"""Terminal plumbing for commands and benchmarks: consoles, JSON, progress bars, and the preconditions of lab verbs."""

from __future__ import annotations

import json
import os
import shutil
import sys
from collections.abc import Callable, Iterator
from contextlib import contextmanager

from rich.console import Console
from rich.progress import BarColumn, MofNCompleteColumn, Progress, TaskID, TextColumn, TimeElapsedColumn

from clockfabric.errors import ClockfabricError

# results; into a pipe or a file, Rich would cut tables to 80 columns: give them room instead
out = Console(width=None if sys.stdout.isatty() else 200)
# progress, notes, errors: stdout stays clean for --json; into a log, a progress line stays one line
err = Console(stderr=True, width=None if sys.stderr.isatty() else 200)


def print_json(data: object) -> None:
    sys.stdout.write(json.dumps(data, indent=2, default=str) + "\n")


@contextmanager
def progress_bar(label: str) -> Iterator[Callable[[str, int, int], None]]:
    """A progress callback (stage, done, total) drawn on stderr; silent when not a terminal."""
    with Progress(TextColumn(f"{label} [bold]{{task.description}}"), BarColumn(), MofNCompleteColumn(),
                  TimeElapsedColumn(), console=err, transient=True, disable=not err.is_terminal) as bar:
        tasks: dict[str, TaskID] = {}

        def update(stage: str, done: int, total: int) -> None:
            if stage not in tasks:
                tasks[stage] = bar.add_task(stage, total=total)
            bar.update(tasks[stage], completed=done, total=total)

        yield update


def require_root() -> None:
    if not os.path.exists("/proc/self/ns/net"):
        raise ClockfabricError("this kernel has no network namespaces; the lab needs CONFIG_NET_NS")
    if os.geteuid() != 0:
        raise ClockfabricError("the lab makes network namespaces, which needs root; run it with sudo")


def require_tool(name: str, package: str) -> None:
    if shutil.which(name) is None:
        raise ClockfabricError(f"{name} is not installed; run `make setup` or `apt-get install {package}`")
