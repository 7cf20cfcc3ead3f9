"""Fixtures the unit tests share."""

import pytest

from tests.fakes.train_job import coordinator, lose


@pytest.fixture
def make_coordinator(tmp_path):
    """make_coordinator(hosts, ranks, spares, **options): a training job's coordinator over
    stand-in processes (tests/fakes/train_job.py); every member it has at the end is ended."""
    made = []

    def make(hosts, ranks, spares, **options):
        made.append(coordinator(tmp_path, hosts, ranks, spares, **options))
        return made[-1]

    yield make
    for job in made:
        for member in job.members():
            lose(member)


@pytest.fixture(scope="session")
def alertmanager(tmp_path_factory):
    """A real prometheus-alertmanager on loopback, with the controller's generated config, for the
    whole session (it starts in a fraction of a second); tests tell their alerts apart by key."""
    from clockfabric.controller.alertmanager_embedded import EmbeddedAlertmanager

    am = EmbeddedAlertmanager(tmp_path_factory.mktemp("alertmanager")).start()
    yield am
    am.stop()
