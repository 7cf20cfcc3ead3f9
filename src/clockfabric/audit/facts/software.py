"""Software facts: kernel, OS, Python packages, NVIDIA driver, NCCL and rdma-core versions.

Versions come from files first (under `root`, so recorded trees can stand in for a host), and
only on the real host ("/") from commands or loaded libraries. NCCL never comes from torch:
importing torch alone costs seconds.
"""

from __future__ import annotations

import platform
import re
import shlex
import subprocess
from importlib import metadata
from pathlib import Path

from clockfabric.telemetry.rdma import _read

PACKAGES = ("torch", "numpy", "nvidia-ml-py", "clockfabric", "nvidia-nccl-cu12", "nvidia-nccl-cu13")
NCCL_WHEELS = ("nvidia-nccl-cu12", "nvidia-nccl-cu13")  # cu12 first: what current torch wheels pull in
# where distributions put shared libraries (Debian multiarch, RHEL lib64)
LIB_DIRS = ("usr/lib/x86_64-linux-gnu", "usr/lib/aarch64-linux-gnu", "usr/lib64", "usr/lib", "lib64", "lib",
            "usr/local/lib")


def read(root: Path = Path("/"), nvml_driver: str | None = None) -> dict:
    """nvml_driver: the driver version NVML reported (the gpus section), used when /proc has none."""
    packages = {name: _dist_version(name) for name in PACKAGES}
    nccl, nccl_source = _nccl(root, packages)
    return {
        "kernel": platform.release(),  # uname: the running kernel, whatever root is
        "os": os_name(root),
        "python": platform.python_version(),
        "packages": packages,
        "nvidia_driver": nvidia_driver(_read(root / "proc/driver/nvidia/version")) or nvml_driver,
        "nccl": nccl,
        "nccl_source": nccl_source,
        "rdma_core": rdma_core(root),
    }


def os_name(root: Path) -> str | None:
    """PRETTY_NAME from os-release (etc/ first, usr/lib/ as the spec's fallback)."""
    for path in ("etc/os-release", "usr/lib/os-release"):
        for line in (_read(root / path) or "").splitlines():
            key, _, value = line.partition("=")
            if key.strip() == "PRETTY_NAME":
                try:
                    return " ".join(shlex.split(value))  # shell quoting, as os-release(5) specifies
                except ValueError:
                    return value.strip().strip("\"'")
    return None


def nvidia_driver(text: str | None) -> str | None:
    """'NVRM version: NVIDIA UNIX [Open ]Kernel Module [for x86_64]  550.54.15  ...' -> '550.54.15'."""
    m = re.search(r"Kernel Module(?: for \S+)?\s+(\d+(?:\.\d+)+)", text or "")
    return m[1] if m else None


def _dist_version(name: str) -> str | None:
    try:
        return metadata.version(name)
    except metadata.PackageNotFoundError:
        return None


def _nccl(root: Path, packages: dict) -> tuple[str | None, str | None]:
    """NCCL's version and where it came from: a pip wheel, libnccl.so.2.X.Y on disk, or the loaded library."""
    for wheel in NCCL_WHEELS:
        if packages.get(wheel):
            return packages[wheel], f"wheel {wheel}"
    if found := _versioned_lib(root, "libnccl.so.2", r"libnccl\.so\.(\d+\.\d+\.\d+)"):
        return found
    if root == Path("/") and (v := nccl_from_library()):
        return v, "ncclGetVersion"
    return None, None


def nccl_from_library(name: str = "libnccl.so.2") -> str | None:
    """Ask libnccl itself (ncclGetVersion), if the dynamic loader finds one."""
    import ctypes  # here: only hosts without an NCCL wheel or file pay for it

    try:
        lib = ctypes.CDLL(name)
        code = ctypes.c_int()
        if lib.ncclGetVersion(ctypes.byref(code)) != 0:
            return None
    except (OSError, AttributeError):
        return None
    v = code.value  # NCCL_VERSION(X,Y,Z): X*10000+Y*100+Z since 2.9, X*1000+Y*100+Z before
    if v >= 10000:
        return f"{v // 10000}.{v % 10000 // 100}.{v % 100}"
    return f"{v // 1000}.{v % 1000 // 100}.{v % 100}"


def rdma_core(root: Path) -> str | None:
    """rdma-core's version: libibverbs.so.1.<abi>.<rdma-core version> names it (1.14.50.0 is v50.0)."""
    if found := _versioned_lib(root, "libibverbs.so.1", r"libibverbs\.so\.1\.\d+\.(\d+\.\d+)"):
        return found[0]
    for doc in sorted((root / "usr/share/doc").glob("rdma-core-*")):  # older RHEL: rdma-core-<version>
        if m := re.fullmatch(r"rdma-core-(\d+(?:\.\d+)+)", doc.name):
            return m[1]
    return package_version("rdma-core") if root == Path("/") else None


def _versioned_lib(root: Path, link: str, pattern: str) -> tuple[str, str] | None:
    """(version, path) from a library's versioned file name; the one `link` points to wins over strays."""
    for d in LIB_DIRS:
        lib_dir = root / d
        try:
            target = (lib_dir / link).readlink().name
        except OSError:
            target = None
        if target and (m := re.fullmatch(pattern, target)):
            return m[1], f"/{d}/{target}"
        found = sorted((m[1], p.name) for p in _glob(lib_dir, link + ".*") if (m := re.fullmatch(pattern, p.name)))
        if found:
            version, name = max(found, key=lambda f: [int(x) for x in f[0].split(".")])
            return version, f"/{d}/{name}"
    return None


def _glob(d: Path, pattern: str) -> list[Path]:
    try:
        return list(d.glob(pattern))
    except OSError:
        return []


def package_version(package: str) -> str | None:
    """The installed OS package's upstream version, from dpkg or rpm (whichever this host has)."""
    for argv in (["dpkg-query", "-W", "-f", "${Version}", package], ["rpm", "-q", "--qf", "%{VERSION}", package]):
        try:
            out = subprocess.run(argv, capture_output=True, text=True, timeout=5, check=False)
        except (OSError, subprocess.SubprocessError):  # not this distribution's tool, or stuck
            continue
        if out.returncode == 0 and (v := out.stdout.strip()):
            return v.split(":", 1)[-1].split("-", 1)[0]  # Debian '1:50.0-2ubuntu1' -> '50.0'
    return None
