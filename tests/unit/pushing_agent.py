"""An agent's push path as a process of its own (the real Pusher and EventLog), for tests that
kill it: `python -m tests.unit.pushing_agent URL TOKEN HOST LOG N`. It takes N events at its first
push, prints "boot BOOT" once a push has been tried, then pushes until it is killed or stopped."""

from __future__ import annotations

import signal
import sys
import threading
import time
from pathlib import Path

from clockfabric.agent.eventlog import EventLog
from clockfabric.agent.push import Pusher


def main() -> None:
    url, token, host, path, n = sys.argv[1:6]
    news = [[{"t_ns": time.time_ns(), "kind": "test_event", "detail": {"i": i}} for i in range(int(n))]]
    p = Pusher(url, token, host, snapshot=lambda: (news.pop() if news else [], [], {}), interval_s=0.2,
               log=EventLog(Path(path)))
    stop = threading.Event()
    signal.signal(signal.SIGTERM, lambda *_: stop.set())
    p.start()
    while not (p.counters["pushes"] or p.counters["push_failures"]):
        time.sleep(0.01)
    print(f"boot {p.boot}", flush=True)
    stop.wait()
    p.stop()
    p.join(6)


if __name__ == "__main__":
    main()
