"""Headless Chromium for what drives the dashboard as a person would (the dashboard benchmark, the
page's tests): Debian's `chromium` and `chromium-driver`, never a driver downloaded at run time."""

from __future__ import annotations

import os
import shutil
import tempfile
from pathlib import Path
from typing import Any

CHROMIUM, CHROMEDRIVER = Path("/usr/bin/chromium"), Path("/usr/bin/chromedriver")


def available() -> bool:
    return CHROMIUM.exists() and CHROMEDRIVER.exists()


def driver(width: int = 1280, height: int = 800) -> Any:
    """A new headless Chromium under WebDriver, keeping the page's console for get_log("browser").

    Its profile and the shared memory it keeps in files (`--disable-dev-shm-usage`) live in a
    folder of its own, removed by `quit()`: Chromium leaves them in /tmp otherwise."""
    from selenium import webdriver
    from selenium.webdriver.chrome.service import Service

    class Chrome(webdriver.Chrome):
        scratch: Path

        def quit(self) -> None:
            try:
                super().quit()
            finally:
                shutil.rmtree(scratch, ignore_errors=True)

    scratch = tempfile.mkdtemp(prefix="clockfabric-chromium-")
    options = webdriver.ChromeOptions()
    options.binary_location = str(CHROMIUM)
    for arg in ("--headless=new", "--no-sandbox", "--disable-dev-shm-usage", f"--window-size={width},{height}",
                f"--user-data-dir={scratch}/profile"):
        options.add_argument(arg)
    options.set_capability("goog:loggingPrefs", {"browser": "ALL"})
    service = Service(str(CHROMEDRIVER), env={**os.environ, "TMPDIR": scratch})
    try:
        browser = Chrome(service=service, options=options)
    except BaseException:
        shutil.rmtree(scratch, ignore_errors=True)
        raise
    browser.scratch = Path(scratch)
    return browser
