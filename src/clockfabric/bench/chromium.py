"""Headless Chromium for what drives the dashboard as a person would (the dashboard benchmark, the
page's tests): Debian's `chromium` and `chromium-driver`, never a driver downloaded at run time."""

from __future__ import annotations

from pathlib import Path
from typing import Any

CHROMIUM, CHROMEDRIVER = Path("/usr/bin/chromium"), Path("/usr/bin/chromedriver")


def available() -> bool:
    return CHROMIUM.exists() and CHROMEDRIVER.exists()


def driver(width: int = 1280, height: int = 800) -> Any:
    """A new headless Chromium under WebDriver, keeping the page's console for get_log("browser")."""
    from selenium import webdriver
    from selenium.webdriver.chrome.service import Service

    options = webdriver.ChromeOptions()
    options.binary_location = str(CHROMIUM)
    for arg in ("--headless=new", "--no-sandbox", "--disable-dev-shm-usage", f"--window-size={width},{height}"):
        options.add_argument(arg)
    options.set_capability("goog:loggingPrefs", {"browser": "ALL"})
    return webdriver.Chrome(service=Service(str(CHROMEDRIVER)), options=options)
