"""Push headers as a host: its own credential, derived from the fleet token as the lab and the CLI derive it."""

from __future__ import annotations

from clockfabric.auth.credential import host_token


def as_host(fleet_token: str, host: str, **headers: str) -> dict[str, str]:
    return {"Authorization": f"Bearer {host_token(fleet_token, host)}", **headers}
