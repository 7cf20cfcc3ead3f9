"""`python -m clockfabric.audit.facts '<spec json>'` (or `-` to read the spec from stdin):
print this host's facts as one line of JSON. A bad spec: one line on stderr, exit 2."""

from __future__ import annotations

import json
import sys

from clockfabric.audit.facts import SpecError, collect, parse_spec

USAGE = "usage: python -m clockfabric.audit.facts '<spec json>' | -"


def main(argv: list[str]) -> int:
    if len(argv) != 1:
        print(f"facts: give the spec as one argument ({USAGE})", file=sys.stderr)
        return 2
    try:
        spec = parse_spec(sys.stdin.read() if argv[0] == "-" else argv[0])
    except SpecError as e:
        print(f"facts: {e}", file=sys.stderr)
        return 2
    print(json.dumps(collect(spec), default=str))  # default: a stray non-JSON value prints, not a traceback
    return 0


if __name__ == "__main__":
    sys.exit(main(sys.argv[1:]))
