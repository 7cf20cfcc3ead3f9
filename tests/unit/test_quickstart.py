"""docs/quickstart.md as a new operator runs it: its commands pass flags the CLI has, the agent
gets the fleet key it needs and the page says how to make it, and Prometheus scrapes under the
job names the shipped rules select on."""

from __future__ import annotations

import re
import shlex
from pathlib import Path

import yaml

from clockfabric.auth.keys import Keyring
from clockfabric.cli.main import COMMANDS
from tests.unit.cli_flags import unknown_options

ROOT = Path(__file__).resolve().parents[2]
QUICKSTART = (ROOT / "docs" / "quickstart.md").read_text()
RULES = ROOT / "deploy" / "prometheus" / "clockfabric-rules.yml"


def blocks(lang: str) -> list[str]:
    return re.findall(rf"```{lang}\n(.*?)```", QUICKSTART, re.S)


def commands() -> list[list[str]]:
    """Every `clockfabric ...` command in the page's shell blocks, continuation lines joined,
    comments and optional `[...]` parts dropped."""
    found = []
    for block in blocks("sh"):
        for line in block.replace("\\\n", " ").splitlines():
            line = re.sub(r"\[[^]]*\]", "", line.split("  #")[0])
            words = shlex.split(line) if line.strip() else []
            if words and words[0].endswith("clockfabric") and len(words) > 1 and words[1] in COMMANDS:
                found.append(words[1:])
    return found


def test_every_quickstart_command_passes_flags_the_cli_has():
    argvs = commands()
    assert {a[0] for a in argvs} >= {"agent", "controller", "key", "audit", "hosts", "discover", "topology"}
    for argv in argvs:
        if argv[0] in ("agent", "controller", "audit", "discover"):
            assert unknown_options(argv) == [], argv


def test_the_agent_gets_a_key_the_page_makes():
    made = {a[2] for a in commands() if a[:2] == ["key", "new"]}
    # an agent in discovery mode sends its peers nothing (no probes, heartbeats or clock maps): no key
    agents = [a for a in commands() if a[0] == "agent" and "--discover" not in a]
    assert agents and made
    for argv in agents:
        assert "--key-file" in argv or "--insecure" in argv, "the agent exits 64 without --key-file"
        if "--key-file" in argv:
            assert argv[argv.index("--key-file") + 1] in made


def scrape_jobs() -> set[str]:
    """The job names the quickstart's Prometheus configuration scrapes under."""
    jobs = set()
    for block in blocks("yaml"):
        doc = yaml.safe_load(block)
        if isinstance(doc, dict) and "scrape_configs" in doc:
            jobs |= {c["job_name"] for c in doc["scrape_configs"]}
    return jobs


def rule_jobs() -> set[str]:
    """Every job="..." the shipped rules select on."""
    return set(re.findall(r'job="([^"]+)"', RULES.read_text()))


def test_the_quickstarts_scrape_jobs_are_the_ones_the_rules_select():
    assert "clockfabric-agent" in rule_jobs()
    assert scrape_jobs() == rule_jobs(), "rename the quickstart's job_name, or every agent alert stays silent"


def test_key_new_writes_a_key_only_its_owner_reads(tmp_path):
    from typer.testing import CliRunner

    from clockfabric.cli.main import build_app

    path = tmp_path / "fleet.key"
    done = CliRunner().invoke(build_app("key"), ["key", "new", str(path)])
    assert done.exit_code == 0, done.output
    assert path.stat().st_mode & 0o777 == 0o600
    assert Keyring.load(path).ids() == [1]
    assert sorted(p.name for p in tmp_path.iterdir()) == ["fleet.key"]
    again = CliRunner().invoke(build_app("key"), ["key", "new", str(path), "--id", "2"])
    assert again.exit_code != 0 and "exists" in str(again.exception)
    assert Keyring.load(path).ids() == [1]  # untouched
    forced = CliRunner().invoke(build_app("key"), ["key", "new", str(path), "--id", "2", "--force"])
    assert forced.exit_code == 0 and Keyring.load(path).ids() == [2]


def test_the_packages_the_page_installs_are_the_ones_the_build_script_makes():
    script = (ROOT / "scripts" / "build-deb.sh").read_text()
    built = set(re.findall(r"^\s+\w+\) build (clockfabric-\w+) ", script, re.M))
    assert built == {"clockfabric-agent", "clockfabric-reference", "clockfabric-controller"}
    installed = set(re.findall(r"^apt install \./(clockfabric-\w+)_[^_]+_amd64\.deb", "".join(blocks("sh")), re.M))
    assert installed == built
    for block in blocks("sh"):
        for line in block.splitlines():
            if line.startswith("scripts/build-deb.sh"):
                words = shlex.split(line.split("  #")[0])[1:]
                assert all(w in ("agent", "reference", "controller") or words[i - 1] == "-o" or w == "-o"
                           for i, w in enumerate(words)), line
