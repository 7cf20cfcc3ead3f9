"""The agent's Debian package (scripts/build-deb.sh), built once per session: its control fields,
its files, its size against the full venv, and the package run for real from an unpacked tree,
its maintainer scripts included, in a mount namespace so this machine's / stays as it was."""

from __future__ import annotations

import importlib.metadata as md
import os
import shutil
import subprocess
import sys
from pathlib import Path

import pytest
from packaging.requirements import Requirement
from packaging.utils import canonicalize_name

from tests.debs import missing

if sys.version_info >= (3, 11):
    import tomllib
else:
    import tomli as tomllib

ROOT = Path(__file__).resolve().parents[2]
PREFIX = "opt/clockfabric"
CONTROLLER_ONLY = ["fastapi", "starlette", "uvicorn", "psycopg"]

WHY_NOT = missing()
pytestmark = pytest.mark.skipif(WHY_NOT is not None, reason=WHY_NOT or "")


@pytest.fixture(scope="session")
def deb(debs) -> Path:
    """The agent's package (tests/debs.py). Both are built, as docs/quickstart.md builds them, so
    the lab tests' quickstart run that follows finds them made for this same checkout."""
    return debs.get("agent", "controller")["agent"]


@pytest.fixture(scope="session")
def unpacked(deb, tmp_path_factory) -> Path:
    """The package's files under a temporary root, its control files in DEBIAN/."""
    root = tmp_path_factory.mktemp("root")
    subprocess.run(["dpkg-deb", "-x", str(deb), str(root)], check=True, timeout=120)
    subprocess.run(["dpkg-deb", "-e", str(deb), str(root / "DEBIAN")], check=True, timeout=60)
    return root


def field(deb: Path, name: str) -> str:
    return subprocess.run(["dpkg-deb", "-f", str(deb), name], capture_output=True, text=True,
                          check=True).stdout.strip()


def test_control_fields(deb):
    version = tomllib.loads((ROOT / "pyproject.toml").read_text())["project"]["version"]
    arch = subprocess.run(["dpkg", "--print-architecture"], capture_output=True, text=True).stdout.strip()
    assert (field(deb, "Package"), field(deb, "Version"), field(deb, "Architecture")) == (
        "clockfabric-agent", version, arch)
    assert deb.name == f"clockfabric-agent_{version}_{arch}.deb"
    depends = [d.strip() for d in field(deb, "Depends").split(",")]
    # the venv is bound to the minor version of the Python it was built with, Debian's
    major, minor = subprocess.run(["/usr/bin/python3", "-c", "import sys; print(*sys.version_info[:2])"],
                                  capture_output=True, text=True, check=True).stdout.split()
    assert {f"python3 (>= {major}.{minor})", f"python3 (<< {major}.{int(minor) + 1})", "python3-venv", "adduser",
            "iproute2"} <= set(depends)
    assert "victoria-metrics" not in depends  # the controller's engines are the controller package's


def test_files_the_unit_and_the_command(unpacked):
    unit = unpacked / "lib/systemd/system/clockfabric-agent.service"
    assert unit.read_bytes() == (ROOT / "deploy/systemd/clockfabric-agent.service").read_bytes()
    assert not (unpacked / "lib/systemd/system/clockfabric-controller.service").exists()
    assert os.readlink(unpacked / "usr/bin/clockfabric") == f"/{PREFIX}/bin/clockfabric"
    # the unit runs what the package installs
    assert f"ExecStart=/{PREFIX}/bin/clockfabric agent " in unit.read_text()
    assert (unpacked / PREFIX / "bin/clockfabric").read_text().startswith(f"#!/{PREFIX}/bin/python3\n")
    assert os.readlink(unpacked / PREFIX / "bin/python3") == "/usr/bin/python3"
    assert (unpacked / "DEBIAN/conffiles").read_text().split() == ["/etc/default/clockfabric-agent"]
    # no path of the build's temporary folder is left in the venv's text files
    venv = unpacked / PREFIX
    leaked = subprocess.run(["grep", "-rlI", "/tmp/", str(venv / "bin"), str(venv / "pyvenv.cfg")],
                            capture_output=True, text=True)
    assert leaked.stdout == ""


@pytest.mark.skipif(shutil.which("systemd-analyze") is None or not Path("/usr/lib/systemd/system").is_dir(),
                    reason="no systemd-analyze, or no system units to verify against")
def test_systemd_verifies_the_unit_where_the_package_installs_it(unpacked, tmp_path):
    # this machine's system units, and the package's unit and program at the package's paths
    shutil.copytree("/usr/lib/systemd/system", tmp_path / "usr/lib/systemd/system", symlinks=True)
    shutil.copytree(unpacked / "lib/systemd/system", tmp_path / "lib/systemd/system")
    (tmp_path / PREFIX / "bin").mkdir(parents=True)
    shutil.copy2(unpacked / PREFIX / "bin/clockfabric", tmp_path / PREFIX / "bin/clockfabric")
    done = subprocess.run(["systemd-analyze", "verify", "--man=no", f"--root={tmp_path}", "clockfabric-agent.service"],
                          capture_output=True, text=True, timeout=60)
    assert done.returncode == 0 and not done.stderr.strip(), done.stdout + done.stderr


def test_the_venv_has_the_agents_dependencies_only(unpacked):
    (site,) = (unpacked / PREFIX / "lib").glob("python3.*/site-packages")
    present = {p.name for p in site.iterdir()}
    assert {"clockfabric", "pyroute2", "numpy", "typer"} <= present
    assert [name for name in CONTROLLER_ONLY if name in present] == []
    assert "pip" not in present  # nothing installs into it on a host
    # scipy is the solver's, on the clock's reference host alone (clockfabric-reference)
    assert "scipy" not in present


def test_the_references_package_adds_the_solver_in_the_agents_place(debs, tmp_path):
    reference = debs.get("reference")["reference"]
    subprocess.run(["dpkg-deb", "-x", str(reference), str(tmp_path)], check=True, timeout=120)
    (site,) = (tmp_path / PREFIX / "lib").glob("python3.*/site-packages")
    present = {p.name for p in site.iterdir()}
    assert {"clockfabric", "scipy", "numpy"} <= present and not set(CONTROLLER_ONLY) & present
    for name in ("Provides", "Conflicts", "Replaces"):
        assert field(reference, name).startswith("clockfabric-agent"), name
    assert {p.name for p in (tmp_path / "lib/systemd/system").iterdir()} == {"clockfabric-agent.service"}


READ_PYC = "import marshal, sys; print(marshal.loads(open(sys.argv[1], 'rb').read()[16:]).co_filename)"


def test_byte_code_names_the_installed_paths(unpacked):
    (site,) = (unpacked / PREFIX / "lib").glob("python3.*/site-packages")
    (pyc,) = (site / "clockfabric/cli/__pycache__").glob("main.cpython-*.pyc")
    # read by the Python that wrote it: marshal's format is its minor version's, maybe not this one's
    filename = subprocess.run(["/usr/bin/python3", "-c", READ_PYC, str(pyc)], capture_output=True, text=True,
                              check=True).stdout.strip()
    assert filename == f"/{PREFIX}/{(site / 'clockfabric/cli/main.py').relative_to(unpacked / PREFIX)}"


def closure(dists: dict, name: str, extras: tuple[str, ...]) -> set[str]:
    """The distributions `pip install name[extras]` brings, as installed in this venv."""
    seen: set[tuple[str, frozenset]] = set()
    todo = [(name, frozenset(extras))]
    while todo:
        dist, wanted = todo.pop()
        key = (canonicalize_name(dist), wanted)
        if key in seen or key[0] not in dists:
            continue
        seen.add(key)
        for line in dists[key[0]].requires or []:
            req = Requirement(line)
            if req.marker is None or any(req.marker.evaluate({"extra": e}) for e in wanted or {""}):
                todo.append((req.name, frozenset(req.extras)))
    return {d for d, _ in seen}


def installed_kib(dists: dict, names: set[str]) -> int:
    total = 0
    for name in names:
        for f in dists[name].files or []:
            path = f.locate()
            if path.is_file():
                total += path.stat().st_size
    return total // 1024


def test_installed_size_is_half_of_every_hosts_old_install_or_less(deb):
    # baseline: what every host installed before the agent had a package of its own, a venv with
    # pip, setuptools and the package with what are now the controller's extras (its web server,
    # database driver and scipy), counted from each distribution's RECORD in this venv; the
    # package: its Installed-Size, the whole venv
    dists = {canonicalize_name(d.metadata["Name"]): d for d in md.distributions()}
    if "fastapi" not in dists:
        pytest.skip("the baseline is clockfabric[controller], and this venv has no controller extra")
    old = installed_kib(dists, closure(dists, "clockfabric", ("controller",)) | {"pip", "setuptools"} & set(dists))
    package = int(field(deb, "Installed-Size"))
    print(f"agent package {package // 1024} MiB installed; a venv of clockfabric[controller] {old // 1024} MiB")
    assert package <= old / 2


def test_the_size_baseline_follows_extras():
    dists = {canonicalize_name(d.metadata["Name"]): d for d in md.distributions()}
    core = closure(dists, "clockfabric", ())
    assert {"numpy", "pyroute2", "typer"} <= core and not {"fastapi", "scipy"} & core
    assert {"fastapi", "scipy"} <= closure(dists, "clockfabric", ("controller",))
    assert "scipy" in closure(dists, "clockfabric", ("solver",))


SANDBOX = r"""set -eu
root=$1; scratch=$2
mount -t tmpfs tmpfs "$scratch"
# writes to /etc, /var and the unit folder land in tmpfs; /run hides any running systemd
for d in /etc /var /usr/lib/systemd/system; do
    n=$scratch/$(echo "$d" | tr / _); mkdir -p "$n/u" "$n/w"
    mount -t overlay overlay -o "lowerdir=$d,upperdir=$n/u,workdir=$n/w" "$d"
done
mount -t tmpfs tmpfs /run
mount -t tmpfs tmpfs /opt && mkdir /opt/clockfabric
mount --bind "$root/opt/clockfabric" /opt/clockfabric && mount -o remount,bind,ro /opt/clockfabric
cp "$root"/lib/systemd/system/*.service /usr/lib/systemd/system/
cp "$root"/etc/default/* /etc/default/
/opt/clockfabric/bin/clockfabric agent --help | grep -q -- --key-file && echo "agent-help ok"
/opt/clockfabric/bin/clockfabric doctor --help | grep -q -- --unit && echo "doctor-help ok"
# as dpkg runs them (deb-systemd-helper acts only under dpkg): a new install, then an upgrade
export DPKG_MAINTSCRIPT_PACKAGE=clockfabric-agent DPKG_MAINTSCRIPT_ARCH=$(dpkg --print-architecture)
DPKG_MAINTSCRIPT_NAME=postinst "$root/DEBIAN/postinst" configure
DPKG_MAINTSCRIPT_NAME=postinst "$root/DEBIAN/postinst" configure 0.0.9
echo "user $(getent passwd clockfabric | cut -d: -f1,6,7)"
stat -c 'dir %n %U:%G %a' /etc/clockfabric /var/lib/clockfabric
echo "enabled $(readlink /etc/systemd/system/multi-user.target.wants/clockfabric-agent.service)"
DPKG_MAINTSCRIPT_NAME=prerm "$root/DEBIAN/prerm" remove
# a venv left at /opt/clockfabric is another package's: its folders stay
DPKG_MAINTSCRIPT_NAME=postrm "$root/DEBIAN/postrm" purge
[ -d /etc/clockfabric ] && [ -d /var/lib/clockfabric ] && echo "kept while a venv is installed"
umount /opt/clockfabric  # dpkg removes the files before postrm runs
DPKG_MAINTSCRIPT_NAME=postrm "$root/DEBIAN/postrm" remove
DPKG_MAINTSCRIPT_NAME=postrm "$root/DEBIAN/postrm" purge
for d in /etc/clockfabric /var/lib/clockfabric /etc/systemd/system/multi-user.target.wants/clockfabric-agent.service; do
    [ -e "$d" ] || echo "purged $d"
done
"""


@pytest.mark.skipif(os.geteuid() != 0 or shutil.which("unshare") is None, reason="needs root and unshare")
@pytest.mark.skipif(shutil.which("deb-systemd-helper") is None, reason="no deb-systemd-helper (init-system-helpers)")
def test_installed_tree_runs_and_its_scripts_make_and_purge_the_user_folders(unpacked, tmp_path):
    # a private mount namespace: /opt/clockfabric is the package's venv, read-only as
    # ProtectSystem=strict leaves it; everything the scripts write vanishes with the namespace
    before = Path("/etc/passwd").read_bytes()
    done = subprocess.run(["unshare", "--mount", "--propagation", "private", "sh", "-c", SANDBOX, "sandbox",
                           str(unpacked), str(tmp_path)], capture_output=True, text=True, timeout=120)
    assert done.returncode == 0, done.stdout + done.stderr
    lines = done.stdout.splitlines()
    assert {"agent-help ok", "doctor-help ok", "user clockfabric:/var/lib/clockfabric:/usr/sbin/nologin",
            "dir /etc/clockfabric root:clockfabric 750", "dir /var/lib/clockfabric clockfabric:clockfabric 750",
            "enabled /lib/systemd/system/clockfabric-agent.service",
            "kept while a venv is installed", "purged /etc/clockfabric", "purged /var/lib/clockfabric",
            "purged /etc/systemd/system/multi-user.target.wants/clockfabric-agent.service"} <= set(lines), lines
    assert Path("/etc/passwd").read_bytes() == before  # this machine's root was not touched
