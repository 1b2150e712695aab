"""The browser the console tests drive: Debian's chromium, headless, through Debian's chromedriver and selenium.

Why Debian's and not a downloaded one: scripts/setup.sh installs ``chromium`` and ``chromium-driver`` with apt as
it installs ZooKeeper, so driver and browser always match and nothing is fetched at test time (selenium's own
driver manager is never asked: the driver's path is given). A missing browser, driver or selenium fails the tests
with the command that installs it, never a silent skip.

One browser per module (starting chromium costs seconds on a small machine), in a profile directory of its own
under the test's temporary directory; the finalizer quits it, and ends the driver process by pid if quitting
failed, so no chromium outlives the tests. The browser log (console messages and failed loads) is kept at level
ALL so tests can assert that a page logged no error (:func:`console_errors`).
"""

from __future__ import annotations

import contextlib
import os
import shutil
import signal
from collections.abc import Iterator, Sequence
from pathlib import Path
from typing import Any

import pytest

from tests.harness.wait import SLOW_MACHINE_S

CHROMIUM = ("chromium", "chromium-browser")
WINDOW = (1400, 1000)
SHOT_MAX_HEIGHT = 8000  # px: a screenshot of a longer page is cut there
# Where the tests' screenshots go: var/console (ignored by git), so that a test run leaves the tree as it was;
# ODRADEK_SCREENSHOTS=docs/console refreshes the ones docs/console.md shows.
SHOTS = Path(os.environ.get("ODRADEK_SCREENSHOTS") or Path(__file__).resolve().parents[2] / "var" / "console")


def _find(names: Sequence[str]) -> str | None:
    return next((path for name in names if (path := shutil.which(name))), None)


@contextlib.contextmanager
def chromium_driver(profile: Path, extra_args: Sequence[str] = ()) -> Iterator[Any]:
    """A headless chromium through Debian's chromedriver, in profile directory ``profile``, with ``extra_args``
    (a test trusting its own cluster's certificates adds them); quit at the end, the driver ended by its pid if
    quitting failed."""
    chromium, driver_path = _find(CHROMIUM), _find(("chromedriver",))
    if chromium is None or driver_path is None:
        pytest.fail("the console's browser tests need Debian's chromium and chromium-driver: run `bash "
                    "scripts/setup.sh` (or `apt-get install -y chromium chromium-driver`)")
    try:
        from selenium import webdriver
        from selenium.webdriver.chrome.service import Service
    except ImportError:
        pytest.fail("the console's browser tests need selenium: `.venv/bin/pip install selenium` (the test extra)")
    options = webdriver.ChromeOptions()
    options.binary_location = chromium
    for arg in ("--headless=new", "--no-sandbox", "--disable-dev-shm-usage", "--disable-gpu",
                "--disable-extensions", "--no-first-run", "--no-default-browser-check", "--hide-scrollbars",
                f"--window-size={WINDOW[0]},{WINDOW[1]}", "--force-device-scale-factor=1", "--lang=en-US",
                f"--user-data-dir={profile}", *extra_args):
        options.add_argument(arg)
    options.set_capability("goog:loggingPrefs", {"browser": "ALL"})
    service = Service(executable_path=driver_path, log_output=os.devnull)
    driver = webdriver.Chrome(service=service, options=options)
    try:
        driver.set_page_load_timeout(SLOW_MACHINE_S)
        yield driver
    finally:
        with contextlib.suppress(Exception):
            driver.quit()
        process = getattr(service, "process", None)
        if process is not None and process.poll() is None:  # quit failed: end the driver by its pid
            with contextlib.suppress(ProcessLookupError):
                os.kill(process.pid, signal.SIGKILL)
            process.wait(timeout=SLOW_MACHINE_S)


@pytest.fixture(scope="module")
def browser(tmp_path_factory: pytest.TempPathFactory) -> Iterator[Any]:
    with chromium_driver(tmp_path_factory.mktemp("chromium-profile")) as driver:
        yield driver


def console_errors(driver: Any, allowed: Sequence[str] = ()) -> list[str]:
    """The browser log's errors since the last call (SEVERE entries), less those containing an ``allowed`` text
    (a failed load the page expects, e.g. the ACL route's 400 on a cluster without an authorizer), and less those
    the browser stamped before the current test began (``start_log``): chromium hands a failed load's entry to
    the driver a little after the load, so an earlier test's expected 403 can arrive after that test ended."""
    since = getattr(driver, "odradek_log_since_ms", 0)
    return [entry["message"] for entry in driver.get_log("browser")
            if entry["level"] == "SEVERE" and entry.get("timestamp", since) >= since
            and not any(text in entry["message"] for text in allowed)]


def start_log(driver: Any) -> None:
    """A test's log starts now: what the browser logged before is not its (see ``console_errors``)."""
    driver.odradek_log_since_ms = int(driver.execute_script("return Date.now();"))
    console_errors(driver)


def screenshot(driver: Any, path: Path) -> None:
    """The whole page: the window grown until its viewport holds the document's full height (the window's own
    frame, outerHeight - innerHeight, is added: headless chromium's is about 140 px, so growing the window to the
    document's height alone would still cut the page's bottom off), then put back. A page taller than
    SHOT_MAX_HEIGHT is cut there, and a viewport that still falls short of the document fails the test."""
    path.parent.mkdir(parents=True, exist_ok=True)
    measure = ("return [Math.max(document.body.scrollHeight, document.documentElement.scrollHeight),"
               " window.innerHeight, window.outerHeight];")
    try:
        for _ in range(3):  # a resize can reflow the page: measure again until the viewport holds it
            height, inner, outer = (int(x) for x in driver.execute_script(measure))
            wanted = min(height, SHOT_MAX_HEIGHT)
            if inner >= wanted:
                break
            driver.set_window_size(WINDOW[0], max(WINDOW[1], wanted + (outer - inner)))
        height, inner, _ = (int(x) for x in driver.execute_script(measure))
        assert inner >= min(height, SHOT_MAX_HEIGHT), f"{path.name}: a {inner} px viewport for a {height} px page"
        driver.save_screenshot(str(path))
    finally:
        driver.set_window_size(*WINDOW)
