"""The HTML report in a real browser: headless Chromium renders it, loads every image, logs
no console error.

Chromium and its driver come from Debian's packages (``apt-get install -y chromium
chromium-driver``, as ``.ci/run`` does); selenium from the ``dev`` extra. The test skips
where either is missing, except under ``CI=true``, where a missing browser fails it: CI
must not pass by checking nothing.
"""

from __future__ import annotations

import os
import shutil
from collections.abc import Iterator
from pathlib import Path
from typing import Any

import pytest

from gpugauge.__main__ import main

from .fakes import result, save_run

CHROMIUM = ("chromium", "chromium-browser", "google-chrome")
DRIVER = "chromedriver"
ARGS = (
    "--headless",
    "--no-sandbox",
    "--disable-gpu",
    "--disable-quic",
    "--no-first-run",
    "--disable-background-networking",
    "--disable-component-update",
    "--disable-sync",
)


def _missing(what: str) -> None:
    if os.environ.get("CI", "").lower() == "true":
        pytest.fail(f"{what} (CI=true: the HTML report must be checked in a browser)")
    pytest.skip(what)


@pytest.fixture(scope="module")
def browser(tmp_path_factory: pytest.TempPathFactory) -> Iterator[Any]:
    """A headless Chromium driven through the system chromedriver; quit afterwards."""
    try:
        from selenium import webdriver
        from selenium.webdriver.chrome.service import Service
    except ImportError:
        _missing("selenium is not installed (pip install -e '.[dev]')")
    binary = next((p for p in map(shutil.which, CHROMIUM) if p), None)
    driver_path = shutil.which(DRIVER)
    if binary is None or driver_path is None:
        _missing(
            "chromium or chromedriver is not installed (apt-get install chromium chromium-driver)"
        )
    options = webdriver.ChromeOptions()
    options.binary_location = binary
    for arg in (*ARGS, f"--user-data-dir={tmp_path_factory.mktemp('chromium-profile')}"):
        options.add_argument(arg)
    options.set_capability("goog:loggingPrefs", {"browser": "ALL"})
    # the driver's path is given, so selenium never looks for (or downloads) one
    driver = webdriver.Chrome(options=options, service=Service(executable_path=driver_path))
    try:
        yield driver
    finally:
        driver.quit()


@pytest.fixture(scope="module")
def report_page(tmp_path_factory: pytest.TempPathFactory) -> Path:
    """A report of a slowed run against an earlier one: verdict rows, ratio bars, history."""
    root = tmp_path_factory.mktemp("browser-report")
    storage = root / "runs"
    storage.mkdir()
    ids = ("conv", "relu", "linear")
    before = save_run(storage / "0001_before.json", [result(i, 2.0) for i in ids])
    after = save_run(
        storage / "0002_after.json",
        [result("conv", 3.0), result("relu", 2.0), result("linear", 1.5)],
    )
    out = root / "reports"
    args = ["report", "--current", str(after), "--against", str(before)]
    assert main([*args, "--storage", str(storage), "--out", str(out)]) == 0
    return out / "report.html"


def test_report_renders_with_every_image_and_no_console_error(
    browser: Any, report_page: Path
) -> None:
    browser.get(report_page.as_uri())
    assert browser.title == "gpugauge report"
    assert browser.execute_script("return document.readyState") == "complete"
    heading = browser.execute_script("return document.querySelector('h1').textContent")
    assert heading == "gpugauge report"
    tables = browser.execute_script("return document.querySelectorAll('table').length")
    assert tables >= 2  # verdicts and this run's results
    images = browser.execute_script(
        "return Array.from(document.images).map("
        "i => ({alt: i.alt, complete: i.complete, width: i.naturalWidth}))"
    )
    assert len(images) == 2, images  # ratio bars and history
    for image in images:
        assert image["complete"], image
        assert image["width"] > 0, f"image not loaded: {image['alt']}"
    errors = [e for e in browser.get_log("browser") if e.get("level") == "SEVERE"]
    assert not errors, errors


def test_verdict_rows_are_styled_by_their_verdict(browser: Any, report_page: Path) -> None:
    browser.get(report_page.as_uri())
    rows = browser.execute_script(
        "return Array.from(document.querySelectorAll('table')[0].rows).slice(1).map("
        "r => ({cls: r.className, bg: getComputedStyle(r).backgroundColor,"
        " id: r.cells[0].textContent}))"
    )
    by_id = {r["id"]: r for r in rows}
    # a row's first class is its verdict; a noisy verdict's row is marked noisy besides
    assert by_id["conv"]["cls"].split()[0] == "regressed"
    assert by_id["linear"]["cls"].split()[0] == "improved"
    assert by_id["relu"]["cls"].split()[0] == "unchanged"
    assert by_id["conv"]["bg"] == "rgb(250, 219, 216)"  # the .regressed colour
