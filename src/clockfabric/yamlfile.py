"""Reading a YAML file a user wrote, with one clear line for each way it can go wrong."""

from __future__ import annotations

from pathlib import Path
from typing import Any

import yaml

from clockfabric.errors import ClockfabricError


def read_yaml(path: str | Path, what: str) -> Any:
    """The parsed document; `what` names the file's role in errors ("topology", "monitor config")."""
    path = Path(path)
    try:
        text = path.read_text()
    except IsADirectoryError:
        raise ClockfabricError(f"{what} {path} is a directory; give the YAML file") from None
    except OSError as e:
        raise ClockfabricError(f"cannot read {what} {path}: {e.strerror}; check the path") from None
    except UnicodeDecodeError as e:
        raise ClockfabricError(f"{what} {path} is not text (byte {e.start} is not UTF-8); give the YAML file") from None
    try:
        return yaml.safe_load(text)
    except yaml.YAMLError as e:
        where = getattr(e, "problem_mark", None)
        line = f" at line {where.line + 1}" if where else ""
        raise ClockfabricError(f"{path}: not valid YAML{line}; fix the syntax") from None
