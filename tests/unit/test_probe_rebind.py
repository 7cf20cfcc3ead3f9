"""The probe engine's sockets follow their rail to a new device of the same name
(probe.engine.bind_to_rail, ProbeEngine.rebind): SO_BINDTODEVICE keeps the old device's index."""

import json
import os
import shutil
import subprocess
import sys
import textwrap

import pytest

MOVED = textwrap.dedent("""
    import json, os, socket, subprocess, time
    from clockfabric.probe.engine import SO_BINDTOIFINDEX, ProbeEngine

    def ip(*args, ns=None):
        pre = ["nsenter", f"--net=/proc/{ns}/ns/net"] if ns else []
        subprocess.run([*pre, "ip", *args], check=True)

    def plug():
        ip("addr", "add", "10.9.0.1/24", "dev", "eth0")
        ip("link", "set", "eth0", "up")

    ip("link", "add", "eth0", "type", "veth", "peer", "name", "sw0")
    ip("link", "set", "sw0", "up")
    plug()
    engine = ProbeEngine("10.9.0.1", {"h0": "10.9.0.1", "h1": "10.9.0.2"}, ["h1"], rails=["eth0"], ports=2)
    socks = [p.sock for p in engine._paths + engine._reflectors]
    bound = lambda: sorted({s.getsockopt(socket.SOL_SOCKET, SO_BINDTOIFINDEX) for s in socks})
    out = {"before": bound(), "eth0_before": socket.if_nametoindex("eth0")}
    engine.rebind()
    out["unchanged"] = bound()
    # another host's namespace, whose own device holds eth0's index there: eth0 gets a new one
    other = subprocess.Popen(["unshare", "--net", "sh", "-c",
                              "ip link add d0 type veth peer name d1 && exec sleep 30"])
    deadline = time.monotonic() + 10
    while subprocess.run(["nsenter", f"--net=/proc/{other.pid}/ns/net", "ip", "link", "show", "d1"],
                         capture_output=True).returncode and time.monotonic() < deadline:
        time.sleep(0.05)
    ip("link", "set", "eth0", "netns", str(other.pid))  # the cable moved away ...
    engine.rebind()  # nothing named eth0 here now: nothing to bind to
    ip("link", "set", "eth0", "netns", str(os.getpid()), ns=other.pid)  # ... and back
    other.kill()
    plug()
    out["eth0_after"] = socket.if_nametoindex("eth0")
    out["stale"] = bound()
    engine.rebind()
    out["after"] = bound()
    for s in socks:
        s.close()
    print(json.dumps(out))
""")


@pytest.mark.skipif(os.geteuid() != 0, reason="needs root: a veth pair in its own network namespace")
@pytest.mark.skipif(not (shutil.which("unshare") and shutil.which("nsenter")), reason="needs unshare, nsenter")
def test_probe_sockets_follow_a_nic_that_came_back_with_another_index():
    proc = subprocess.run(["unshare", "--net", sys.executable, "-c", MOVED], capture_output=True, text=True,
                          timeout=30)
    if proc.returncode != 0 and "Operation not permitted" in proc.stderr:
        pytest.skip(f"no network namespaces here: {proc.stderr.strip().splitlines()[-1]}")
    assert proc.returncode == 0, proc.stderr
    out = json.loads(proc.stdout.strip().splitlines()[-1])
    assert out["before"] == out["unchanged"] == [out["eth0_before"]], out
    assert out["eth0_after"] != out["eth0_before"], out  # the premise: the NIC is back under another index
    assert out["stale"] == [out["eth0_before"]], out  # the kernel kept the old index ...
    assert out["after"] == [out["eth0_after"]], out  # ... until rebound
