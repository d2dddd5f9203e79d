"""The inspector page in a real browser: Debian's Chromium, headless, driven through chromedriver by selenium.

Another process writes through the library (``_writer.py``); the page must list its keys, show the new ones live
(no reload: the server-sent events make it refresh), and filter by prefix. A screenshot of the page is saved to
``build/inspector.png`` for a person to look at.

Skipped, with the reason, when the machine has no ``/usr/bin/chromium`` + ``/usr/bin/chromedriver`` (``scripts/test.sh``
installs them as root) or no selenium. Chromium is told to resolve no name but loopback and to make no background
connection, so the test talks to nothing but the emulator on 127.0.0.1.
"""

from __future__ import annotations

import os
import subprocess
import sys
import uuid
from collections.abc import Iterator
from pathlib import Path
from typing import Any

import pytest

pytest.importorskip("aiohttp", reason="the inspector needs the 'inspect' extra (aiohttp)")

from .conftest import Inspected

pytestmark = pytest.mark.broker

CHROMIUM = Path("/usr/bin/chromium")
CHROMEDRIVER = Path("/usr/bin/chromedriver")
REPO = Path(__file__).resolve().parents[3]
SCREENSHOT = REPO / "build" / "inspector.png"
WAIT_S = 10


@pytest.fixture(scope="module")
def browser() -> Iterator[Any]:
    if not (CHROMIUM.exists() and CHROMEDRIVER.exists()):
        pytest.skip("no Debian chromium + chromium-driver (scripts/test.sh installs them when run as root)")
    try:
        from selenium import webdriver
        from selenium.webdriver.chrome.service import Service
    except ImportError:
        pytest.skip("selenium is not installed (it is in the dev extra)")
    os.environ["SE_OFFLINE"] = "true"  # selenium's driver manager must never try to download anything
    options = webdriver.ChromeOptions()
    options.binary_location = str(CHROMIUM)
    for arg in (
        "--headless=new",
        "--no-sandbox",  # root in a container: the sandbox needs namespaces it may not have
        "--disable-dev-shm-usage",
        "--disable-gpu",
        "--window-size=1440,1000",
        "--no-first-run",
        "--disable-background-networking",
        "--disable-component-update",
        "--disable-sync",
        "--disable-default-apps",
        "--disable-extensions",
        "--host-resolver-rules=MAP * ~NOTFOUND , EXCLUDE 127.0.0.1",
    ):
        options.add_argument(arg)
    driver = webdriver.Chrome(service=Service(executable_path=str(CHROMEDRIVER)), options=options)
    try:
        yield driver
    finally:
        driver.quit()


@pytest.fixture(scope="module")
def writer(inspected: Inspected) -> Iterator[subprocess.Popen[str]]:
    """The other process: it has built its state (dict, cache, lock, watch) when this returns."""
    proc = subprocess.Popen(
        [sys.executable, str(Path(__file__).with_name("_writer.py")), inspected.host, str(inspected.port)],
        stdin=subprocess.PIPE,
        stdout=subprocess.PIPE,
        text=True,
        cwd=REPO,
        env={**os.environ, "PYTHONPATH": str(REPO)},
    )
    assert proc.stdin is not None and proc.stdout is not None
    try:
        assert proc.stdout.readline().strip() == "ready", "the writer process did not get ready"
        yield proc
    finally:
        if proc.poll() is None:
            proc.stdin.write("quit\n")
            proc.stdin.flush()
            try:
                proc.wait(10)
            except subprocess.TimeoutExpired:
                proc.kill()
                proc.wait(5)


def _tell(writer: subprocess.Popen[str], line: str) -> None:
    assert writer.stdin is not None and writer.stdout is not None
    writer.stdin.write(line + "\n")
    writer.stdin.flush()
    assert writer.stdout.readline().strip() == "ok"


def _listed(driver: Any) -> list[str]:
    # read in one script: the page re-renders its rows on every refresh, so element handles go stale
    keys: list[str] = driver.execute_script(
        "return [...document.querySelectorAll('#keys tbody tr[data-key]')].map(r => r.dataset.key)"
    )
    return keys


def _text(driver: Any, selector: str) -> str:
    text: str = driver.execute_script("return document.querySelector(arguments[0]).innerText", selector)
    return text


def _until(driver: Any, condition: Any, what: str) -> Any:
    from selenium.webdriver.support.ui import WebDriverWait

    return WebDriverWait(driver, WAIT_S, poll_frequency=0.05).until(condition, message=what)


def test_the_page_lists_the_keys_and_shows_another_process_writing_live(
    browser: Any, inspected: Inspected, writer: subprocess.Popen[str]
) -> None:
    browser.get(inspected.url)
    _until(browser, lambda d: "orders/1001" in _listed(d), "the dict's keys listed")
    listed = _listed(browser)
    assert {"orders/1002", "orders-lock", "orders-total", "config/feature-flags", "device/thermostat-7"} <= set(listed)
    assert any(k.startswith("web#g.") and k.endswith("/session:alice") for k in listed)
    _until(browser, lambda d: "live" in _text(d, "#status"), "the live feed connected")
    page = _text(browser, "body")
    assert "espresso beans" in page and "07 00 dc 01 ff" in page  # JSON shown as text, bytes as hex
    assert "stored index" in page and "generation" in page  # the dict's index, the cache's generation

    browser.execute_script("window.__sameDocument = true")
    _tell(writer, 'set config/feature-flags {"new-checkout": true, "beta-search": true}')  # a watched key: NOTIFY
    key = f"live/{uuid.uuid4().hex[:8]}"
    _tell(writer, f"set {key} written-by-another-process")
    _until(browser, lambda d: key in _listed(d), "the new key listed without a reload")
    _until(
        browser,
        lambda d: d.execute_script(f'return document.querySelector(\'#feed li[data-op="SET"][data-key="{key}"]\')'),
        "the SET in the live feed",
    )
    assert browser.execute_script("return window.__sameDocument") is True
    SCREENSHOT.parent.mkdir(exist_ok=True)
    browser.set_window_size(1600, 1250)  # the whole page, feed included
    assert browser.save_screenshot(str(SCREENSHOT))


def test_the_page_filters_by_prefix(browser: Any, inspected: Inspected, writer: subprocess.Popen[str]) -> None:
    browser.get(inspected.url)
    _until(browser, lambda d: "orders/1001" in _listed(d), "the keys listed")
    box = browser.find_element("id", "prefix")
    box.send_keys("web#")
    _until(browser, lambda d: _listed(d) and all(k.startswith("web#") for k in _listed(d)), "only web# keys")
    assert len(_listed(browser)) >= 4  # the generation and three entries
    assert "keys match" in _text(browser, "#matched")
    namespaces = _text(browser, "#namespaces")
    assert "web" in namespaces and "orders" not in namespaces
    # a key written under the prefix shows up; one outside it does not
    inside, outside = f"web#x-{uuid.uuid4().hex[:6]}", f"other/{uuid.uuid4().hex[:6]}"
    _tell(writer, f"set {outside} no")
    _tell(writer, f"set {inside} yes")
    _until(browser, lambda d: inside in _listed(d), "the key under the prefix listed live")
    assert outside not in _listed(browser)
    assert browser.current_url.endswith("#" + "web%23")  # the filter is kept in the address, for a reload
