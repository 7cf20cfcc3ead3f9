"""A job's events, sent to the fleet controller as an agent's are: POST /api/v1/push.

Each event is stored under the host it concerns (the lost host for `detected`, the spare for
`spare chosen`), else under the job's first host, with kind `train_<event>` and the event's
fields as its detail; `(host, job id, seq)` names it, so a push sent twice is stored once.
A thread sends them in order, so the coordinator never waits on the network; a controller that
is away is tried again, and the job carries on whatever it answers.
"""

from __future__ import annotations

import logging
import queue
import threading
import time
import uuid
from typing import Any

import httpx

from clockfabric.auth.credential import host_token

log = logging.getLogger(__name__)
TRIES = 5
TIMEOUT_S = 5.0


def as_push(event: dict[str, Any], seq: int, job: str, default_host: str) -> dict[str, Any]:
    """The push body that carries one job event."""
    detail = {k: v for k, v in event.items() if k not in ("event", "time")}
    host = event.get("host") if isinstance(event.get("host"), str) else default_host
    kind = "train_" + event["event"].replace(" ", "_")
    return {"host": host, "boot": job,
            "events": [{"seq": seq, "t_ns": int(event["time"] * 1e9), "kind": kind, "detail": detail | {"job": job}}]}


class ControllerEvents(threading.Thread):
    """`on_event` for a TrainJob: each event queued, then pushed to the controller at url."""

    def __init__(self, url: str, token: str, default_host: str, *, job: str | None = None,
                 client: httpx.Client | None = None):
        super().__init__(name="train events to the controller", daemon=True)
        self.url = url.rstrip("/") + "/api/v1/push"
        self.default_host = default_host
        self.job = job or f"train-{uuid.uuid4().hex[:12]}"
        self.client = client or httpx.Client(timeout=TIMEOUT_S)
        self.token = token  # the fleet token: each push goes with its host's credential, derived from it
        self.pending: queue.Queue[dict[str, Any] | None] = queue.Queue()
        self.seq = 0
        self.sent = self.failed = 0

    def __call__(self, event: dict[str, Any]) -> None:
        self.seq += 1
        self.pending.put(as_push(event, self.seq, self.job, self.default_host))

    def run(self) -> None:
        while (body := self.pending.get()) is not None:
            self.send(body)

    def send(self, body: dict[str, Any]) -> None:
        for attempt in range(TRIES):
            try:
                headers = {"Authorization": f"Bearer {host_token(self.token, body['host'])}"}
                answer = self.client.post(self.url, json=body, headers=headers)
                if answer.status_code < 500 and answer.status_code not in (401, 408, 429):
                    answer.raise_for_status()  # any other refusal would be refused again
                    self.sent += 1
                    return
            except httpx.HTTPStatusError as e:
                log.warning("the controller refused a job event: %s", e.response.text[:200])
                break
            except httpx.HTTPError as e:
                log.debug("pushing a job event: %s", e)
            time.sleep(0.2 * 2 ** attempt)
        self.failed += 1

    def close(self, timeout_s: float = 10.0) -> None:
        """Send what is queued (waiting up to timeout_s), then stop."""
        self.pending.put(None)
        if self.is_alive():
            self.join(timeout_s)
