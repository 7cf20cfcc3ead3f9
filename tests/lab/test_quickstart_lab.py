"""docs/quickstart.md run as written: its own ```sh commands, read from the page in its order, on
lab hosts reached only as real hosts are, over ssh. Each host's /etc, /usr, /var, /opt and /root
are its own (`sshd.start(own_root=True)`), so the packages install on it the page's way, apt and
their maintainer scripts included, and this machine's files stay as they were. A command that
fails names its line on the page; so does a line of the page that this plan gives no place.

The lab's hosts for the page's: h0 is the controller's machine (its agent too) and the seat the
operator types at; h1 and h2 are GPU hosts (the page's gpu-001). h0 and h1 run their agents as
the packages' unit, h2 by hand: the page's two ways.

A lab host's units cannot be systemd's: this machine's systemd, where it is PID 1 at all, would
run them in this machine's namespaces and files, not the host's. So `systemctl enable --now UNIT`
runs `systemctl enable UNIT` as written (it needs no running systemd) and then starts the unit's
own ExecStart= command line, read from the file the package installed, as systemd would run it
(`unit_script`): its environment files, credentials, user and capabilities.

Where the lab differs from the page's fleet, the page's words are mapped (MAPPED, and the `how`
of each PLAN entry); the commands of the page's other paths are SKIPPED, each with its reason.
The page's packages are this checkout's (tests/debs.py). Nothing downloads: the lab's
namespaces reach no network beyond the lab.
"""

from __future__ import annotations

import json
import re
import shlex
import subprocess
import time
from concurrent.futures import ThreadPoolExecutor
from dataclasses import dataclass
from pathlib import Path

import pytest
import yaml

from clockfabric.lab import process, sshd
from clockfabric.topology import dumps, multirail
from tests.debs import missing

ROOT = Path(__file__).resolve().parents[2]
PAGE = ROOT / "docs" / "quickstart.md"
WHY_NOT = missing() or (None if Path(sshd.SSHD).exists() else f"{sshd.SSHD} is missing (openssh-server)")
pytestmark = pytest.mark.skipif(WHY_NOT is not None, reason=WHY_NOT or "")

CTL, GPU = "h0", ("h1", "h2")  # the controller's machine; the GPU hosts
HOSTS, UNITS, BY_HAND = (CTL, *GPU), (CTL, "h1"), ("h2",)


@dataclass(frozen=True)
class Where:
    on: tuple[str, ...]  # the hosts it runs on, over ssh, at once
    each: tuple[str, ...] | str = ()  # the page's gpu-001 stands for each of these in turn ("self": the host)
    how: str = "run"  # run | build | install | audit | stored | unit | daemon | fleet
    ok: tuple[int, ...] = (0,)  # exit codes that are the command doing its job


# the page's audit exit codes (ok, warn, fail, unknown) are verdicts on the fleet: the command did
# its job whichever it gives; that it reached every host is checked apart
AUDIT_EXITS = (0, 1, 2, 3)
# the page's commands, first match wins; each entry must match a line of the page
PLAN: list[tuple[str, Where]] = [
    (r"scripts/build-deb\.sh -o dist\b", Where((), how="build")),  # this machine is the build machine
    (r"apt install \./clockfabric-agent_", Where(GPU, how="install")),
    (r"apt install \./clockfabric-controller_", Where((CTL,), how="install")),
    (r"clockfabric --version$", Where(HOSTS)),
    (r"SSL_CERT_FILE=\S+ clockfabric audit .*--controller ", Where((CTL,), how="stored", ok=AUDIT_EXITS)),
    (r"clockfabric audit --list$", Where((CTL,))),
    (r"clockfabric audit ", Where((CTL,), how="audit", ok=AUDIT_EXITS)),  # from a machine that reaches the hosts
    (r"clockfabric tls new ", Where((CTL,))),
    (r"python3 -c .* > /etc/clockfabric/token$|chmod 600 /etc/clockfabric/token$", Where((CTL,))),
    (r"clockfabric key new ", Where((CTL,))),
    (r"clockfabric token host gpu-001 ", Where((CTL,), each=HOSTS)),
    (r"scp .*root@gpu-001:", Where((CTL,), each=HOSTS)),
    (r"install -m 644 fleet\.yaml |echo CLOCKFABRIC_CONTROLLER=", Where(UNITS)),
    (r"systemctl enable --now clockfabric-controller$", Where((CTL,), how="unit")),
    (r"systemctl enable --now clockfabric-agent$", Where(UNITS, how="unit")),
    (r"clockfabric agent ", Where(BY_HAND, each="self", how="daemon")),
    (r"curl .*/api/v1/fleet\b", Where((CTL,), how="fleet")),
]
SKIPPED: list[tuple[str, str]] = [
    (r"python3 -m venv |/opt/clockfabric/bin/pip |apt-get install victoria-metrics|install -d -m 755 /etc/clock"
     r"|/opt/clockfabric/bin/clockfabric --version", "the venv by hand: this run takes the Debian packages' path"),
    (r"apt install \./clockfabric-reference_", "the lab's reference is h0, the controller's machine, whose package "
     "carries SciPy; tests/unit/test_deb.py checks the reference's package"),
    (r"clockfabric audit .*--via 'kubectl exec", "hosts reached through kubectl: the lab has no Kubernetes"),
    (r"clockfabric controller .*--enroll pending|clockfabric agent --discover |clockfabric (hosts|discover|topology) "
     r"|export SSL_CERT_FILE=", "the path with no fleet file yet (section 7): tests/lab/test_discover.py runs it on "
     "a lab whose switches run lldpd"),
    (r"clockfabric controller ", "the controller by hand: where the packages are installed its unit runs it"),
]
# The page's names -> the lab's, as whole words; besides these, 10.1.0.5 is h0's address, gpu-001
# each host of its step's Where, and fleet.yaml the lab's own, in h0's home (the fixture writes it
# with the page's `ssh:` section, its user root and its python without sudo: the lab's sshd logs in
# root alone). `dist` is the packages' folder (tests/debs.py); "copy them out" is scp to each
# host's home; ~/.ssh/fleet and known_hosts, which an audit line names, are the lab's key and
# host keys on h0.
MAPPED = {
    "ctl.example": CTL,
    "--ssh-user ops": "--ssh-user root",
}
SELF_COPY = re.compile(r"scp (?:-p )?(\S+) root@(\S+):(\S*)")


@dataclass(frozen=True)
class Step:
    line: int  # where the command starts on the page
    text: str  # continuation lines joined, the comment and optional [--...] parts dropped

    def __str__(self) -> str:
        return f"docs/quickstart.md:{self.line}: `{self.text}`"


def page_steps() -> list[Step]:
    """Every command of the page's ```sh blocks, in order."""
    steps, lines, i, block = [], PAGE.read_text().splitlines(), 0, False
    while i < len(lines):
        line, start = lines[i], i + 1
        if line.startswith("```"):
            block = line == "```sh"
        elif block and line.strip():
            while line.endswith("\\"):
                i += 1
                line = line[:-1] + lines[i].strip()
            text = re.sub(r"\s+\[--[^]]*\]", "", line.split("  #")[0]).strip()
            steps.append(Step(start, " ".join(text.split())))
        i += 1
    return steps


def planned(step: Step) -> Where | str:
    """Why the step is skipped, or its Where."""
    for pattern, why in SKIPPED:
        if re.match(pattern, step.text):
            return why
    for pattern, where in PLAN:
        if re.match(pattern, step.text):
            return where
    raise AssertionError(f"{step}: this run has no place for it; add it to PLAN (where it runs) or SKIPPED (why not)")


def page_ssh_section() -> dict:
    """The fleet file's `ssh:` as the page gives it, mapped to the lab: its logins are root's,
    which needs no sudo."""
    for block in re.findall(r"```yaml\n(.*?)```", PAGE.read_text(), re.S):
        doc = yaml.safe_load(block)
        if isinstance(doc, dict) and "ssh" in doc:
            python = re.sub(r"^sudo -n ", "", doc["ssh"]["python"])
            return {"user": "root", "python": python}
    raise AssertionError("the page's fleet file has no ssh: section for the audit")


# ---- a unit's command line, as systemd would run it --------------------------------------
def parse_unit(text: str) -> dict[str, dict[str, list[str]]]:
    """{section: {key: values}} of a unit file; an empty value resets the key, as systemd reads it."""
    out: dict[str, dict[str, list[str]]] = {}
    section: dict[str, list[str]] = {}
    for line in text.replace("\\\n", " ").splitlines():
        line = line.strip()
        if not line or line[0] in "#;":
            continue
        if line.startswith("["):
            section = out.setdefault(line.strip("[]"), {})
            continue
        key, _, value = (part.strip() for part in line.partition("="))
        section[key] = [*section.get(key, []), value] if value else []
    return out


def env_file(text: str) -> dict[str, str]:
    env = {}
    for line in text.splitlines():
        key, sep, value = line.strip().partition("=")
        if sep and key and key[0] not in "#;":
            value = value.strip()
            env[key.strip()] = value[1:-1] if len(value) > 1 and value[0] == value[-1] and value[0] in "'\"" else value
    return env


def unit_script(name: str, text: str, read, hostname: str) -> str:
    """A shell script that runs unit `name`'s ExecStart= as systemd would: its ConditionPathExists=
    checked, its Environment= and EnvironmentFile= (read(path) gives a host's file, None if
    missing), its LoadCredential= files copied to $CREDENTIALS_DIRECTORY (%d) for its user alone,
    its RuntimeDirectory= and StateDirectory= made, the specifiers %d %H %t %S resolved, ${VAR}
    and $VAR expanded, and the command run as its User= and Group= with its AmbientCapabilities=,
    CapabilityBoundingSet=, NoNewPrivileges=, Nice= and UMask=. The rest of its sandbox
    (ProtectSystem=, SystemCallFilter=, ...) is systemd's own and not applied here."""
    unit = parse_unit(text)
    svc = unit["Service"]

    def one(key: str, default: str = "") -> str:
        return (svc.get(key) or [default])[-1]

    creds = f"/run/credentials/{name}.service"
    spec = {"d": creds, "H": hostname, "t": "/run", "S": "/var/lib", "%": "%"}

    def resolve(s: str) -> str:
        return re.sub(r"%(.)", lambda m: spec[m[1]], s)

    env: dict[str, str] = {}
    for value in svc.get("Environment", []):
        env.update(w.split("=", 1) for w in shlex.split(resolve(value)))
    for value in svc.get("EnvironmentFile", []):
        body = read(resolve(value.lstrip("-")))
        assert body is not None or value.startswith("-"), f"{name}: EnvironmentFile={value} is missing"
        env.update(env_file(body or ""))
    argv: list[str] = []
    for word in shlex.split(resolve(one("ExecStart"))):
        if m := re.fullmatch(r"\$(\w+)", word):
            argv += env.get(m[1], "").split()
        else:
            argv.append(re.sub(r"\$\{(\w+)\}", lambda m: env.get(m[1], ""), word))
    user = one("User", "root")
    owner = f"-o {user} -g {one('Group', user)}"
    lines = ["set -e"]
    for path in unit.get("Unit", {}).get("ConditionPathExists", []):
        said = shlex.quote(f"{name}.service: not started: ConditionPathExists={path} is not met")
        lines.append(f"[ -e {path} ] || {{ echo {said} >&2; exit 3; }}")
    if svc.get("LoadCredential"):
        lines.append(f"install -d -m 500 {owner} {creds}")
        for value in svc["LoadCredential"]:
            cred, _, source = value.partition(":")
            lines.append(f"install -m 400 {owner} {resolve(source)} {creds}/{cred}")
        env["CREDENTIALS_DIRECTORY"] = creds
    for key, base, var in (("RuntimeDirectory", "/run", "RUNTIME_DIRECTORY"),
                           ("StateDirectory", "/var/lib", "STATE_DIRECTORY")):
        for folder in " ".join(svc.get(key, [])).split():
            lines.append(f"install -d -m 755 {owner} {base}/{folder}")
            env[var] = f"{base}/{folder}"
    lines.append(f"umask {one('UMask', '0022')}")

    def caps(key: str) -> str:
        return ",".join(f"+{c.lower()}" for c in re.findall(r"CAP_(\w+)", " ".join(svc.get(key, []))))

    setpriv = ["setpriv", f"--reuid={user}", f"--regid={one('Group', user)}", "--init-groups"]
    if ambient := caps("AmbientCapabilities"):
        setpriv += [f"--inh-caps={ambient}", f"--ambient-caps={ambient}"]
    if "CapabilityBoundingSet" in svc:
        setpriv.append(f"--bounding-set=-all{',' if caps('CapabilityBoundingSet') else ''}"
                       f"{caps('CapabilityBoundingSet')}")
    if one("NoNewPrivileges") == "yes":
        setpriv.append("--no-new-privs")
    nice = ["nice", "-n", one("Nice")] if "Nice" in svc else []
    path = "PATH=/usr/local/sbin:/usr/local/bin:/usr/sbin:/usr/bin:/sbin:/bin"
    lines.append(shlex.join(["exec", "env", "-i", path, *(f"{k}={v}" for k, v in env.items()), *nice, *setpriv,
                             *argv]))
    return "\n".join(lines)


# ---- the lab, from the operator's seat ----------------------------------------------------
@dataclass
class Daemon:
    step: Step
    host: str
    proc: subprocess.Popen
    log: Path

    def tail(self) -> str:
        return "\n".join(self.log.read_text(errors="replace").splitlines()[-15:])


class Fleet:
    """The test's own ssh to the hosts: one connection a host, each command a session on it."""

    def __init__(self, sl: sshd.SshLab, debs, logs: Path) -> None:
        self.sl, self.debs, self.logs = sl, debs, logs
        self.address = {h: str(a.address) for h, a in sl.lab.topology.hosts.items()}
        self.switches = sorted(sl.lab.topology.switches)
        self.built: dict[str, Path] = {}
        self.daemons: list[Daemon] = []
        self.mux = ["-o", "ControlMaster=auto", "-o", f"ControlPath={logs}/ssh-%C", "-o", "ControlPersist=300"]

    def argv(self, program: str, host: str, *args: str) -> list[str]:
        """`ssh ... root@ADDRESS` (or scp's options) as the lab's client runs it."""
        ssh = self.sl.ssh_argv(host)
        return self.sl.client([program, *self.mux, *ssh[1:-1], *args]) + ([] if args else [ssh[-1]])

    def ssh(self, host: str, command: str, timeout_s: float = 120) -> subprocess.CompletedProcess:
        return subprocess.run(self.argv("ssh", host) + [command], capture_output=True, text=True,
                              timeout=timeout_s, stdin=subprocess.DEVNULL)

    def scp(self, source: Path, host: str) -> None:
        """To the host's home: how this machine's files reach a lab host."""
        done = subprocess.run(self.argv("scp", host, str(source), f"{self.sl.ssh_argv(host)[-1]}:"),
                              capture_output=True, text=True, timeout=60)
        assert done.returncode == 0, f"scp {source.name} to {host}: {done.stderr}"

    def read(self, host: str, path: str) -> str | None:
        done = self.ssh(host, f"cat {shlex.quote(path)}")
        return done.stdout if done.returncode == 0 else None

    def start(self, step: Step, host: str, command: str) -> None:
        """A daemon in a session held open, as a service manager or a terminal holds it."""
        log = self.logs / f"{host}-{len(self.daemons)}.log"
        proc = process.spawn(self.argv("ssh", host) + [command], log=log, stdin=subprocess.DEVNULL)
        self.daemons.append(Daemon(step, host, proc, log))

    def check_daemons(self) -> None:
        for d in self.daemons:
            assert d.proc.poll() is None, f"{d.step} on {d.host} exited {d.proc.returncode}:\n{d.tail()}"

    def stop(self) -> None:
        process.stop([d.proc for d in self.daemons])
        for host in HOSTS:  # each connection's master
            ssh = self.sl.ssh_argv(host)
            subprocess.run(self.argv("ssh", host, "-O", "exit", ssh[-1]), capture_output=True, timeout=30)


def mapped(text: str, target: str | None, address: dict[str, str]) -> str:
    """The page's command in the lab's names; target: the host gpu-001 stands for."""
    for word, lab in {**MAPPED, "10.1.0.5": address[CTL], **({"gpu-001": target} if target else {})}.items():
        text = re.sub(rf"(?<![\w.-]){re.escape(word)}(?![\w-])", lab, text)
    return text


def copies_onto_itself(command: str, host: str) -> bool:
    """`scp FILE root@HOST:DEST` run on HOST itself, DEST being FILE: already in place there."""
    m = SELF_COPY.fullmatch(command)
    if not m or m[2] != host:
        return False
    source = m[1] if m[1].startswith("/") else f"/root/{m[1]}"
    dest = m[3] or "/root/"
    dest = dest if dest.startswith("/") else f"/root/{dest}"
    return (dest + Path(source).name if dest.endswith("/") else dest) == source


def run_step(fleet: Fleet, step: Step, where: Where) -> None:
    if where.how == "build":
        words = shlex.split(step.text)[1:]
        packages = [w for i, w in enumerate(words) if w != "-o" and (i == 0 or words[i - 1] != "-o")]
        fleet.built = fleet.debs.get(*(packages or ["agent", "controller"]))  # `-o dist`: the session's folder
        return
    pairs = ([(h, h) for h in where.on] if where.each == "self"
             else [(host, target) for target in (where.each or [None]) for host in where.on])
    jobs = [(host, mapped(step.text, target, fleet.address)) for host, target in pairs]
    for host, command in jobs:
        if copies_onto_itself(command, host):
            print(f"skipped {step} on {host}: the file is in place there already")
    jobs = [(host, command) for host, command in jobs if not copies_onto_itself(command, host)]
    if where.how in ("unit", "daemon"):
        def start(job: tuple[str, str]) -> None:
            host, command = job
            if where.how == "unit":  # enabled as written; started as systemd starts it
                unit, enable = command.split()[-1], command.replace(" --now", "")
                enabled = fleet.ssh(host, enable)
                assert enabled.returncode == 0, f"{step} on {host}: {enable}: {enabled.stderr}"
                text = fleet.read(host, f"/etc/systemd/system/{unit}.service") or fleet.read(
                    host, f"/lib/systemd/system/{unit}.service")
                assert text, f"{step} on {host}: no unit {unit}.service installed"
                command = unit_script(unit, text, lambda p: fleet.read(host, p), host)
            fleet.start(step, host, command)

        with ThreadPoolExecutor(len(jobs)) as pool:
            list(pool.map(start, jobs))
        return
    if where.how == "fleet":
        return wait_for_fleet(fleet, step, jobs)
    copy = None
    if where.how == "install":  # "copy them out": the package to the host's home, then the line as written
        deb = shlex.split(step.text)[-1].removeprefix("./")
        made = {p.name: p for p in fleet.built.values()}
        assert deb in made, f"{step}: the page installs {deb}; scripts/build-deb.sh made {', '.join(made)}"
        copy = made[deb]

    def run(job: tuple[str, str]) -> subprocess.CompletedProcess:
        if copy:
            fleet.scp(copy, job[0])
        return fleet.ssh(*job)

    with ThreadPoolExecutor(len(jobs)) as pool:
        results = list(pool.map(run, jobs))
    for (host, command), done in zip(jobs, results, strict=True):
        if done.returncode not in where.ok:
            raise AssertionError(f"{step} on {host} (ran `{command}`) exited {done.returncode}:\n"
                                 f"{done.stdout[-2000:]}{done.stderr[-2000:]}")
        if where.how in ("audit", "stored") and f"{len(HOSTS)} of {len(HOSTS)} hosts answered" not in done.stdout:
            raise AssertionError(f"{step} on {host}: not every host answered the audit:\n{done.stdout[-3000:]}")
        if where.how == "stored":
            check_stored(fleet, step, host, done.stderr)


def fleet_state(fleet: Fleet, command: str) -> dict | None:
    done = fleet.ssh(CTL, command, timeout_s=30)
    try:
        return json.loads(done.stdout) if done.returncode == 0 else None
    except ValueError:
        return None


def wait_for_fleet(fleet: Fleet, step: Step, jobs) -> None:
    """The page's curl, again until every host's agent has pushed (`Once agents push`); then its
    answer is the one the page describes: every host ok, the switches never seen."""
    ((_, command),) = jobs
    deadline, state = time.monotonic() + 45, None
    while time.monotonic() < deadline:
        fleet.check_daemons()
        state = fleet_state(fleet, command)
        if state and state.get("ok") == len(HOSTS):
            assert state == {"hosts": len(HOSTS) + len(fleet.switches), "ok": len(HOSTS), "stale": [],
                             "never_seen": fleet.switches, "open_alerts": state["open_alerts"]}, f"{step}: {state}"
            return
        time.sleep(0.5)
    daemons = "\n".join(f"-- {d.step} on {d.host}:\n{d.tail()}" for d in fleet.daemons)
    raise AssertionError(f"{step}: not every host pushed after 45 s: {state}\n{daemons}")


def check_stored(fleet: Fleet, step: Step, host: str, stderr: str) -> None:
    """The page: the report is kept in the controller, read back by the page's own curl."""
    m = re.search(r"stored as audit (\d+) on (\S+)", stderr)
    assert m, f"{step} on {host}: the report was not stored:\n{stderr[-2000:]}"
    (curl,) = [s for s in page_steps() if s.text.startswith("curl ")]
    got = fleet_state(fleet, mapped(curl.text, None, fleet.address).replace("/api/v1/fleet", f"/api/v1/audits/{m[1]}"))
    assert got and got["id"] == int(m[1]) and got["report"]["hosts"] == list(HOSTS), got


# ---- the run ---------------------------------------------------------------------------------
@pytest.fixture(scope="module")
def fleet(make_module_lab, debs, tmp_path_factory):
    t0 = time.monotonic()
    # 10gbit: the packages cross the lab's links by scp
    lab = make_module_lab(multirail(hosts=3, planes=1, leaves=1, spines=0, host_rate="10gbit"))
    folder = tmp_path_factory.mktemp("quickstart")
    sl = sshd.start(lab, folder / "ssh", own_root=True)
    f = Fleet(sl, debs, folder)
    try:
        # the operator's seat: the fleet file of section 2, and the files its audit lines name
        fleet_file = folder / "fleet.yaml"
        fleet_file.write_text(dumps(lab.topology) + f"ssh: {json.dumps(page_ssh_section())}\n")
        f.scp(fleet_file, CTL)
        done = f.ssh(CTL, "cp ~/.ssh/id_ed25519 ~/.ssh/fleet && cp ~/.ssh/known_hosts known_hosts")
        assert done.returncode == 0, done.stderr
        print(f"setup {time.monotonic() - t0:.1f} s")
        yield f
    finally:
        f.stop()
        sl.stop()


def this_machine() -> tuple:
    """What the packages would change on this machine, were they installed here."""
    return (Path("/etc/passwd").read_bytes(),
            *(Path(p).exists() for p in ("/opt/clockfabric", "/etc/clockfabric", "/usr/bin/clockfabric")))


def test_the_quickstart_runs_as_written(fleet):
    f = fleet
    before = this_machine()
    steps = page_steps()
    plan = [(s, planned(s)) for s in steps]
    unused = [p for p, where in PLAN if not any(w is where for _, w in plan)]
    assert not unused, f"PLAN entries no line of the page matches any more: {unused}"
    for step, where in plan:
        if isinstance(where, str):
            print(f"skipped {step}: {where}")
            continue
        started = time.monotonic()
        run_step(f, step, where)
        print(f"{time.monotonic() - started:5.1f} s {step}")
    assert this_machine() == before, "the hosts' installs reached this machine's own files"


def test_no_token_in_the_process_list_or_a_log_line(fleet):
    """With the fleet the page started still running: the fleet token and every host's credential
    are in no process's arguments (what `ps` shows every user), and in no log line the fleet wrote:
    the daemons' output (the controller's, its engines' and the agents', request lines and URLs
    among them) and every text file under the hosts' /var/log, and their logs and event logs under
    /var/lib/clockfabric and /run/clockfabric (the engines' gate keeps the hosts' credentials in a
    file of its own, its owner's alone)."""
    f = fleet
    f.check_daemons()
    tokens = {"the fleet token": f.read(CTL, "/etc/clockfabric/token")}
    tokens |= {f"{h}'s credential": f.read(h, "/etc/clockfabric/host.token") for h in HOSTS}
    tokens = {name: (t or "").strip() for name, t in tokens.items()}
    assert all(len(t) >= 32 for t in tokens.values()), "the run left a token missing or short"
    argvs = []
    for proc in Path("/proc").iterdir():
        try:
            argvs.append(proc.joinpath("cmdline").read_bytes().replace(b"\0", b" ").decode(errors="replace"))
        except OSError:
            pass  # not a process, or one that has ended
    assert len(argvs) > 20
    logs = {f"this machine's {p.name}": p.read_text(errors="replace") for p in f.logs.glob("*.log")}
    assert any("clockfabric" in text for text in logs.values())
    for host in HOSTS:
        # the files' names and text, NUL-separated: the tokens stay out of this command's own arguments
        done = f.ssh(host, "{ find /var/log -type f; find /var/lib/clockfabric /run/clockfabric -type f "
                           "\\( -name '*.log' -o -name '*.events' \\); } 2>/dev/null | xargs -r grep -Il . "
                           "| while read -r p; do printf '%s\\0' \"$p\"; cat \"$p\"; printf '\\0'; done")
        parts = done.stdout.split("\0")
        logs |= {f"{host}:{name}": text for name, text in zip(parts[::2], parts[1::2], strict=False)}
    leaks = [f"{name} in {where}" for name, t in tokens.items()
             for where, text in [*(("the process list", a) for a in argvs), *logs.items()] if t in text]
    assert not leaks, "; ".join(leaks)
    assert any(name.startswith(f"{CTL}:/var/lib/clockfabric/") for name in logs), sorted(logs)
    gate = f.ssh(CTL, "stat -c %a /var/lib/clockfabric/*/gate/vmauth.yml")
    assert gate.stdout.split() == ["600"], gate.stdout + gate.stderr


def test_a_hosts_credential_pushes_for_it_alone_and_revoking_one_leaves_the_rest(fleet):
    """h1's own credential, over the fleet's TLS, pushing as h2: refused. Then h2 revoked, as
    docs/security.md does it: h2's agent is refused from then on while h0's and h1's push on."""
    f = fleet
    header = '<<< "Authorization: Bearer $(cat /etc/clockfabric/host.token)"'  # never in curl's arguments
    as_h2 = f.ssh("h1", ". /etc/default/clockfabric-agent && curl -s -o /dev/null -w '%{http_code}' "
                        "--cacert /etc/clockfabric/ca.crt -H @- -H 'Content-Type: application/json' "
                        "--data '{\"host\": \"h2\", \"boot\": \"forged\", \"events\": []}' "
                        f"\"$CLOCKFABRIC_CONTROLLER/api/v1/push\" {header}")
    assert as_h2.stdout == "403", as_h2.stdout + as_h2.stderr
    url = f"https://{f.address[CTL]}:7400"
    done = f.ssh(CTL, f"SSL_CERT_FILE=/etc/clockfabric/ca.crt clockfabric token revoke h2 --controller {url} "
                      "--token-file /etc/clockfabric/token")
    said = "h2: revoked; its new credential: clockfabric token host h2 --epoch 1"
    assert done.returncode == 0 and said in done.stdout, done.stdout + done.stderr

    def as_operator(path: str) -> str:  # the page's curl, with the fleet token
        return f"curl -s --cacert /etc/clockfabric/ca.crt -H @- {url}{path} {header.replace('host.token', 'token')}"

    deadline, state = time.monotonic() + 30, None
    while time.monotonic() < deadline:
        f.check_daemons()  # h2's agent runs on, refused
        state = fleet_state(f, as_operator("/api/v1/fleet"))
        if state and state["stale"] == ["h2"]:
            break
        time.sleep(0.5)
    assert state and state["stale"] == ["h2"] and state["ok"] == len(HOSTS) - 1, state
    metrics = f.ssh(CTL, as_operator("/metrics"))
    assert re.search(r'clockfabric_controller_pushes_refused_total\{reason="revoked"\} [1-9]', metrics.stdout), \
        metrics.stdout[-2000:]
