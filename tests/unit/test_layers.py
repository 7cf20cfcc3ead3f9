"""The product never knows the lab: only the tools above it (lab, bench, cli) may import
clockfabric.lab, or start one of its modules with `python -m`."""

from __future__ import annotations

import ast
from pathlib import Path

SRC = Path(__file__).resolve().parents[2] / "src" / "clockfabric"
ABOVE = ("lab", "bench", "cli")
EXEMPT = ("train",)  # train/ is moved onto the hosts seam separately
LAB = "clockfabric.lab"


def _is_lab(name: str) -> bool:
    return name == LAB or name.startswith(LAB + ".")


def lab_uses(tree: ast.AST) -> list[tuple[int, str]]:
    """(line, what) for each import of the lab, at any depth, and each `-m clockfabric.lab...` in an argv."""
    found = []
    for node in ast.walk(tree):
        if isinstance(node, ast.Import):
            found += [(node.lineno, f"import {a.name}") for a in node.names if _is_lab(a.name)]
        elif isinstance(node, ast.ImportFrom) and node.level == 0 and node.module:
            if _is_lab(node.module):
                found.append((node.lineno, f"from {node.module} import ..."))
            elif node.module == "clockfabric" and any(a.name == "lab" for a in node.names):
                found.append((node.lineno, "from clockfabric import lab"))
        elif isinstance(node, (ast.List, ast.Tuple)):
            items = node.elts
            for flag, module in zip(items, items[1:], strict=False):
                if (isinstance(flag, ast.Constant) and flag.value == "-m" and isinstance(module, ast.Constant)
                        and isinstance(module.value, str) and _is_lab(module.value)):
                    found.append((module.lineno, f"-m {module.value}"))
    return found


def test_no_product_module_imports_the_lab():
    offenders = []
    for path in sorted(SRC.rglob("*.py")):
        part = path.relative_to(SRC).parts[0]
        if part in ABOVE or part in EXEMPT:
            continue
        for line, what in lab_uses(ast.parse(path.read_text(), str(path))):
            offenders.append(f"{path.relative_to(SRC.parent)}:{line}: {what}")
    assert not offenders, "product modules that know the lab:\n" + "\n".join(offenders)


def test_the_scan_sees_every_kind_of_use():
    code = """
import clockfabric.lab.state
from clockfabric.lab import netns
from clockfabric import lab
def f():
    from clockfabric.lab.exec import command
    return ["python", "-m", "clockfabric.lab.job"]
"""
    assert [line for line, _ in lab_uses(ast.parse(code))] == [2, 3, 4, 6, 7]
    assert lab_uses(ast.parse("from clockfabric.labels import x\nargv = ['-m', 'clockfabric.collective.worker']")) == []
