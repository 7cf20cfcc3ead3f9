"""Real labs: every test gets fresh namespaces and leaves none behind, pass or fail."""

import itertools
import os

import pytest
from pyroute2 import IPRoute

from clockfabric.lab import build, hostsfile, netns
from tests.conftest import lab_capable

reason = lab_capable()
pytestmark = pytest.mark.skipif(reason is not None, reason=reason or "")
_ids = itertools.count()
PREFIX = f"t{os.getpid() % 10000}-"  # this run's labs; other labs on the machine are not ours


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
    left = netns.listed(f"cf.{PREFIX}")
    assert not left, f"namespaces left behind: {left}"
    etc = sorted(p.name for p in hostsfile.ETC_NETNS.glob(f"cf.{PREFIX}*"))
    assert not etc, f"per-namespace /etc files left behind: {etc}"
    assert root_links() == before, "the root namespace's interfaces changed"


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
