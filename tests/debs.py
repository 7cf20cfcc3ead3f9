"""The Debian packages scripts/build-deb.sh makes, for every test that installs or inspects them
(the `debs` fixture in tests/conftest.py): test_deb.py's checks of the agent's package, and the
quickstart run on lab hosts, which installs both.

A package is built once for what it is built from: the script, the files it packs (pyproject.toml,
README.md, LICENSE, src/, deploy/systemd and deploy/debian) and this machine's python3 and
architecture. It is kept under that digest in the user's cache, so the unit tests' session and the
lab tests' session that follows it share one build, and any change to those files builds anew."""

from __future__ import annotations

import hashlib
import os
import shutil
import subprocess
import tempfile
from pathlib import Path

ROOT = Path(__file__).resolve().parents[1]
BUILD = ROOT / "scripts" / "build-deb.sh"
INPUTS = ["scripts/build-deb.sh", "pyproject.toml", "README.md", "LICENSE", "src", "deploy/systemd", "deploy/debian"]
KEEP = 2  # builds kept in the cache, the newest first: a checkout and the one before it
PYTHON = "/usr/bin/python3"  # the script's, never the one running the tests


def missing() -> str | None:
    """Why no package can be built here, or None if it can."""
    if shutil.which("dpkg-deb") is None:
        return "dpkg-deb is not installed (not Debian or Ubuntu)"
    if not Path(PYTHON).exists() or subprocess.run([PYTHON, "-c", "import ensurepip, venv"],
                                                   capture_output=True).returncode != 0:
        return f"no {PYTHON} that makes venvs (apt-get install python3-venv)"
    return None


def digest() -> str:
    """What the packages are built from, in 16 hex digits."""
    h = hashlib.sha256()
    for machine in ([PYTHON, "-c", "import sys; print(sys.version)"], ["dpkg", "--print-architecture"]):
        h.update(subprocess.run(machine, capture_output=True, check=True).stdout)
    for top in INPUTS:
        path = ROOT / top
        files = [path] if path.is_file() else sorted(p for p in path.rglob("*") if p.is_file()
                                                     and "__pycache__" not in p.parts)
        for f in files:
            h.update(f"{f.relative_to(ROOT)}\0{os.stat(f).st_mode & 0o111}\0".encode())
            h.update(f.read_bytes())
    return h.hexdigest()[:16]


def cache_root() -> Path:
    return Path(os.environ.get("XDG_CACHE_HOME") or Path.home() / ".cache") / "clockfabric" / "test-debs"


class Debs:
    """Packages by short name (agent, controller), each built on first asking for what this
    checkout holds, or taken from the cache."""

    def __init__(self, root: Path | None = None) -> None:
        self.folder = (root or cache_root()) / digest()

    def get(self, *names: str) -> dict[str, Path]:
        """The .deb of each name; the ones not built yet are built now, in one run of the script."""
        todo = [n for n in names if not self._built(n)]
        if todo:
            self.folder.mkdir(parents=True, exist_ok=True)
            with tempfile.TemporaryDirectory(dir=self.folder) as tmp:
                done = subprocess.run([str(BUILD), "-o", tmp, *todo], capture_output=True, text=True, timeout=300)
                assert done.returncode == 0, f"{BUILD.name} {' '.join(todo)}: {done.stderr[-3000:]}"
                for made in Path(tmp).glob("*.deb"):
                    os.replace(made, self.folder / made.name)  # whole files only: another session may look
            self._prune()
        return {n: self._built(n) or self._fail(n) for n in names}

    def _built(self, name: str) -> Path | None:
        found = sorted(self.folder.glob(f"clockfabric-{name}_*.deb"))
        return found[0] if len(found) == 1 else None

    def _fail(self, name: str) -> Path:
        raise AssertionError(f"{BUILD.name} made no single clockfabric-{name}_*.deb in {self.folder}")

    def _prune(self) -> None:
        self.folder.touch()
        builds = sorted((p for p in self.folder.parent.iterdir() if p.is_dir()), key=lambda p: p.stat().st_mtime,
                        reverse=True)
        for old in builds[KEEP:]:
            shutil.rmtree(old, ignore_errors=True)
