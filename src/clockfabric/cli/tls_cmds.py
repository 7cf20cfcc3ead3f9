"""`clockfabric tls new DIR --name NAME...`: a private CA and the controller's certificate, for
the TLS the units and manifests turn on by default (docs/deploy.md)."""

from __future__ import annotations

import os
from pathlib import Path

import typer

from clockfabric.auth.certs import issue
from clockfabric.console import err
from clockfabric.errors import ClockfabricError

app = typer.Typer(help="TLS for the controller: a private CA and its server certificate.", no_args_is_help=True)

# file -> mode: the keys readable by their owner only, the certificates by anyone
FILES = {"ca.crt": 0o644, "ca.key": 0o600, "tls.crt": 0o644, "tls.key": 0o600}


@app.command("new")
def new(folder: Path = typer.Argument(..., help="Where to write ca.crt, ca.key, tls.crt and tls.key "
                                                "(made if missing), e.g. /etc/clockfabric."),
        names: list[str] = typer.Option(..., "--name", help="A name the hosts reach the controller by: a DNS "
                                                            "name or an address; repeat for each."),
        force: bool = typer.Option(False, "--force", help="Replace existing files (every host then needs the "
                                                          "new ca.crt).")) -> None:
    """Make a CA and a certificate for the controller's names signed by it: the controller serves
    tls.crt and tls.key, every host verifies it with ca.crt. Keep ca.key off the hosts."""
    there = [name for name in FILES if (folder / name).exists()]
    if there and not force:
        raise ClockfabricError(f"{folder} already holds {', '.join(there)}: keep them, or --force to replace "
                               "them (every host then needs the new ca.crt)")
    issued = issue(names)
    contents = {"ca.crt": issued.ca_cert, "ca.key": issued.ca_key, "tls.crt": issued.cert, "tls.key": issued.key}
    written: list[Path] = []
    try:
        folder.mkdir(parents=True, exist_ok=True)
        for name, mode in FILES.items():  # each made with its mode before a byte is written
            tmp = folder / f".{name}.new"
            fd = os.open(tmp, os.O_WRONLY | os.O_CREAT | os.O_TRUNC, mode)
            written.append(tmp)
            with os.fdopen(fd, "wb") as f:
                f.write(contents[name])
            os.chmod(tmp, mode)
        for name in FILES:  # all written: then all in place, never a CA beside another CA's certificate
            os.replace(folder / f".{name}.new", folder / name)
    except OSError as e:
        for tmp in written:
            tmp.unlink(missing_ok=True)
        raise ClockfabricError(f"cannot write into {folder}: {e.strerror}; give a folder you can write") from None
    err.print(f"wrote {folder}/ca.crt, ca.key, tls.crt, tls.key for {', '.join(names)}: the controller serves "
              "tls.crt and tls.key, every host gets ca.crt; keep ca.key apart (docs/deploy.md)")
