import logging
import os
import subprocess
import sys

import pytest


@pytest.fixture(autouse=True)
def _root_logger_restored():
    """A command run in-process sets up logging for a daemon; the next test must not inherit it."""
    loggers = [logging.getLogger(name) for name in ("", "httpx", "httpcore")]
    saved = [(list(lg.handlers), lg.level) for lg in loggers]
    yield
    for lg, (handlers, level) in zip(loggers, saved):
        lg.handlers[:] = handlers
        lg.setLevel(level)


def run_cli(*args: str, check: bool = True) -> subprocess.CompletedProcess:
    """Run the real `clockfabric` command, as a user would."""
    proc = subprocess.run([sys.executable, "-m", "clockfabric.cli", *args], capture_output=True, text=True,
                          timeout=300)
    if check and proc.returncode != 0:
        raise AssertionError(f"clockfabric {' '.join(args)} exited {proc.returncode}:\n{proc.stdout}\n{proc.stderr}")
    return proc


@pytest.fixture
def cli():
    return run_cli


def lab_capable() -> str | None:
    """Why lab tests cannot run here, or None if they can."""
    if os.geteuid() != 0:
        return "needs root to make network namespaces (CI runs as root)"
    if not os.path.exists("/proc/self/ns/net"):
        return "kernel has no network namespaces"
    return None


@pytest.fixture(scope="session")
def postgres_server():
    """A throwaway PostgreSQL server for the whole session (tests/pg.py); skips where none can start."""
    # imported here: psycopg loads only for the tests that ask for a server
    from tests.pg import missing, throwaway_postgres

    why = missing()
    if why:
        pytest.skip(why)
    with throwaway_postgres(fsync=False) as server:
        yield server


@pytest.fixture(scope="session")
def series_engine(tmp_path_factory):
    """A real single-node victoria-metrics on loopback for the whole session (its URL and process)."""
    from clockfabric.controller.series.engine import engine

    child = engine(tmp_path_factory.mktemp("series"))
    child.start()
    yield child
    child.stop()


@pytest.fixture(scope="session")
def debs():
    """The Debian packages (tests/debs.py), each built once for what it is built from; skips where
    none can be."""
    from tests.debs import Debs, missing

    why = missing()
    if why:
        pytest.skip(why)
    return Debs()
