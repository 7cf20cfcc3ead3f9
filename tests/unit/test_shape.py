"""Small modules with one job each: none over 400 lines, no function over 12 parameters
(typer commands aside: each option is a parameter there)."""

from __future__ import annotations

import ast
from pathlib import Path

import clockfabric

SRC = Path(clockfabric.__file__).parent
MAX_LINES, MAX_PARAMETERS = 400, 12


def parameters(fn: ast.FunctionDef | ast.AsyncFunctionDef) -> int:
    a = fn.args
    names = [*a.posonlyargs, *a.args, *a.kwonlyargs]
    count = len(names) + bool(a.vararg) + bool(a.kwarg)
    return count - (bool(names) and names[0].arg in ("self", "cls"))


def is_typer_command(fn: ast.FunctionDef | ast.AsyncFunctionDef) -> bool:
    """Decorated as a command (app.command, BENCHMARKS.register), or its options are typer's."""
    for d in fn.decorator_list:
        called = d.func if isinstance(d, ast.Call) else d
        if getattr(called, "attr", "") in ("command", "callback", "register"):
            return True
    defaults = [*fn.args.defaults, *fn.args.kw_defaults]
    return any(isinstance(d, ast.Call) and getattr(d.func, "attr", "") in ("Option", "Argument") for d in defaults)


def test_no_module_over_the_line_budget():
    long = [f"{p.relative_to(SRC.parent)}: {n} lines" for p in sorted(SRC.rglob("*.py"))
            if (n := len(p.read_text().splitlines())) > MAX_LINES]
    assert not long, "cut these along a real seam:\n" + "\n".join(long)


def test_no_function_over_the_parameter_budget():
    wide = []
    for path in sorted(SRC.rglob("*.py")):
        for node in ast.walk(ast.parse(path.read_text())):
            if isinstance(node, (ast.FunctionDef, ast.AsyncFunctionDef)) and not is_typer_command(node) \
                    and parameters(node) > MAX_PARAMETERS:
                wide.append(f"{path.relative_to(SRC.parent)}:{node.lineno} {node.name}: {parameters(node)}")
    assert not wide, "group these parameters (a dataclass of options):\n" + "\n".join(wide)


def test_the_budget_sees_a_wide_function():
    wide = ast.parse("def f(self, a, b, c, d, e, f, g, h, i, j, k, l, *, m=1): pass").body[0]
    assert isinstance(wide, ast.FunctionDef) and parameters(wide) == 13 and not is_typer_command(wide)
    command = ast.parse("def run(a=typer.Option(1)): pass").body[0]
    assert isinstance(command, ast.FunctionDef) and is_typer_command(command)
