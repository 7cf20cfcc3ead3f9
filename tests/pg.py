"""A throwaway PostgreSQL server for tests and benchmarks: initdb into a temporary directory, listen
on a unix socket there only, stop and remove it all at the end. PostgreSQL refuses to run as root,
so as root the server runs as the `postgres` user the Debian package creates."""

from __future__ import annotations

import glob
import os
import pwd
import shutil
import subprocess
import tempfile
from collections.abc import Callable, Iterator
from contextlib import contextmanager
from pathlib import Path

import psycopg


def pg_bin() -> Path | None:
    """The directory of initdb and pg_ctl: on PATH, or the newest Debian one (not on PATH there)."""
    found = shutil.which("initdb")
    if found:
        return Path(found).parent
    dirs = sorted(glob.glob("/usr/lib/postgresql/*/bin/initdb"), key=lambda p: int(p.split("/")[4]))
    return Path(dirs[-1]).parent if dirs else None


def missing() -> str | None:
    """Why no throwaway server can start here, or None if it can."""
    if pg_bin() is None:
        return "PostgreSQL server binaries (initdb, pg_ctl) not found: run scripts/setup.sh as root"
    if os.geteuid() == 0:
        try:
            pwd.getpwnam("postgres")
        except KeyError:
            return "running as root and there is no `postgres` user to run the server as"
    return None


class PgServer:
    def __init__(self, socket_dir: Path, stop: Callable[[], None], start: Callable[[], None]) -> None:
        self.socket_dir = socket_dir
        self.stop = stop  # a fast stop: every connection dropped
        self.start = start  # returns once it listens

    def dsn(self, dbname: str = "postgres") -> str:
        return f"postgresql:///{dbname}?host={self.socket_dir}&user=postgres"

    def create_database(self, name: str) -> str:
        """A new empty database; its DSN."""
        with psycopg.connect(self.dsn(), autocommit=True) as conn:
            conn.execute(f'CREATE DATABASE "{name}"')
        return self.dsn(name)


@contextmanager
def throwaway_postgres(*, fsync: bool = True) -> Iterator[PgServer]:
    """fsync=False for tests (the data is thrown away); keep it on where speed is measured."""
    why = missing()
    if why:
        raise RuntimeError(why)
    bindir = pg_bin()
    assert bindir is not None  # missing() says why not
    root = Path(tempfile.mkdtemp(prefix="cfpg-"))  # short: a socket path must fit in 107 bytes
    as_user: list[str] = []
    if os.geteuid() == 0:
        pw = pwd.getpwnam("postgres")
        os.chown(root, pw.pw_uid, pw.pw_gid)
        as_user = ["runuser", "-u", "postgres", "--"]
    data = root / "data"

    def run(*cmd: str) -> None:
        proc = subprocess.run([*as_user, *cmd], check=False, capture_output=True, text=True, timeout=120)
        if proc.returncode:
            log = (root / "log").read_text() if (root / "log").exists() else ""
            raise RuntimeError(f"{' '.join(cmd)} failed: {proc.stderr}{log}")

    try:
        run(str(bindir / "initdb"), "-D", str(data), "-U", "postgres", "--auth=trust", "--no-sync",
            "-E", "UTF8", "--locale=C")
        options = f"-c listen_addresses='' -k {root}" + ("" if fsync else " -c fsync=off")
        def start() -> None:
            run(str(bindir / "pg_ctl"), "start", "-D", str(data), "-w", "-l", str(root / "log"), "-o", options)

        def stop() -> None:
            run(str(bindir / "pg_ctl"), "stop", "-D", str(data), "-m", "fast", "-w")

        start()
        server = PgServer(root, stop, start)
        try:
            yield server
        finally:
            if (data / "postmaster.pid").exists():  # a test may have left it stopped
                stop()
    finally:
        shutil.rmtree(root, ignore_errors=True)
