"""Real labs: every test gets fresh namespaces (or shares its module's, `make_module_lab`) and
leaves none behind, pass or fail."""

import itertools
import os
from pathlib import Path

import pytest
from pyroute2 import IPRoute

from clockfabric.lab import build, hostsfile, netns
from tests.conftest import lab_capable

reason = lab_capable()
HERE = Path(__file__).parent


def pytest_collection_modifyitems(config, items):
    """Every test here builds namespaces: marked `lab` (so -m "not lab" leaves them out), and
    skipped with lab_capable()'s reason where they cannot run (a conftest's pytestmark marks nothing)."""
    for item in items:
        if HERE in Path(item.fspath).parents:
            item.add_marker(pytest.mark.lab)
            if reason:
                item.add_marker(pytest.mark.skip(reason=reason))
_ids = itertools.count()
PREFIX = f"t{os.getpid() % 10000}-"  # this run's labs; other labs on the machine are not ours
_module_labs: set[str] = set()  # labs up for a whole module: not left behind by the test that used them


def root_links() -> set[str]:
    with IPRoute() as ipr:
        return {link.get("ifname") for link in ipr.get_links()}


@pytest.fixture(autouse=True)
def nothing_left_behind():
    """After each test: no test-lab namespace, no process in one, no new root interface."""
    if reason:
        yield
        return
    before = root_links()
    yield
    left = [ns for ns in netns.listed(f"cf.{PREFIX}") if not _of_module_lab(ns)]
    assert not left, f"namespaces left behind: {left}"
    etc = sorted(p.name for p in hostsfile.ETC_NETNS.glob(f"cf.{PREFIX}*") if not _of_module_lab(p.name))
    assert not etc, f"per-namespace /etc files left behind: {etc}"
    assert root_links() == before, "the root namespace's interfaces changed"


def _of_module_lab(ns: str) -> bool:
    return any(ns.startswith(f"cf.{name}.") for name in _module_labs)


@pytest.fixture
def make_lab():
    """Bring up a lab with a unique name; always taken down, even if the test fails."""
    names = []

    def make(topo, **kw):
        name = f"{PREFIX}{next(_ids)}"
        names.append(name)
        return build.up(topo, name, **kw)

    yield make
    for name in names:
        build.down(name)


@pytest.fixture(scope="module")
def make_module_lab():
    """make_lab for a lab that the tests of one module share (where none disturbs the others):
    one bring-up instead of one a test; taken down, and checked gone, after the module's last test."""
    names = []

    def make(topo, **kw):
        name = f"{PREFIX}{next(_ids)}"
        names.append(name)
        _module_labs.add(name)
        return build.up(topo, name, **kw)

    yield make
    for name in names:
        build.down(name)
        _module_labs.discard(name)
        assert not netns.listed(f"cf.{name}."), f"namespaces of module lab {name} left behind"


@pytest.fixture(scope="session")
def failure_free(tmp_path_factory):
    """The parameters' digest by rank after a failure-free run of a training job (argv: its
    script and arguments) on three ranks, each argv run once a session, on this machine's
    loopback. The job is deterministic: the same arguments give the same bits on any hosts, the
    lab's included, so a faulted run on a lab is judged against it without a second lab run."""
    from clockfabric.hosts.local import LocalHost
    from clockfabric.train import report
    from clockfabric.train.launch import TrainJob

    hosts = {f"h{i}": LocalHost(f"h{i}", f"127.0.0.{i + 1}") for i in range(3)}  # loopback only
    done: dict[tuple[str, ...], dict[int, str]] = {}

    def digests(argv: list[str]) -> dict[int, str]:
        if tuple(argv) not in done:
            folder = tmp_path_factory.mktemp("failure-free")
            job = TrainJob(hosts, list(hosts), [], list(argv), folder).start()
            try:
                completed = job.wait(120)
            finally:
                job.stop()
            assert completed, (job.events, [p.read_text()[-1500:] for p in folder.glob("*.out")])
            found = report.digests(report.records(folder))
            assert sorted(found) == [0, 1, 2] and len(set(found.values())) == 1, found
            done[tuple(argv)] = found
        return done[tuple(argv)]

    return digests
