"""`clockfabric bench ...`: every registered benchmark (clockfabric.bench.harness.BENCHMARKS) as
a command with its own options; with no name, the list; `bench report`, the benchmarks page.

The benchmarks are declared (bench/all.py): each is listed by its help, and its module, with its
command and options, is imported only when it runs (or its `--help` is asked for)."""

from __future__ import annotations

from pathlib import Path

import typer
from rich.table import Table

from clockfabric.bench.harness import BENCHMARKS, RESULTS
from clockfabric.console import err, out

app = typer.Typer(help="Benchmarks, each against a baseline or an expectation in the same run. "
                       "With no name: the list.", invoke_without_command=True)


@app.callback()
def listing(ctx: typer.Context) -> None:
    if ctx.invoked_subcommand is not None:
        return
    table = Table(title="clockfabric bench NAME (--help for its options)", show_header=False, box=None)
    for entry in BENCHMARKS.entries():
        where = " [dim](on a lab that is up)[/]" if entry.meta.get("running_lab") else ""
        table.add_row(f"[bold]{entry.name}[/]", entry.help + where)
    table.add_row("[bold]report[/]", "Render docs/benchmarks.md from bench/results/*.json (no benchmark runs).")
    out.print(table)


def _deferred(name: str):
    """A listed benchmark: its command built from its module, and run with its arguments, when it is called."""
    def run(ctx: typer.Context) -> None:
        one = typer.Typer(add_completion=False, pretty_exceptions_enable=False)
        one.command(name)(BENCHMARKS.get(name).factory)
        code = one(ctx.args, prog_name=ctx.command_path, standalone_mode=False)
        if isinstance(code, int) and code:  # its typer.Exit(code), which comes back as the code: passed on
            raise typer.Exit(code)
    return run


for _entry in BENCHMARKS.entries():
    app.command(_entry.name, help=_entry.help, add_help_option=False,
                context_settings={"allow_extra_args": True, "ignore_unknown_options": True})(_deferred(_entry.name))


@app.command("report")
def report(results: Path = typer.Option(RESULTS, "--results", help="The records to render."),
           page: Path = typer.Option(Path("docs/benchmarks.md"), "--out", help="The page to write."),
           check: bool = typer.Option(False, "--check", help="Write nothing: fail if the page is not what the "
                                                            "records render.")) -> None:
    """Render docs/benchmarks.md from the benchmarks' records: every target's current figure,
    its baseline and ratio, its verdict, and the machine, commit and date it was measured at."""
    from clockfabric.bench.harness import load_results
    from clockfabric.bench.page import render
    from clockfabric.errors import ClockfabricError

    notes = [n.name for n in (page.parent / "notes").glob("*.md")]
    text = render(load_results(results), notes)
    if check:
        if not page.exists() or page.read_text() != text:
            raise ClockfabricError(f"{page} is not what {results} renders; run `clockfabric bench report`")
        return
    page.write_text(text)
    err.print(f"wrote {page}")
