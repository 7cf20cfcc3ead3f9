"""The one registry shape: names, defaults, enable/disable, clear errors, and a stable order."""

import importlib
import sys
import textwrap

import pytest

from clockfabric.errors import ClockfabricError
from clockfabric.registry import Registry


def make() -> Registry:
    reg: Registry = Registry("widget")

    @reg.register("a", help="the first")
    def a():
        return "A"

    @reg.register("b", default=False, colour="blue")
    def b():
        """The second, off by default."""
        return "B"

    return reg


def test_entries_carry_factory_default_help_and_meta():
    reg = make()
    assert reg.names() == ["a", "b"]
    assert reg.get("a").factory() == "A" and reg.get("a").help == "the first"
    assert reg.get("b").help == "The second, off by default." and reg.get("b").meta == {"colour": "blue"}
    assert "a" in reg and "c" not in reg


def test_enabled_is_the_defaults_plus_enable_less_disable():
    reg = make()
    assert [e.name for e in reg.enabled()] == ["a"]
    assert [e.name for e in reg.enabled(enable=["b"])] == ["a", "b"]
    assert [e.name for e in reg.enabled(enable=["b"], disable=["a"])] == ["b"]


def test_bad_names_are_one_clear_line():
    reg = make()
    with pytest.raises(ClockfabricError, match="no widget named 'c'; widgets are a, b"):
        reg.get("c")
    with pytest.raises(ClockfabricError, match="no widget named 'c'"):
        reg.enabled(disable=["c"])
    with pytest.raises(ClockfabricError, match="'a' is both enabled and disabled"):
        reg.enabled(enable=["a"], disable=["a"])
    with pytest.raises(ValueError, match="registered twice"):
        reg.register("a")(lambda: None)


def test_order_is_the_loading_modules_not_the_import_order(tmp_path, monkeypatch):
    """A module imported early (by a test or a command) does not move its entry to the front."""
    pkg = tmp_path / "regorder"
    pkg.mkdir()
    (pkg / "reg.py").write_text("from clockfabric.registry import Registry\n"
                                "THINGS = Registry('thing', load='regorder.all')\n")
    for name in ("first", "second", "third"):
        (pkg / f"{name}.py").write_text(textwrap.dedent(f"""
            from regorder.reg import THINGS

            @THINGS.register({name!r})
            def make():
                return {name!r}
        """))
    (pkg / "__init__.py").write_text("")
    (pkg / "all.py").write_text("from regorder import first, second, third  # noqa: F401\n")
    monkeypatch.syspath_prepend(str(tmp_path))
    try:
        importlib.import_module("regorder.third")  # registers "third" before the others
        things = importlib.import_module("regorder.reg").THINGS
        assert things.names() == ["first", "second", "third"]
    finally:
        for mod in [m for m in sys.modules if m == "regorder" or m.startswith("regorder.")]:
            del sys.modules[mod]


def test_declared_entries_are_listed_without_their_modules_and_loaded_when_got(tmp_path, monkeypatch):
    pkg = tmp_path / "regdecl"
    pkg.mkdir()
    (pkg / "__init__.py").write_text("")
    (pkg / "reg.py").write_text("from clockfabric.registry import Registry\n"
                                "THINGS = Registry('thing', load='regdecl.all')\n")
    for name, said in (("first", ""), ("second", ""), ("third", ""), ("drifted", ", help='its own words'")):
        (pkg / f"{name}.py").write_text(textwrap.dedent(f"""
            from regdecl.reg import THINGS

            @THINGS.register({name!r}{said})
            def make(x=0):
                \"\"\"A docstring, not the help: the declaration says it.\"\"\"
                return {name!r}, x
        """))
    (pkg / "silent.py").write_text("")  # registers nothing
    (pkg / "all.py").write_text(textwrap.dedent("""
        from regdecl.reg import THINGS

        for name, help in (("first", "one"), ("second", "two"), ("third", "three"), ("drifted", "declared")):
            THINGS.declare(name, f"regdecl.{name}", help=help, colour="red")
        THINGS.declare("silent", "regdecl.silent", help="never registered")
    """))
    monkeypatch.syspath_prepend(str(tmp_path))
    modules = lambda: {m for m in sys.modules if m.startswith("regdecl.")}  # noqa: E731
    try:
        importlib.import_module("regdecl.third")  # registers "third" before the others are declared
        things = importlib.import_module("regdecl.reg").THINGS
        assert things.names() == ["first", "second", "third", "drifted", "silent"]
        assert [(e.help, e.meta) for e in things.entries()][:2] == [("one", {"colour": "red"}),
                                                                     ("two", {"colour": "red"})]
        assert modules() == {"regdecl.reg", "regdecl.all", "regdecl.third"}  # listed: nothing more imported
        assert things.get("second").factory(2) == ("second", 2) and "regdecl.first" not in modules()
        assert things.entries()[0].factory(1) == ("first", 1)  # called before its module is: loaded then
        assert things.get("first").factory.__module__ == "regdecl.first"
        assert [(e.help, e.meta) for e in things.entries()][:3] == [("one", {"colour": "red"}),
                                                                     ("two", {"colour": "red"}),
                                                                     ("three", {"colour": "red"})]  # imported first too
        with pytest.raises(ValueError, match="'drifted': regdecl.drifted gives its default, help or meta"):
            things.get("drifted")
        with pytest.raises(ValueError, match="regdecl.silent registers no thing 'silent'"):
            things.get("silent")
        with pytest.raises(ValueError, match="declared twice"):
            things.declare("first", "regdecl.first")
    finally:
        for mod in [m for m in sys.modules if m == "regdecl" or m.startswith("regdecl.")]:
            del sys.modules[mod]
