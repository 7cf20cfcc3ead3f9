"""A test's script run in a network namespace of its own (`unshare --net`): the namespace, and the
veth pairs the script makes in it, vanish with the process. Without root, a tool the script needs,
or a kernel that allows namespaces, the test is skipped, saying which."""

import json
import os
import shutil
import subprocess
import sys

import pytest


def run_in_netns(script: str, *, tools: tuple[str, ...] = ("ip",), timeout_s: float = 30):
    """What the Python `script` printed last, as JSON; its stderr in the failure if it failed."""
    if os.geteuid() != 0:
        pytest.skip("needs root: a veth pair in its own network namespace")
    if missing := [t for t in ("unshare", *tools) if shutil.which(t) is None]:
        pytest.skip(f"needs {', '.join(missing)}")
    proc = subprocess.run(["unshare", "--net", sys.executable, "-c", script], capture_output=True, text=True,
                          timeout=timeout_s)
    if proc.returncode != 0 and "Operation not permitted" in proc.stderr:
        pytest.skip(f"no network namespaces here: {proc.stderr.strip().splitlines()[-1]}")
    assert proc.returncode == 0, proc.stderr
    return json.loads(proc.stdout.strip().splitlines()[-1])
