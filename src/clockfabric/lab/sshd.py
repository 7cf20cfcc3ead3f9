"""Lab hosts reached as real hosts are: over ssh, by address, from a fleet file.

`start` runs a real OpenSSH sshd on every lab host, inside the host's network namespace on its
stable address, port 22, and in a UTS namespace of its own whose hostname is the host's name.
sshd's sessions inherit the mount namespace of `ip netns exec`, so they read the lab's
/etc/netns/NS/hosts (lab/hostsfile.py): there `hostname` prints h1 and `getent hosts h1` gives
h1's stable address, the address gloo and torch bind to. Logins are root with a generated key
only; the host key is generated too, and known_hosts names it under every host's name and address.

Lab hosts share this machine's filesystem. With `own_root`, each sshd also runs in a mount
namespace of its own where the host's /etc, /usr and /var are copy-on-write layers over this
machine's and /opt, /root and /run start empty: what a session installs there (a package, its
system user, its files under /etc and /opt) stays on that host, vanishes with its sshd, and
this machine's own files stay as they were. root's ~/.ssh on every such host holds the lab's
client key and known_hosts, so `ssh HOST` and `scp FILE HOST:` work as written from one host
to another, as on a fleet whose admin logs in with one key.

`folder/fleet.yaml` is the lab's topology plus the fleet-wide `ssh:` section that the audit's
ssh transport reads, so `clockfabric audit --hosts folder/fleet.yaml` treats the lab as a fleet.

Where the client runs: the root namespace has no route into the lab (the lab never touches it),
so ssh, the audit and any coordinator run inside a lab namespace. The lab's first host plays
the login node: `SshLab.client_ns` is its namespace and `SshLab.client(argv)` wraps a command
to run there (`ip netns exec NS argv`), e.g. `client(ssh_argv("h2") + ["hostname"])`. In-process
code may instead open its sockets under `netns.entered(client_ns)`, as controller/client.py does.

Lab tooling: the product never imports this module.
"""

from __future__ import annotations

import json
import os
import shlex
import socket
import subprocess
import sys
import time
from dataclasses import dataclass, field
from functools import partial
from pathlib import Path

from clockfabric.errors import ClockfabricError
from clockfabric.lab import netns, process
from clockfabric.lab.state import Lab
from clockfabric.topology import dumps

SSHD = "/usr/sbin/sshd"
PORT = 22
PRIVSEP_DIR = Path("/run/sshd")  # root's sshd refuses to start without it (systemd makes it at boot)
# sshd retitles itself ("sshd: ... [listener]"), which the lab's record of its processes would
# not know as ours; this shell, named clockfabric-sshd with the lab's name, stays its parent and
# takes it down when stopped
_LAUNCH = 'hostname "$2" || exit 1; "$3" -D -e -f "$4" & trap \'kill $!; wait $!; exit 143\' TERM INT; wait $!'
# own_root: run first, in the sshd's own mount namespace; $5 is the folder its layers live in
# (a tmpfs seen only there), $6 the lab's ssh folder. /etc/hosts is the lab's, copied in before
# the layer over /etc hides the one `ip netns exec` bound there.
_OWN_ROOT = r"""set -e
r=$5
mount -t tmpfs -o mode=700 clockfabric-root "$r"
cp /etc/hosts "$r/hosts"
for d in /etc /usr /var; do
    mkdir "$r$d" "$r$d.work"
    mount -t overlay overlay -o "lowerdir=$d,upperdir=$r$d,workdir=$r$d.work" "$d"
done
for d in /opt /root /run; do mount -t tmpfs -o mode=755 tmpfs "$d"; done
chmod 700 /root
install -d -m 755 /run/sshd
install -d -m 1777 /run/lock
cat "$r/hosts" > /etc/hosts
echo "$2" > /etc/hostname
install -d -m 700 /root/.ssh
install -m 600 "$6/client_key" /root/.ssh/id_ed25519
install -m 644 "$6/client_key.pub" /root/.ssh/id_ed25519.pub
install -m 644 "$6/known_hosts" /root/.ssh/known_hosts
set +e
"""
_WRITTEN = ("host_key", "host_key.pub", "client_key", "client_key.pub", "authorized_keys", "known_hosts",
            "fleet.yaml")


@dataclass
class SshLab:
    lab: Lab
    folder: Path
    client_host: str
    procs: dict[str, subprocess.Popen] = field(default_factory=dict)

    @property
    def fleet_file(self) -> Path:
        return self.folder / "fleet.yaml"

    @property
    def key(self) -> Path:
        return self.folder / "client_key"

    @property
    def known_hosts(self) -> Path:
        return self.folder / "known_hosts"

    @property
    def client_ns(self) -> str:
        """The namespace ssh runs from: the login node's."""
        return self.lab.ns(self.client_host)

    def client(self, argv: list[str]) -> list[str]:
        """argv run in the client namespace, where host addresses are routed."""
        return ["ip", "netns", "exec", self.client_ns, *argv]

    def ssh_argv(self, host: str) -> list[str]:
        """`ssh ... root@ADDRESS`, to be followed by the remote command; it ignores ~/.ssh entirely."""
        address = self.lab.topology.hosts[host].address
        return ["ssh", "-F", "/dev/null", "-i", str(self.key), "-o", "IdentitiesOnly=yes",
                "-o", f"UserKnownHostsFile={self.known_hosts}", "-o", "GlobalKnownHostsFile=/dev/null",
                "-o", "StrictHostKeyChecking=yes", "-o", "BatchMode=yes", "-o", "ConnectTimeout=10",
                f"root@{address}"]

    def pids(self) -> dict[str, int]:
        """Each host's recorded process: the shell that holds its sshd."""
        return {h: p.pid for h, p in self.procs.items()}

    def stop(self) -> None:
        """Stop every sshd and the sessions it still serves, then remove the files written. Idempotent."""
        for h, proc in self.procs.items():  # sshd, the sessions it serves and their commands
            tree = _descendants(proc.pid) if proc.poll() is None else []
            process.stop_pids(tree, partial(_in_ns, _ns_id(netns.NETNS_DIR / self.lab.ns(h))))
        process.stop(self.procs.values())
        for proc in self.procs.values():
            (self.lab.dir / "procs" / f"{proc.pid}.json").unlink(missing_ok=True)
        self.procs.clear()
        for h in self.lab.topology.hosts:
            for name in (f"sshd-{h}.conf", f"sshd-{h}.log"):
                (self.folder / name).unlink(missing_ok=True)
            try:
                (self.folder / f"root-{h}").rmdir()  # own_root's mount point: its tmpfs went with the namespace
            except OSError:
                pass
        for name in _WRITTEN:
            (self.folder / name).unlink(missing_ok=True)


def start(lab: Lab, folder: Path, *, client_host: str | None = None, python: str | None = None,
          own_root: bool = False, timeout_s: float = 15.0) -> SshLab:
    """sshd on every lab host, keys, known_hosts and `folder/fleet.yaml`; stopped by `.stop()`.

    python: the command that runs Python on the hosts (default: this interpreter, seeing this
    process's PYTHONPATH, since ssh sessions start with a clean environment).
    own_root: each host's files its own (the module's docstring), as a fresh host's are."""
    if not os.path.exists(SSHD):
        raise ClockfabricError(f"{SSHD} is missing; scripts/setup.sh installs openssh-server")
    hosts = lab.topology.hosts
    client_host = client_host or next(iter(hosts))
    if client_host not in hosts:
        raise ClockfabricError(f"client host {client_host!r} is not a host of lab {lab.name}")
    folder.mkdir(parents=True, exist_ok=True)
    sl = SshLab(lab, folder, client_host)
    try:
        _write_files(sl, python or _python())
        PRIVSEP_DIR.mkdir(mode=0o755, exist_ok=True)
        for h, node in hosts.items():
            conf = folder / f"sshd-{h}.conf"
            conf.write_text(_config(folder, str(node.address)))
            argv = ["unshare", "--uts", "sh", "-c", _LAUNCH, "clockfabric-sshd", lab.name, h, SSHD, str(conf)]
            if own_root:
                (folder / f"root-{h}").mkdir(exist_ok=True)
                argv[1:2] = ["--uts", "--mount", "--propagation", "private"]
                argv[argv.index(_LAUNCH)] = _OWN_ROOT + _LAUNCH
                argv += [str(folder / f"root-{h}"), str(folder)]
            sl.procs[h] = lab.spawn(h, argv, f"sshd on {h}", log=folder / f"sshd-{h}.log")
        _wait_listening(sl, timeout_s)
        return sl
    except BaseException:
        sl.stop()
        raise


def _write_files(sl: SshLab, python: str) -> None:
    folder = sl.folder
    for name in ("host_key", "client_key"):
        for path in (folder / name, folder / f"{name}.pub"):
            path.unlink(missing_ok=True)  # ssh-keygen would ask before overwriting
        subprocess.run(["ssh-keygen", "-q", "-t", "ed25519", "-N", "", "-C", f"clockfabric-lab-{sl.lab.name}",
                        "-f", str(folder / name)], check=True, timeout=30, stdin=subprocess.DEVNULL)
    (folder / "authorized_keys").write_text((folder / "client_key.pub").read_text())
    pub = " ".join((folder / "host_key.pub").read_text().split()[:2])
    sl.known_hosts.write_text("".join(f"{h.name},{h.address} {pub}\n" for h in sl.lab.topology.hosts.values()))
    section = {"user": "root", "port": PORT, "key": str(sl.key), "known_hosts": str(sl.known_hosts),
               "python": python}
    sl.fleet_file.write_text(dumps(sl.lab.topology) + f"ssh: {json.dumps(section)}\n")  # JSON is YAML


def _config(folder: Path, address: str) -> str:
    return "".join(f"{line}\n" for line in (
        f"ListenAddress {address}:{PORT}",
        f"HostKey {folder / 'host_key'}",
        f"AuthorizedKeysFile {folder / 'authorized_keys'}",
        "PidFile none",  # the lab records the pid; /run/sshd.pid is the machine's own sshd's
        "PermitRootLogin prohibit-password",
        "PubkeyAuthentication yes",
        "PasswordAuthentication no",
        "KbdInteractiveAuthentication no",
        "PermitUserEnvironment no",
        "UsePAM no",
        "StrictModes no",  # the folder may be anyone's, a test's tmp_path say
        "X11Forwarding no",
        "PrintMotd no",
        "MaxStartups 100:30:200",  # a whole fleet's audit logs in at once
        "Subsystem sftp internal-sftp",  # scp speaks SFTP, as a real host's sshd serves it
    ))


def _python() -> str:
    path = os.environ.get("PYTHONPATH")
    return shlex.join(["env", f"PYTHONPATH={path}", sys.executable] if path else [sys.executable])


def _wait_listening(sl: SshLab, timeout_s: float) -> None:
    """Until every sshd sends its banner on its address, asked from the client namespace."""
    deadline = time.monotonic() + timeout_s
    waiting = dict(sl.lab.topology.hosts)
    while waiting:
        for h in list(waiting):
            if sl.procs[h].poll() is not None:
                raise ClockfabricError(f"sshd on {h} exited: {_tail(sl.folder / f'sshd-{h}.log')}")
            if _banner(sl.client_ns, str(waiting[h].address)):
                del waiting[h]
        if waiting and time.monotonic() > deadline:
            h = next(iter(waiting))
            raise ClockfabricError(f"sshd on {h} not answering on {waiting[h].address}:{PORT} after {timeout_s:g} s: "
                                   f"{_tail(sl.folder / f'sshd-{h}.log')}")
        time.sleep(0.05)


def _banner(ns: str, address: str) -> bool:
    with netns.entered(ns):
        s = socket.socket()  # bound to the namespace it was made in
    try:
        s.settimeout(1)
        s.connect((address, PORT))
        return s.recv(8).startswith(b"SSH-2.0")
    except OSError:
        return False
    finally:
        s.close()


def _tail(log: Path) -> str:
    try:
        return " | ".join(log.read_text(errors="replace").strip().splitlines()[-3:]) or "(no output)"
    except OSError:
        return "(no log)"


def _descendants(pid: int) -> list[int]:
    out, todo = [], process.children(pid)
    while todo:
        kid = todo.pop()
        out.append(kid)
        todo += process.children(kid)
    return out


def _in_ns(home: tuple[int, int] | None, pid: int) -> bool:
    """Still in the host's namespace: a pid reused meanwhile by anything else is left alone."""
    return home is not None and _ns_id(Path(f"/proc/{pid}/ns/net")) == home


def _ns_id(path: Path) -> tuple[int, int] | None:
    try:
        st = os.stat(path)
    except OSError:
        return None
    return st.st_ino, st.st_dev
