"""The container image (scripts/build-image.sh), built once per session and run with podman as the
Kubernetes manifests run it: the archive's name, config and files; `clockfabric --version` and
`agent --help` with no network; the agent's init container and readiness probe, their commands
taken from the DaemonSet; and the controller as the Deployment runs it (its user, a read-only root,
its files where the pods mount them, TLS), starting VictoriaMetrics, vmauth, vmalert and
Alertmanager from the image's Debian packages and answering /readyz, with no network at all.

Everything runs in a podman store of the test's own under the session's temporary folder, removed
at the end. The build takes a minute or two, so this is `make image-test`, apart from the unit
tests. Runtimes: the first of crun and runc that starts a container here; crun refuses hosts
with cgroup v1 and v2 controllers mounted side by side, runc runs there. Each container gets this
process's own open-file limit and a small process limit: podman's defaults raise them, which root
without CAP_SYS_RESOURCE may not."""

from __future__ import annotations

import json
import os
import resource
import secrets
import shutil
import subprocess
import sys
import tarfile
import time
from pathlib import Path

import pytest
import yaml

from clockfabric.auth.credential import host_token
from tests.conftest import run_cli

if sys.version_info >= (3, 11):
    import tomllib
else:
    import tomli as tomllib

ROOT = Path(__file__).resolve().parents[2]
K8S = ROOT / "deploy" / "kubernetes"
VERSION = tomllib.loads((ROOT / "pyproject.toml").read_text())["project"]["version"]
NAME = f"docker.io/library/clockfabric:{VERSION}"  # what containerd and the kubelet call clockfabric:VERSION
NONROOT = "65532:65532"  # the controller's runAsUser and runAsGroup, and the image's USER


def debian() -> bool:
    try:
        return "ID=debian" in Path("/etc/os-release").read_text().splitlines()
    except OSError:
        return False


def why_not() -> str | None:
    if os.geteuid() != 0:
        return "builds the image as root (mmdebstrap in a chroot; CI runs as root)"
    if not debian():
        return "builds the image on Debian (the image is this machine's release)"
    missing = [t for t in ("mmdebstrap", "podman") if shutil.which(t) is None]
    if missing:
        return f"{' and '.join(missing)} not installed (apt-get install --no-install-recommends mmdebstrap podman runc)"
    return None


pytestmark = [pytest.mark.skipif(why_not() is not None, reason=why_not() or ""),
              pytest.mark.timeout(1800)]  # the first test waits for the build


def workload(kind: str, name: str) -> dict:
    for path in (K8S / "base").glob("*.yaml"):
        for doc in yaml.safe_load_all(path.read_text()):
            if doc and doc["kind"] == kind and doc["metadata"]["name"] == name:
                return doc["spec"]["template"]["spec"]
    raise AssertionError(f"no {kind} {name} in {K8S / 'base'}")


@pytest.fixture(scope="session")
def archive(tmp_path_factory) -> Path:
    out = tmp_path_factory.mktemp("image")
    started = time.monotonic()
    done = subprocess.run([str(ROOT / "scripts" / "build-image.sh"), "-o", str(out), "--no-load"],
                          capture_output=True, text=True, timeout=1200)
    assert done.returncode == 0, done.stderr[-3000:]
    print(f"\nbuild-image: {time.monotonic() - started:.0f} s")
    path = Path(done.stdout.split()[0])
    assert path.parent == out and path.name.startswith(f"clockfabric-image_{VERSION}_")
    yield path
    path.unlink()


@pytest.fixture(scope="session")
def archive_files(archive) -> dict:
    """manifest.json, the image config and the one layer's members (name -> TarInfo)."""
    with tarfile.open(archive) as tar:
        (manifest,) = json.load(tar.extractfile("manifest.json"))
        config = json.load(tar.extractfile(manifest["Config"]))
        (layer,) = manifest["Layers"]
        with tarfile.open(fileobj=tar.extractfile(layer)) as rootfs:
            members = {m.name.removeprefix("./"): m for m in rootfs.getmembers()}
    return {"manifest": manifest, "config": config, "members": members}


class Podman:
    """podman on a store of its own, with a runtime that starts containers here."""

    def __init__(self, home: Path) -> None:
        self.home = home
        self.base = ["podman", "--root", str(home / "root"), "--runroot", str(home / "run"),
                     "--tmpdir", str(home / "tmp"), "--events-backend", "none", "--cgroup-manager", "cgroupfs"]
        soft, hard = (1024 if n == resource.RLIM_INFINITY else n for n in resource.getrlimit(resource.RLIMIT_NOFILE))
        self.limits = ["--ulimit", f"nofile={soft}:{hard}", "--ulimit", "nproc=4096:4096"]

    def __call__(self, *args: str, check: bool = True, timeout: float = 120) -> subprocess.CompletedProcess:
        done = subprocess.run([*self.base, *args], capture_output=True, text=True, timeout=timeout)
        if check and done.returncode != 0:
            raise AssertionError(f"podman {' '.join(args)} exited {done.returncode}:\n{done.stdout}\n{done.stderr}")
        return done

    def run(self, *args: str, image_args: tuple[str, ...] = (), **kw) -> subprocess.CompletedProcess:
        return self("run", "--rm", "--network", "none", *self.limits, *args, NAME, *image_args, **kw)


@pytest.fixture(scope="session")
def podman(archive, tmp_path_factory):
    home = tmp_path_factory.mktemp("podman")
    tried = []
    for driver in ("overlay", "vfs"):
        p = Podman(home)
        p.base += ["--storage-driver", driver]
        loaded = p("load", "-q", "-i", str(archive), check=False, timeout=600)
        if loaded.returncode == 0:
            break
        tried.append(f"{driver}: {loaded.stderr.strip()}")
        p("system", "reset", "--force", check=False)
    else:
        pytest.fail("podman cannot load the archive: " + "; ".join(tried))
    for runtime in [r for r in ("crun", "runc") if shutil.which(r)]:
        started = p("run", "--rm", "--network", "none", "--runtime", runtime, *p.limits, "--entrypoint", "true",
                    NAME, check=False)
        if started.returncode == 0:
            p.base += ["--runtime", runtime]
            break
        tried.append(f"{runtime}: {started.stderr.strip()}")
    else:
        p("system", "reset", "--force", check=False)
        shutil.rmtree(home, ignore_errors=True)
        pytest.skip("no container runtime starts a container here: " + "; ".join(tried or ["crun, runc missing"]))
    yield p
    p("rm", "--all", "--force", "--time", "0", check=False)
    p("system", "reset", "--force", check=False)
    shutil.rmtree(home, ignore_errors=True)


def test_the_archive_is_named_and_configured_as_the_manifests_run_it(archive_files):
    assert archive_files["manifest"]["RepoTags"] == [NAME]
    config = archive_files["config"]
    assert (config["os"], config["architecture"]) == ("linux", "amd64")
    c = config["config"]
    assert c["Entrypoint"] == ["clockfabric"] and c["Cmd"] == ["--help"]
    assert c["User"] == NONROOT
    assert "PATH=/usr/local/sbin:/usr/local/bin:/usr/sbin:/usr/bin:/sbin:/bin" in c["Env"]
    assert c["Labels"]["org.opencontainers.image.version"] == VERSION
    for kind, name in (("DaemonSet", "clockfabric-agent"), ("Deployment", "clockfabric-controller")):
        pod = workload(kind, name)
        for container in pod.get("initContainers", []) + pod["containers"]:
            assert container["image"] == f"clockfabric:{VERSION}", container["name"]


def test_the_root_filesystem_holds_what_the_pods_run_and_little_else(archive_files):
    members = archive_files["members"]
    assert members["usr/bin/clockfabric"].linkname == "/opt/clockfabric/bin/clockfabric"
    for tool in ("victoria-metrics", "vmauth", "vmalert", "prometheus-alertmanager", "python3", "sh"):
        assert f"usr/bin/{tool}" in members, tool
    # the pods mount their files below /etc/clockfabric; the controller's user must pass through it
    assert members["etc/clockfabric"].mode & 0o755 == 0o755
    assert not [n for n in members if n.startswith("dev/") and not members[n].isdir()]
    assert not [n for n in members if n.startswith(("usr/share/man/", "var/lib/apt/lists/", "var/cache/apt/"))
                and members[n].isfile() and not n.endswith("/lock")]
    assert not [n for n in members if n.startswith("usr/share/doc/") and members[n].isfile()
                and not n.endswith("/copyright")]
    for absent in ("usr/bin/vmbackup", "usr/bin/vmrestore", "usr/bin/vmctl", "usr/bin/vmagent",
                   "usr/share/perl", "root/.cache/pip"):
        assert not [n for n in members if n == absent or n.startswith(absent + "/")], absent
    mib = sum(m.size for m in members.values() if m.isfile()) / 2**20
    assert mib < 540, f"{mib:.0f} MiB"  # 491 MiB measured, the venv 322 of it


def test_version_and_agent_help_with_no_network(podman):
    assert podman.run(image_args=("--version",)).stdout.strip() == f"clockfabric {VERSION}"
    done = podman.run(image_args=("agent", "--help"))
    assert "Usage: clockfabric agent" in done.stdout and "--topology" in done.stdout


def test_the_agents_init_container_writes_the_nodes_credential(podman, tmp_path):
    (init,) = workload("DaemonSet", "clockfabric-agent")["initContainers"]
    token = secrets.token_urlsafe(32)
    (tmp_path / "token").mkdir()
    (tmp_path / "token" / "token").write_text(token + "\n")
    (tmp_path / "state").mkdir()
    mounts = {"token": tmp_path / "token", "state": tmp_path / "state"}
    volumes = [f"--volume={mounts[m['name']]}:{m['mountPath']}" + (":ro" if m.get("readOnly") else "")
               for m in init["volumeMounts"]]
    podman.run("--user", "0", "--read-only", "--cap-drop", "all", "--security-opt", "no-new-privileges",
               "--env", "CLOCKFABRIC_NODE=gpu0", *volumes, "--entrypoint", init["command"][0],
               image_args=tuple(init["command"][1:]))
    assert (tmp_path / "state" / "host.token").read_text().strip() == host_token(token, "gpu0")


def test_the_agents_readiness_probe_runs_in_the_image(podman, tmp_path):
    (agent,) = workload("DaemonSet", "clockfabric-agent")["containers"]
    probe = agent["readinessProbe"]["exec"]["command"]
    state = tmp_path / "agent" / "gpu0.json"
    state.parent.mkdir()
    state.write_text("{}")
    args = ("--user", "0", "--read-only", "--env", "CLOCKFABRIC_NODE=gpu0",
            f"--volume={tmp_path}:/run/clockfabric:ro", "--entrypoint", probe[0])
    assert podman.run(*args, image_args=tuple(probe[1:]), check=False).returncode == 0
    os.utime(state, (time.time() - 60, time.time() - 60))
    assert podman.run(*args, image_args=tuple(probe[1:]), check=False).returncode == 1


def test_the_controller_starts_its_engines_and_answers_readyz(podman, tmp_path):
    """As the Deployment runs it, but with SQLite in /tmp and no URLs: it starts its own engine,
    gate, rules evaluator and Alertmanager from the image; no network, so nothing can download."""
    pod = workload("Deployment", "clockfabric-controller")
    (c,) = pod["containers"]
    run_cli("tls", "new", str(tmp_path / "tls"), "--name", "127.0.0.1")
    files = {"fleet": {"fleet.yaml": (K8S / "examples" / "fleet.yaml").read_text()},
             "token": {"token": secrets.token_urlsafe(32) + "\n"},
             "tls": {n: (tmp_path / "tls" / n).read_text() for n in ("tls.crt", "tls.key")}}
    uid, gid = (int(x) for x in NONROOT.split(":"))
    assert (pod["securityContext"]["runAsUser"], pod["securityContext"]["runAsGroup"]) == (uid, gid)
    volumes = []
    for m in c["volumeMounts"]:
        if m["name"] == "tmp":
            continue
        d = tmp_path / "mounts" / m["name"]
        d.mkdir(parents=True)
        for file, text in files[m["name"]].items():
            (d / file).write_text(text)
            os.chown(d / file, 0, gid)  # the Secret's defaultMode 0440, read through fsGroup
            (d / file).chmod(0o440)
        volumes.append(f"--volume={d}:{m['mountPath']}:ro")
    elsewhere = ("--db=", "--listen=", "--series-url=", "--series-port=", "--alertmanager=", "--no-rules")
    args = [a for a in c["args"] if not a.startswith(elsewhere)] + ["--db=/tmp/fleet.db", "--listen=127.0.0.1:7400"]
    name = f"clockfabric-controller-{secrets.token_hex(4)}"
    podman("run", "--detach", "--name", name, "--network", "none", *podman.limits,
           "--user", NONROOT, "--read-only", "--read-only-tmpfs=false", "--tmpfs", "/tmp:rw,mode=1777",
           "--workdir", c["workingDir"], "--cap-drop", "all", "--security-opt", "no-new-privileges",
           *volumes, "--entrypoint", c["command"][0], NAME, *args)
    try:
        # the readiness probe's request, from inside: the container has no network but its loopback
        ca = (tmp_path / "tls" / "ca.crt").read_text()
        readyz = (f"import ssl, urllib.request; ctx = ssl.create_default_context(cadata={ca!r}); "
                  "r = urllib.request.urlopen('https://127.0.0.1:7400/readyz', context=ctx, timeout=2); "
                  "print(r.read().decode())")
        deadline = time.monotonic() + 90
        while True:
            running = podman("inspect", name, "--format", "{{.State.Running}}").stdout.strip() == "true"
            assert running, podman("logs", name).stderr[-3000:]
            answer = podman("exec", name, "python3", "-c", readyz, check=False)
            if answer.returncode == 0 or time.monotonic() > deadline:
                break
            time.sleep(1)
        assert answer.returncode == 0, f"{answer.stderr[-1000:]}\n{podman('logs', name).stderr[-3000:]}"
        assert json.loads(answer.stdout) == {"ready": True}
        processes = podman("top", name, "user", "comm").stdout.split("\n")[1:]
        users = {line.split()[0] for line in processes if line.strip()}
        commands = {line.split()[1] for line in processes if line.strip()}
        assert users == {str(uid)}, processes
        assert {"clockfabric", "victoria-metric", "vmauth", "vmalert", "prometheus-aler"} <= commands, processes
        # SIGTERM, as the kubelet stops a pod: the controller runs as PID 1, which the kernel sends
        # no signal it has no handler for; it stops its children and exits 130 (the CLI's code for
        # a command stopped by a signal once its cleanup ran), well before podman would SIGKILL it (137)
        started = time.monotonic()
        podman("stop", "--time", "20", name, timeout=60)
        stopped_s = time.monotonic() - started
        exit_code = podman("inspect", name, "--format", "{{.State.ExitCode}}").stdout.strip()
        assert (exit_code, stopped_s < 15) == ("130", True), (exit_code, stopped_s, podman("logs", name).stderr[-3000:])
    finally:
        podman("rm", "--force", "--time", "0", name, check=False)
