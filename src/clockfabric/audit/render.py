"""An audit report three ways: a tree for people (category -> check -> what is wrong where),
JSON for scripts, JUnit XML for CI systems (one test case per check, per category suite)."""

from __future__ import annotations

import xml.etree.ElementTree as ET

from rich.text import Text
from rich.tree import Tree

from clockfabric.audit.model import Report, Verdict
from clockfabric.audit.registry import CATEGORIES

STYLE = {Verdict.PASS: ("✔", "green"), Verdict.SKIP: ("–", "dim"), Verdict.WARN: ("!", "yellow"),
         Verdict.UNKNOWN: ("?", "magenta"), Verdict.FAIL: ("✘", "red")}
SHOWN = 12  # findings per check in the tree; --json has them all


def _mark(v: Verdict) -> Text:
    sym, style = STYLE[v]
    return Text(f"{sym} {v.value}", style=style)


def tree(r: Report) -> Tree:
    counts = ", ".join(f"{n} {v}" for v, n in r.counts().items() if n)
    top = Text.assemble(f"audit of {r.fleet}: {len(r.hosts)} hosts, {len(r.results)} checks in {r.seconds:.1f} s — ",
                        _mark(r.verdict), f" ({counts})")
    root = Tree(top)
    for cat in CATEGORIES:
        results = [c for c in r.results if c.category == cat]
        if not results:
            continue
        branch = root.add(Text(cat, style="bold"))
        for c in results:
            node = branch.add(Text.assemble(_mark(c.verdict), f" {c.id} ", (c.title, "bold"),
                                            (f"  {c.summary}", "dim")))
            shown = [f for f in c.findings if f.verdict is not Verdict.PASS]
            for f in shown[:SHOWN]:
                node.add(Text.assemble(_mark(f.verdict), f" {f.where}: {f.message}"))
            if len(shown) > SHOWN:
                node.add(Text(f"... {len(shown) - SHOWN} more (see --json)", style="dim"))
            if c.verdict.rank and c.fix:
                node.add(Text(f"fix: {c.fix}", style="cyan"))
    return root


def junit(r: Report) -> str:
    suites = ET.Element("testsuites", name=f"clockfabric audit {r.fleet}", tests=str(len(r.results)),
                        failures=str(sum(c.verdict is Verdict.FAIL for c in r.results)),
                        errors=str(sum(c.verdict is Verdict.UNKNOWN for c in r.results)), time=f"{r.seconds:.3f}")
    for cat in CATEGORIES:
        results = [c for c in r.results if c.category == cat]
        if not results:
            continue
        suite = ET.SubElement(suites, "testsuite", name=cat, tests=str(len(results)),
                              failures=str(sum(c.verdict is Verdict.FAIL for c in results)),
                              errors=str(sum(c.verdict is Verdict.UNKNOWN for c in results)),
                              skipped=str(sum(c.verdict is Verdict.SKIP for c in results)),
                              time=f"{sum(c.seconds for c in results):.3f}")
        for c in results:
            case = ET.SubElement(suite, "testcase", classname=f"audit.{cat}", name=c.id, time=f"{c.seconds:.3f}")
            lines = "\n".join(f"{f.verdict.value} {f.where}: {f.message}" for f in c.findings
                              if f.verdict is not Verdict.PASS)
            if c.verdict is Verdict.FAIL:
                ET.SubElement(case, "failure", message=c.summary, type="fail").text = f"{lines}\nfix: {c.fix}"
            elif c.verdict is Verdict.UNKNOWN:
                ET.SubElement(case, "error", message=c.summary, type="unknown").text = lines
            elif c.verdict is Verdict.SKIP:
                ET.SubElement(case, "skipped", message=lines or c.summary)
            elif c.verdict is Verdict.WARN:  # JUnit has no warning: a pass with what was seen
                ET.SubElement(case, "system-out").text = f"warning: {c.summary}\n{lines}"
    ET.indent(suites)
    return '<?xml version="1.0" encoding="UTF-8"?>\n' + ET.tostring(suites, encoding="unicode") + "\n"
