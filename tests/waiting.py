"""Polling for a condition in lab tests: what is real takes its own time."""

import time


def wait_for(what, check, timeout_s=30.0, every_s=0.05):
    """check()'s first truthy result, or AssertionError naming `what` after timeout_s."""
    deadline = time.monotonic() + timeout_s
    while time.monotonic() < deadline:
        if result := check():
            return result
        time.sleep(every_s)
    raise AssertionError(f"timed out waiting for {what}")
