"""The dashboard page (GET <admin.path>/dashboard) in a real headless browser: Debian's chromium
driven through /usr/bin/chromedriver by selenium (nothing is downloaded). Skipped, saying why, only
when the browser or its driver is missing or cannot start: `apt-get install chromium chromium-driver`.
"""

from __future__ import annotations

import os
import re
import shutil
import tempfile
import tomllib
from collections.abc import Iterator
from pathlib import Path

import httpx
import pytest

from gateway.admin.summary import size
from gateway.config import CacheSettings
from tests.admin.test_admin_api import ADMIN_ON, TOKEN, admin
from tests.support import RunningGateway, client
from tests.waiting import wait_for

CHROMIUM = "/usr/bin/chromium"
CHROMEDRIVER = "/usr/bin/chromedriver"
XSS_KEY = "<img src=x onerror=alert(1)>.txt"
WAIT = 20  # seconds for the page to show what is asked (it polls every 2 s; the machine is shared)

# Before the page's own script: record alert() calls and, once the page is parsed, any <img>,
# <script> or <iframe> that enters the DOM.
WATCH = """
window.__alerts = [];
window.alert = (message) => { window.__alerts.push(String(message)); };
window.__injected = [];
document.addEventListener('DOMContentLoaded', () => new MutationObserver((changes) => {
  for (const change of changes) for (const node of change.addedNodes) {
    if (node.nodeType === 1 && (node.matches('img, script, iframe') || node.querySelector('img, script, iframe')))
      window.__injected.push(node.outerHTML);
  }
}).observe(document, {childList: true, subtree: true}));
"""


@pytest.fixture(scope="module")
def browser() -> Iterator[object]:
    try:
        from selenium import webdriver
        from selenium.common.exceptions import WebDriverException
    except ImportError:
        pytest.skip("selenium is not installed: pip install -e '.[test]'")
    for path, package in ((CHROMIUM, "chromium"), (CHROMEDRIVER, "chromium-driver")):
        if not os.access(path, os.X_OK):
            pytest.skip(f"{path} is missing: apt-get install -y chromium chromium-driver (needs {package})")
    profile = tempfile.mkdtemp(prefix="dashboard-chromium-")
    options = webdriver.ChromeOptions()
    options.binary_location = CHROMIUM
    for argument in ("--headless=new", "--no-sandbox", "--disable-dev-shm-usage", "--disable-gpu",
                     "--no-first-run", "--disable-extensions", "--window-size=1280,1000",
                     f"--user-data-dir={profile}"):
        options.add_argument(argument)
    options.set_capability("goog:loggingPrefs", {"browser": "ALL"})
    try:
        driver = webdriver.Chrome(options=options, service=webdriver.ChromeService(executable_path=CHROMEDRIVER))
    except WebDriverException as exc:
        shutil.rmtree(profile, ignore_errors=True)
        pytest.skip(f"chromium did not start under chromedriver: {exc.msg}")
    driver.execute_cdp_cmd("Page.addScriptToEvaluateOnNewDocument", {"source": WATCH})
    yield driver
    driver.quit()
    shutil.rmtree(profile, ignore_errors=True)


def page_shows(browser, what, condition):  # type: ignore[no-untyped-def]
    """Wait until condition(browser) is truthy; fail saying `what` and showing the page's text."""
    from selenium.common.exceptions import NoSuchElementException

    try:
        return wait_for(lambda: condition(browser), f"the page shows {what}", within=WAIT,
                        ignoring=(NoSuchElementException,), interval=0.2)
    except AssertionError as exc:
        raise AssertionError(f"{exc}; it shows:\n{browser.find_element('tag name', 'body').text}") from None


def text(browser, css: str) -> str:  # type: ignore[no-untyped-def]
    return browser.find_element("css selector", css).text


def visible(browser, element_id: str) -> bool:  # type: ignore[no-untyped-def]
    return browser.find_element("id", element_id).is_displayed()


def open_page(browser, gateway: RunningGateway, token: str | None) -> None:  # type: ignore[no-untyped-def]
    browser.get("about:blank")  # each gateway has its own port: a new origin, an empty sessionStorage
    browser.get_log("browser")  # drop what earlier pages logged
    browser.get(f"{gateway.endpoint}/_gateway/dashboard" + (f"#token={token}" if token else ""))


@pytest.fixture
def dashboard_gateway(start_gateway, clean_origin) -> RunningGateway:  # type: ignore[no-untyped-def]
    gateway = start_gateway(admin=ADMIN_ON)
    s3 = client(gateway.endpoint)
    s3.create_bucket(Bucket="bkt")
    for key, body, reads in (("a.txt", b"a" * 3000, 4), (XSS_KEY, b"<b>bold</b>", 2), ("dir/c.txt", b"c" * 10, 1)):
        s3.put_object(Bucket="bkt", Key=key, Body=body)
        for _ in range(reads):
            s3.get_object(Bucket="bkt", Key=key)["Body"].read()
    assert admin(gateway, "POST", "/pin?bucket=bkt&prefix=dir/").status_code == 200
    return gateway


@pytest.fixture
def admin_gateway_without_browser(start_gateway, clean_origin) -> RunningGateway:  # type: ignore[no-untyped-def]
    return start_gateway(admin=ADMIN_ON)


def test_the_page_needs_no_token_and_holds_no_figures(admin_gateway_without_browser):
    gateway = admin_gateway_without_browser
    page = httpx.get(f"{gateway.endpoint}/_gateway/dashboard", timeout=10)
    assert page.status_code == 200 and page.headers["content-type"] == "text/html; charset=utf-8"
    csp = page.headers["content-security-policy"]
    assert "default-src 'none'" in csp and "script-src 'sha256-" in csp and "unsafe-inline" not in csp
    assert "connect-src 'self'" in csp and "frame-ancestors 'none'" in csp
    assert page.headers["x-content-type-options"] == "nosniff"
    assert "innerHTML" not in page.text and "insertAdjacentHTML" not in page.text and "<script src" not in page.text
    assert "http://" not in page.text and "https://" not in page.text  # no CDN, nothing from elsewhere
    assert httpx.post(f"{gateway.endpoint}/_gateway/dashboard", timeout=10).status_code == 404
    assert admin(gateway, "GET", "/stats", token=None).status_code == 401  # the figures still need the token


def test_the_page_ships_as_package_data():
    """An installed (not editable) gateway serves the page too: pyproject names it as package data."""
    pyproject = tomllib.loads((Path(__file__).resolve().parents[2] / "pyproject.toml").read_text())
    assert "dashboard.html" in pyproject["tool"]["setuptools"]["package-data"]["gateway.admin"]


def test_dashboard_shows_the_stats_live(browser, dashboard_gateway):
    gateway = dashboard_gateway
    open_page(browser, gateway, TOKEN)
    page_shows(browser, "the figures", lambda b: visible(b, "figures") and len(b.find_elements(
        "css selector", "#hot-objects tr td.key")) >= 6)
    assert "token" not in browser.current_url  # the fragment's token left the address bar
    stats = admin(gateway, "GET", "/stats").json()

    shown = re.fullmatch(r"([\d.]+) %", text(browser, "#hit-ratio"))
    assert shown, text(browser, "#hit-ratio")
    assert stats["hit_ratio"] == pytest.approx(4 / 7)  # reads: a.txt 4, the XSS key 2, dir/c.txt 1
    assert abs(float(shown.group(1)) - 100 * stats["hit_ratio"]) <= 0.05 + 1e-9
    assert text(browser, "#hit-counts").startswith(f"{stats['hits']} block hits, {stats['misses']} misses")
    assert text(browser, "#node") == stats["node"]

    rows = browser.find_elements("css selector", "#hot-objects tr")
    hot = [[cell.text for cell in row.find_elements("tag name", "td")] for row in rows]
    assert hot == [["4", "bkt", "a.txt"], ["2", "bkt", XSS_KEY], ["1", "bkt", "dir/c.txt"]]

    for source in ("memory", "disk", "origin", "peer"):
        total = text(browser, f'#served tr[data-source="{source}"] td.num')
        assert total == size(stats["served_bytes"][source]), source
    assert stats["served_bytes"]["memory"] > 0 and stats["served_bytes"]["origin"] > 0

    memory = text(browser, '#tiers [data-tier="memory"]')
    assert memory.startswith("memory memory")
    assert f"{size(stats['tiers'][0]['used_bytes'])} / {size(CacheSettings().memory_quota)}" in memory
    assert f"{stats['tiers'][0]['blocks']} blocks" in memory
    assert text(browser, "#members") == stats["node"]
    assert text(browser, "#pins") == "bkt/dir/"
    # What more cache would buy: the shadow estimate at 1x, 2x and 4x the quotas.
    for name, figures in stats["shadow"]["shadows"].items():
        row = text(browser, f'#shadow tr[data-shadow="{name}"]')
        assert row.startswith(name) and f"{100 * figures['hit_ratio']:.1f} %" in row, row
    assert f"{stats['shadow']['gets']} GETs" in text(browser, "#shadow-note")

    # Live: a new read shows within a poll or two, and the chart grows by a sample each poll.
    client(gateway.endpoint).get_object(Bucket="bkt", Key="dir/c.txt")["Body"].read()
    page_shows(browser, "the new hit ratio (5/8)", lambda b: text(b, "#hit-ratio") == "62.5 %")
    page_shows(browser, "two chart samples", lambda b: int(b.find_element("id", "hit-chart").get_attribute("data-samples")) >= 2)
    assert text(browser, '#served tr[data-source="memory"] td.num:last-child').endswith("/s")

    # The key with markup is text: no element, no alert, no script error or CSP report.
    assert browser.execute_script("return document.querySelectorAll('img, iframe').length") == 0
    assert browser.execute_script("return window.__injected") == []
    assert browser.execute_script("return window.__alerts") == []
    severe = [entry["message"] for entry in browser.get_log("browser") if entry["level"] == "SEVERE"]
    assert severe == []


def test_a_wrong_token_says_so_and_the_form_takes_the_right_one(browser, dashboard_gateway):
    gateway = dashboard_gateway
    open_page(browser, gateway, "not-the-token")
    page_shows(browser, "the refused-token message", lambda b: visible(b, "error") and visible(b, "login"))
    assert "refused this admin token (401" in text(browser, "#error")
    assert not visible(browser, "figures")
    assert browser.execute_script("return sessionStorage.length") == 0  # the wrong token is not kept

    browser.find_element("id", "token").send_keys(TOKEN)
    browser.find_element("css selector", "#login button[type=submit]").click()
    page_shows(browser, "the figures after the form", lambda b: visible(b, "figures") and not visible(b, "error"))
    page_shows(browser, "the hit ratio", lambda b: text(b, "#hit-ratio") == "57.1 %")
    assert not visible(browser, "login")


def test_an_unreachable_gateway_says_so(browser, dashboard_gateway):
    gateway = dashboard_gateway
    open_page(browser, gateway, TOKEN)
    page_shows(browser, "the figures", lambda b: visible(b, "figures") and text(b, "#hit-ratio") == "57.1 %")
    gateway.__exit__()
    page_shows(browser, "the unreachable message", lambda b: visible(b, "error") and "unreachable" in text(b, "#error"))
    assert "retrying" in text(browser, "#error") and text(browser, "#hit-ratio") == "57.1 %"  # the last figures stay
