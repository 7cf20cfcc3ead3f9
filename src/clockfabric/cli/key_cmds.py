"""`clockfabric key new PATH`: the fleet key every agent seals its datagrams with (docs/security.md)."""

from __future__ import annotations

import os
import secrets
from pathlib import Path

import typer

from clockfabric.auth.keys import MAX_KEY_ID, parse
from clockfabric.console import err
from clockfabric.errors import ClockfabricError

app = typer.Typer(help="Make the fleet key that seals what agents send each other.", no_args_is_help=True)


@app.command("new")
def new(path: Path = typer.Argument(..., help="The key file to write (mode 600), e.g. /etc/clockfabric/fleet.key."),
        key_id: int = typer.Option(1, "--id", min=1, max=MAX_KEY_ID, help="The key's id."),
        force: bool = typer.Option(False, "--force", help="Replace an existing file (every host then needs "
                                                          "the new one at once; docs/security.md rotates).")) -> None:
    """Write a new random fleet key, readable by its owner only; copy it to every host."""
    if path.exists() and not force:
        raise ClockfabricError(f"{path} exists: keep it, or --force to replace it "
                               "(every agent then needs the new file)")
    line = f"{key_id}:{secrets.token_hex(32)}\n"
    parse(line)  # the format agents read, so a key written here always loads
    tmp = path.with_name(f".{path.name}.new")
    try:
        # made 600 before a byte is written, then renamed over: never readable by others, never half-written
        fd = os.open(tmp, os.O_WRONLY | os.O_CREAT | os.O_TRUNC, 0o600)
        with os.fdopen(fd, "w") as f:
            f.write(line)
        os.chmod(tmp, 0o600)
        os.replace(tmp, path)
    except OSError as e:
        tmp.unlink(missing_ok=True)
        raise ClockfabricError(f"cannot write {path}: {e.strerror}; give a file in an existing directory") from None
    err.print(f"wrote {path}: key id {key_id}, mode 600; copy it to every host (docs/deploy.md)")
