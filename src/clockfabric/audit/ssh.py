"""Reach real hosts over SSH, in-process with asyncssh: every host at once, each under the
audit's per-host timeout, so a host that is down, refuses us or hangs in the handshake is one
line in the report and holds up no one.

By default it does what `ssh HOST` does; the fleet file's `ssh:` sections and the CLI's
options change that (hosts/options.py).
"""

from __future__ import annotations

import asyncio
import os
import shlex
from typing import cast

import asyncssh

from clockfabric.audit.gather import MODULE, failed
from clockfabric.errors import ClockfabricError
from clockfabric.hosts.options import SshOptions, options
from clockfabric.topology import Topology

__all__ = ["SshOptions", "SshTransport", "options"]


class SshTransport:
    """The audit's transport for real hosts (gather.Session): `python -m clockfabric.audit.host` over ssh."""
    parallel = 256  # in-process connections are cheap: a fleet of hundreds is reached in one go

    def __init__(self, topo: Topology, opts: dict[str, SshOptions]):
        self._targets = {h: (str(topo.hosts[h].address), o) for h, o in opts.items()}
        # read once, before any host is tried: a wrong path is one line now, not one per host
        self._keys = {o.key: _key(o.key) for o in opts.values() if o.key}
        self._known = {o.known_hosts: _known_hosts(o.known_hosts) for o in opts.values() if o.known_hosts}

    def command(self, host: str) -> str:
        return shlex.join([*shlex.split(self._targets[host][1].python), *MODULE])

    async def run(self, host: str, stdin: bytes, timeout_s: float) -> tuple[bytes | None, str]:
        address, o = self._targets[host]
        kw: dict = {}
        if o.port:
            kw["port"] = o.port
        if o.user:
            kw["username"] = o.user
        if o.key:
            kw["client_keys"] = [self._keys[o.key]]
        if o.known_hosts:
            kw["known_hosts"] = self._known[o.known_hosts]
        phase = _Phase()
        target = f"{address}" + (f" port {o.port}" if o.port else "")

        async def report() -> asyncssh.SSHCompletedProcess:
            async with asyncssh.connect(address, client_factory=phase.client, **kw) as conn:
                phase.now = "running the report"
                return await conn.run(self.command(host), input=stdin, encoding=None, check=False)

        try:
            done = await asyncio.wait_for(report(), timeout_s)
        except (TimeoutError, asyncio.TimeoutError):  # before OSError, which TimeoutError is (asyncio's is
            # another class before Python 3.11)
            return None, f"no answer within {timeout_s:g} s ({phase.now})"
        except asyncssh.PermissionDenied:
            who = f" as {o.user}" if o.user else ""
            keys = o.key or "the keys of ssh-agent, ~/.ssh/config and ~/.ssh/id_* (or give ssh.key / --ssh-key)"
            return None, f"ssh: {target} refused the login{who} with {keys}"
        except asyncssh.HostKeyNotVerifiable as e:
            return None, (f"ssh: {target}: {e.reason.rstrip('.')}; add its key to known_hosts "
                          f"(ssh-keyscan{' -p ' + str(o.port) if o.port else ''} {address}) or name the file "
                          "with ssh.known_hosts / --ssh-known-hosts")
        except asyncssh.DisconnectError as e:
            return None, f"ssh: {target} closed the connection: {e.reason}"
        except OSError as e:
            why = os.strerror(e.errno) if e.errno and e.errno > 0 else str(e)
            return None, f"ssh: cannot connect to {target}: {why}"
        except Exception as e:  # noqa: BLE001 - anything else (a bad ~/.ssh/config) is this host's line, not a crash
            return None, f"ssh: {target}: {type(e).__name__}: {e}".splitlines()[0]
        if done.exit_status != 0:
            code = (f"killed by {done.exit_signal[0]}" if done.exit_signal else
                    f"exit {done.exit_status}" if done.exit_status is not None else "no exit status")
            return None, failed(cast(bytes, done.stderr or b""), code)
        return cast(bytes | None, done.stdout), ""  # bytes: run without an encoding


class _Phase:
    """Where a connection got to, so a timeout says whether the host is down or its sshd hangs."""

    def __init__(self):
        self.now = "connecting"

    def client(self) -> asyncssh.SSHClient:
        phase = self

        class Client(asyncssh.SSHClient):
            def connection_made(self, conn) -> None:
                phase.now = "in the ssh handshake"

            def auth_completed(self) -> None:
                phase.now = "starting the report"
        return Client()


def _key(path: str) -> asyncssh.SSHKey:
    try:
        return asyncssh.read_private_key(path)
    except OSError as e:
        raise ClockfabricError(f"cannot read ssh key {path}: {e.strerror}; check the path") from None
    except asyncssh.KeyImportError as e:
        if "assphrase" in str(e):
            raise ClockfabricError(f"ssh key {path} is passphrase-protected: add it to the agent (ssh-add {path}) "
                                   "and leave the key option out") from None
        raise ClockfabricError(f"ssh key {path} is not a private key: {e}") from None


def _known_hosts(path: str) -> asyncssh.SSHKnownHosts:
    try:
        return asyncssh.read_known_hosts(path)
    except OSError as e:
        raise ClockfabricError(f"cannot read known_hosts {path}: {e.strerror}; check the path") from None
    except (ValueError, asyncssh.Error) as e:
        raise ClockfabricError(f"known_hosts {path} is not a known_hosts file: {e}") from None

