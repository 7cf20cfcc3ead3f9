"""Lower layers never import higher ones (docs/architecture.md).

Every module under src/clockfabric is parsed with `ast`; each `import clockfabric.X...`,
`from clockfabric[.X] import ...`, relative import, `importlib.import_module("clockfabric.X")`
and registry `load="clockfabric.X"` names a component X (a subpackage or top-level module).
A component may import its own modules and any lower layer's; a peer on its own layer only
where PEER_IMPORTS says so; a higher layer never, but for UPWARD_IMPORTS.
"""

from __future__ import annotations

import ast
from pathlib import Path

import pytest

import clockfabric

ROOT = "clockfabric"  # the package itself (`__version__`) counts with the foundations
LAYERS = [
    {ROOT, "units", "errors", "registry", "yamlfile", "console", "logs", "lldp", "auth", "wirejson", "serieswire",
     "netdev", "netns"},
    {"topology"},
    {"localization"},  # network tomography: paths and their links in, suspect links out
    {"hosts"},
    {"probe", "clock", "telemetry", "traffic", "collective", "audit", "workload", "train", "qos"},
    {"agent"},
    {"controller"},
    {"doctor"},  # checks a host for its agent: reads the agent's configuration, asks the controller
    {"lab"},  # a tool that drives the product from above: the product never knows it
    {"bench"},
    {"cli"},
]
LEVEL = {component: i for i, layer in enumerate(LAYERS) for component in layer}

# (importer, imported) on one layer: each import that exists, and why
PEER_IMPORTS = {
    ("registry", "errors"): "a name not registered is a user's mistake: one clear line",
    ("yamlfile", "errors"): "a malformed file is a user's mistake: one clear line",
    ("console", "errors"): "a command's unmet precondition is one clear line",
    ("logs", "errors"): "an unknown --log-format is one clear line",
    ("auth", "errors"): "a malformed key file is a user's mistake: one clear line",
    ("clock", "probe"): "pair fits and clock sync read the probes' timestamps",
    ("collective", "probe"): "the workers learn each subflow's spine with probe.paths",
    ("audit", "telemetry"): "the host facts reuse the collectors' sysfs and NVML readers",
    ("audit", "collective"): "the collective check runs all-reduces and bisects slow planes",
    ("workload", "traffic"): "jobs' flows are read with traffic's sock_diag reader and keyed as it keys them",
    ("workload", "probe"): "each flow's spine is traced as the probe paths are (probe.paths)",
    ("train", "audit"): "a drained host returns to the spares once the one-host audit passes on it",
}

# (importing module, imported component) across layers the wrong way, and why
UPWARD_IMPORTS: dict[tuple[str, str], str] = {
    ("clockfabric.hosts.base", "clock"): "a host's clock is the system's unless it says otherwise "
                                         "(clock/vclock.py, the standard library alone)",
}

SRC = Path(clockfabric.__file__).parent


def module_name(path: Path) -> str:
    parts = path.relative_to(SRC.parent).with_suffix("").parts
    return ".".join(parts[:-1] if parts[-1] == "__init__" else parts)


def component(module: str) -> str:
    """clockfabric.audit.checks.x -> audit; clockfabric -> clockfabric."""
    parts = module.split(".")
    return parts[1] if len(parts) > 1 else ROOT


def is_submodule(name: str) -> bool:
    return (SRC / f"{name}.py").exists() or (SRC / name / "__init__.py").exists()


def called(func: ast.expr) -> str:
    return func.attr if isinstance(func, ast.Attribute) else getattr(func, "id", "")


def imported_modules(module: str, source: str, is_package: bool = False) -> set[str]:
    """Every clockfabric module that `source` (the text of `module`) imports, however it does."""
    found = set()
    for node in ast.walk(ast.parse(source)):
        if isinstance(node, ast.Import):
            found.update(alias.name for alias in node.names)
        elif isinstance(node, ast.ImportFrom):
            base = node.module or ""
            if node.level:
                package = module.split(".") if is_package else module.split(".")[:-1]
                package = package[:len(package) - node.level + 1]
                base = ".".join(package + ([node.module] if node.module else []))
            if base == ROOT:  # `from clockfabric import lldp` imports a module; `__version__` does not
                found.update(f"{ROOT}.{a.name}" if is_submodule(a.name) else ROOT for a in node.names)
            else:
                found.add(base)
        elif isinstance(node, ast.Call):
            named = [kw.value for kw in node.keywords if kw.arg == "load"]
            if called(node.func) == "import_module" and node.args:
                named.append(node.args[0])
            found.update(v.value for v in named if isinstance(v, ast.Constant) and isinstance(v.value, str))
    return {m for m in found if m == ROOT or m.startswith(ROOT + ".")}


def edges() -> set[tuple[str, str]]:
    """(importing module, imported component) for every import between components."""
    out = set()
    for path in sorted(SRC.rglob("*.py")):
        module = module_name(path)
        for target in imported_modules(module, path.read_text(), path.name == "__init__.py"):
            if component(target) != component(module):
                out.add((module, component(target)))
    return out


def violations(found: set[tuple[str, str]]) -> list[str]:
    bad = []
    for module, target in sorted(found):
        source = component(module)
        for name in (source, target):
            if name not in LEVEL:
                bad.append(f"{name} has no layer: put it in LAYERS (tests/unit/test_layers.py)")
        if source not in LEVEL or target not in LEVEL:
            continue
        if LEVEL[target] > LEVEL[source] and (module, target) not in UPWARD_IMPORTS:
            bad.append(f"{module} imports {target}, a higher layer")
        elif LEVEL[target] == LEVEL[source] and (source, target) not in PEER_IMPORTS:
            bad.append(f"{module} imports its peer {target}: not one of PEER_IMPORTS")
    return bad


def test_lower_layers_never_import_higher_ones():
    assert violations(edges()) == []


def test_every_allowed_exception_is_still_used():
    # an exception nothing needs any more is taken out, so the list stays the truth
    found = edges()
    assert {(component(m), t) for m, t in found} >= set(PEER_IMPORTS)
    assert found >= set(UPWARD_IMPORTS)


@pytest.mark.parametrize("module, source, expected", [
    ("clockfabric.agent.agent", "import clockfabric.lab.build",
     ["clockfabric.agent.agent imports lab, a higher layer"]),
    ("clockfabric.lab.build", "def f():\n    from clockfabric.bench import harness",
     ["clockfabric.lab.build imports bench, a higher layer"]),
    ("clockfabric.probe.engine", "from clockfabric import clock", ["clockfabric.probe.engine imports its peer clock: "
                                                                   "not one of PEER_IMPORTS"]),
    ("clockfabric.topology.model", "importlib.import_module('clockfabric.lab.state')",
     ["clockfabric.topology.model imports lab, a higher layer"]),
    ("clockfabric.telemetry.x", "R = Registry('collector', load='clockfabric.agent.services')",
     ["clockfabric.telemetry.x imports agent, a higher layer"]),
    ("clockfabric.cli.main", "from clockfabric import __version__\nfrom clockfabric.agent import agent", []),
    ("clockfabric.clock.pairs", "from clockfabric.probe import wire\nfrom . import fit", []),
    ("clockfabric.sim.fleet", "import clockfabric.errors",
     ["sim has no layer: put it in LAYERS (tests/unit/test_layers.py)"]),
])
def test_the_rule_catches_each_kind_of_import(module, source, expected):
    found = {(module, component(t)) for t in imported_modules(module, source) if component(t) != component(module)}
    assert violations(found) == expected


def test_relative_imports_resolve_from_the_package():
    assert imported_modules("clockfabric.audit.checks.x", "from ...collective import run") \
        == {"clockfabric.collective"}
    assert imported_modules("clockfabric.audit", "from .checks import x", is_package=True) \
        == {"clockfabric.audit.checks"}


# ---- the lab started as a module: `python -m clockfabric.lab...` counts as knowing it ----
ABOVE = ("lab", "bench", "cli")
EXEMPT: tuple[str, ...] = ()
LAB = "clockfabric.lab"  # also started as `python -m clockfabric.lab...`


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
