"""Headless Chromium for the web pages' tests: Debian's `chromium` and `chromedriver`, driven by Selenium (nothing
is downloaded at test time). Without them the browser tests skip naming what is missing; under CI they fail
(`.ci/run` installs both). Screenshots go to test-artifacts/screenshots/ (or $AGENT_ENV_TEST_ARTIFACTS)."""

from __future__ import annotations

import os
import shutil
from pathlib import Path

import pytest

ARTIFACTS = Path(os.environ.get("AGENT_ENV_TEST_ARTIFACTS") or Path(__file__).parent.parent / "test-artifacts")


@pytest.fixture(scope="session")
def browser():
    chromium, driver = shutil.which("chromium"), shutil.which("chromedriver")
    if chromium is None or driver is None:
        missing = " and ".join(n for n, p in (("chromium", chromium), ("chromedriver", driver)) if p is None)
        message = f"the browser tests need {missing} (Debian: apt-get install chromium chromium-driver)"
        if os.environ.get("CI") == "true":
            pytest.fail(message)
        pytest.skip(message)
    from selenium import webdriver

    options = webdriver.ChromeOptions()
    options.binary_location = chromium
    for argument in (
        "--headless=new",
        "--no-sandbox",
        "--disable-gpu",
        "--disable-dev-shm-usage",
        "--window-size=1400,1000",
    ):
        options.add_argument(argument)
    options.set_capability("goog:loggingPrefs", {"browser": "ALL"})  # the console, for browser.get_log("browser")
    session = webdriver.Chrome(options=options, service=webdriver.ChromeService(executable_path=driver))
    session.set_page_load_timeout(30)
    yield session
    session.quit()


def screenshot(browser, name: str) -> Path:
    """Keep what the page looked like, as a test artifact."""
    folder = ARTIFACTS / "screenshots"
    folder.mkdir(parents=True, exist_ok=True)
    path = folder / f"{name}.png"
    browser.save_screenshot(str(path))
    return path
