import importlib.metadata
import re

import pytest
from typer.testing import CliRunner

from clockfabric import __version__
from clockfabric.cli import main


@pytest.mark.parametrize("flag", ["--version", "-V"])
def test_version_flag_prints_the_installed_version(flag):
    result = CliRunner().invoke(main.build_app(), [flag])
    assert result.exit_code == 0, result.output
    assert re.fullmatch(r"clockfabric \d+\.\d+\.\d+\S*\n", result.output)
    assert result.output == f"clockfabric {importlib.metadata.version('clockfabric')}\n"


def test_version_flag_runs_no_command():
    # eager: it answers before a subcommand is looked for, and never starts one
    result = CliRunner().invoke(main.build_app("lab"), ["--version", "lab", "down", "--all"])
    assert result.exit_code == 0
    assert result.output.startswith("clockfabric ")


def test_version_from_a_source_tree_never_installed(monkeypatch):
    def missing(name):
        raise importlib.metadata.PackageNotFoundError(name)

    monkeypatch.setattr(importlib.metadata, "version", missing)
    assert main.installed_version() == __version__
    result = CliRunner().invoke(main.build_app(), ["-V"])
    assert result.output == f"clockfabric {__version__}\n"
