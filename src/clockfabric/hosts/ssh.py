"""A real host reached with the OpenSSH client, so ~/.ssh/config (ProxyJump, IdentityFile,
per-host ports and users) is honoured as at a shell. BatchMode: never a prompt; a missing key
or an unknown host key is an error that says what to fix.

A started command runs under `setsid` and first prints its process group id, so a signal
reaches the whole group on its host (`kill -SIG -PGID` over ssh), not just our client.
"""

from __future__ import annotations

import io
import shlex
import subprocess
import sys
import threading
from pathlib import Path
from typing import IO

from clockfabric.errors import ClockfabricError
from clockfabric.hosts.base import Completed, Host, Proc
from clockfabric.hosts.local import run_argv
from clockfabric.hosts.options import SshOptions

SSH_FAILED = 255  # what ssh exits with when it, not the remote command, failed
PGID_MARK = b"clockfabric-pgid "
# the remote side: a session of its own (setsid -w keeps its exit status), which names its group first
_STARTER = 'echo "clockfabric-pgid $$"; exec "$@"'


class SshHost(Host):
    def __init__(self, name: str, address: str, options: SshOptions | None = None, *, ssh: str = "ssh",
                 connect_timeout_s: int = 10):
        self.name, self.address = name, address
        self.options = options or SshOptions()
        self.ssh, self.connect_timeout_s = ssh, connect_timeout_s

    def argv(self, remote: list[str]) -> list[str]:
        """The local argv that runs `remote` on the host."""
        o = self.options
        argv = [self.ssh, "-T", "-o", "BatchMode=yes", "-o", f"ConnectTimeout={self.connect_timeout_s}"]
        argv += ["-p", str(o.port)] if o.port else []
        argv += ["-l", o.user] if o.user else []
        argv += ["-i", o.key, "-o", "IdentitiesOnly=yes"] if o.key else []
        argv += ["-o", f"UserKnownHostsFile={o.known_hosts}"] if o.known_hosts else []
        return [*argv, self.address, shlex.join(remote)]

    def run(self, argv: list[str], *, input: bytes | None = None, timeout_s: float = 30.0) -> Completed:
        done = run_argv(self.argv(argv), input=input, timeout_s=timeout_s, where=f"ssh {self._target()}")
        if done.returncode == SSH_FAILED:
            self._raise(done.stderr)
        return done

    def spawn(self, argv: list[str], *, env: dict[str, str] | None = None, log: Path | None = None,
              pipes: bool = False) -> Proc:
        vars_ = [f"{k}={v}" for k, v in (env or {}).items()]
        remote = ["setsid", "-w", "sh", "-c", _STARTER, "sh", *(["env", *vars_] if vars_ else []), *argv]
        err: IO[bytes] | int = subprocess.PIPE  # read if it fails to start; then handed on or copied
        if log is not None:
            log.parent.mkdir(parents=True, exist_ok=True)
            log.write_bytes(b"")
            err = open(log, "ab")  # noqa: SIM115 - handed to the child, closed below
        try:
            proc = subprocess.Popen(self.argv(remote), stdin=subprocess.PIPE if pipes else subprocess.DEVNULL,
                                    stdout=subprocess.PIPE, stderr=err)
        except OSError as e:
            raise ClockfabricError(f"cannot start {self.ssh}: {e.strerror}") from None
        finally:
            if not isinstance(err, int):
                err.close()
        assert proc.stdout is not None
        first = proc.stdout.readline()  # the group id, once the command has started there
        if not first.startswith(PGID_MARK):
            proc.wait()
            said = log.read_bytes() if log is not None else (proc.stderr.read() if proc.stderr else b"")
            self._raise(said, started=False)
        if proc.stderr is not None and not pipes:
            threading.Thread(target=_copy, args=(proc.stderr, None, sys.stderr), daemon=True).start()
        return SshProc(self, proc, int(first[len(PGID_MARK):]), log=log, pipes=pipes)

    # ---- errors ------------------------------------------------------------------------------
    def _target(self) -> str:
        o = self.options
        return (f"{o.user}@" if o.user else "") + self.address + (f" port {o.port}" if o.port else "")

    def _raise(self, stderr: bytes, started: bool = True) -> None:
        raise ClockfabricError(ssh_failure(self._target(), self.address, self.options, stderr, started))


def ssh_failure(target: str, address: str, o: SshOptions, stderr: bytes, started: bool = True) -> str:
    """One line: why ssh failed, and what to fix."""
    text = stderr.decode(errors="replace")
    last = (text.strip().splitlines() or ["no output"])[-1]
    if "Permission denied" in text:
        keys = o.key or "the keys of ssh-agent, ~/.ssh/config and ~/.ssh/id_*"
        return f"ssh {target}: the login was refused with {keys}; give ssh.key in the fleet file or fix ~/.ssh/config"
    if "IDENTIFICATION HAS CHANGED" in text:
        return (f"ssh {target}: its host key has changed; if that is expected, remove the old one "
                f"(ssh-keygen -R {address}) and add the new")
    if "Host key verification failed" in text or "No ED25519 host key is known" in text or "host key is known" in text:
        port = f" -p {o.port}" if o.port else ""
        return (f"ssh {target}: its host key is not known; add it (ssh-keyscan{port} {address} >> ~/.ssh/known_hosts) "
                "or name a file with ssh.known_hosts")
    if "Could not resolve hostname" in text:
        return f"ssh {target}: cannot resolve {address}; fix its address in the fleet file"
    for why in ("Connection refused", "timed out", "No route to host", "Network is unreachable"):
        if why in text:
            return f"ssh: cannot connect to {target}: {why}; is the host up and sshd listening?"
    if not started:
        return f"ssh {target}: the command did not start: {last}"
    return f"ssh {target}: {last}"


class SshProc(Proc):
    """A command started over ssh: our local client, and the process group it started there."""

    def __init__(self, host: SshHost, client: subprocess.Popen, pgid: int, *, log: Path | None, pipes: bool):
        self.host, self.client, self.pid = host, client, pgid
        assert client.stdout is not None
        if pipes:
            self.stdout = _text(client.stdout)
            self.stderr = _text(client.stderr) if client.stderr else None
            self.stdin = _text(client.stdin, write=True) if client.stdin else None
        else:  # the rest of its stdout goes where its stderr goes: the log, or ours
            threading.Thread(target=_copy, args=(client.stdout, log), daemon=True).start()

    def poll(self) -> int | None:
        return self.client.poll()

    def wait(self, timeout_s: float | None = None) -> int | None:
        try:
            return self.client.wait(timeout_s)
        except subprocess.TimeoutExpired:
            return None

    def signal(self, sig: int) -> None:
        if self.client.poll() is not None:
            return  # the group has ended (our client ends with it)
        try:
            # `kill -SIG -PGID`: dash's kill takes no `--`, and every shell reads -PGID as a group here
            self.host.run(["kill", f"-{int(sig)}", f"-{self.pid}"], timeout_s=self.host.connect_timeout_s + 5)
        except ClockfabricError:
            self.client.kill()  # the host cannot be reached: at least our end stops


def _text(stream, write: bool = False) -> io.TextIOWrapper:
    return io.TextIOWrapper(stream, line_buffering=write, write_through=write)


def _copy(src: IO[bytes], log: Path | None, ours=sys.stdout) -> None:
    out = open(log, "ab") if log is not None else ours.buffer  # noqa: SIM115 - closed below
    try:
        for chunk in iter(lambda: src.read1(1 << 16), b""):  # type: ignore[attr-defined]
            out.write(chunk)
            out.flush()
    except (OSError, ValueError):
        pass  # our stdout closed under us: the command's output has nowhere to go
    finally:
        if log is not None:
            out.close()
