"""Small modules with one job each, and calls a reader can follow: no module over 400 lines, no
function over 12 parameters. A command-line verb is exempt from the second: typer reads each of
its flags from one parameter, so its signature is its flag list, not a call anyone writes."""

import ast
from pathlib import Path

import clockfabric

SRC = Path(clockfabric.__file__).parent
MAX_LINES = 400
MAX_PARAMS = 12


def modules() -> list[Path]:
    return sorted(SRC.rglob("*.py"))


def is_flag(default: ast.expr | None, shared: frozenset[str] = frozenset()) -> bool:
    """typer.Option(...) or typer.Argument(...), or a module-level name bound to one."""
    if isinstance(default, ast.Name):
        return default.id in shared
    return (isinstance(default, ast.Call) and isinstance(default.func, ast.Attribute)
            and isinstance(default.func.value, ast.Name) and default.func.value.id == "typer")


def shared_flags(tree: ast.Module) -> frozenset[str]:
    """Names a module binds to a typer option, for several verbs to share."""
    return frozenset(t.id for node in tree.body if isinstance(node, ast.Assign) and is_flag(node.value)
                     for t in node.targets if isinstance(t, ast.Name))


def params(fn: ast.FunctionDef | ast.AsyncFunctionDef, shared: frozenset[str] = frozenset()) -> tuple[int, bool]:
    """(how many parameters a caller passes, whether every defaulted one is a typer flag)."""
    a = fn.args
    names = [*a.posonlyargs, *a.args, *a.kwonlyargs]
    if names and names[0].arg in ("self", "cls"):
        names = names[1:]
    defaults = [*a.defaults, *a.kw_defaults]
    flags = bool(defaults) and all(is_flag(d, shared) for d in defaults if d is not None)
    return len(names) + bool(a.vararg) + bool(a.kwarg), flags


def test_no_module_is_over_400_lines():
    long = {str(p.relative_to(SRC)): n for p in modules() if (n := p.read_text().count("\n")) > MAX_LINES}
    assert not long, f"modules over {MAX_LINES} lines (split by concern): {long}"


def test_no_function_takes_over_12_parameters():
    wide = []
    for path in modules():
        tree = ast.parse(path.read_text())
        shared = shared_flags(tree)
        for node in ast.walk(tree):
            if isinstance(node, ast.FunctionDef | ast.AsyncFunctionDef):
                count, cli_verb = params(node, shared)
                if count > MAX_PARAMS and not cli_verb:
                    wide.append(f"{path.relative_to(SRC)}:{node.lineno} {node.name} ({count})")
    assert not wide, f"functions over {MAX_PARAMS} parameters (group them in a frozen options type): {wide}"


def test_the_exemption_is_only_for_typer_verbs():
    verb = ast.parse("def v(a: int = typer.Option(1), b: str = typer.Argument(...)): pass").body[0]
    plain = ast.parse("def f(a, b=1, *, c=typer.Option(1)): pass").body[0]
    sharing = ast.parse("Opt = typer.Option(1)\ndef v(a: int = Opt, b: int = typer.Option(2)): pass")
    assert params(verb) == (2, True)
    assert params(plain) == (3, False)
    assert params(sharing.body[1], shared_flags(sharing)) == (2, True)
    assert params(sharing.body[1]) == (2, False)
