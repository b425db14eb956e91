"""``taketurns view`` in a real browser: Debian's headless Chromium driven by
selenium through ``chromedriver`` (apt ``chromium-driver``), against a real
``taketurns view`` process over a finished run, a run with markup in its episodes, and
a run a real ``taketurns eval`` subprocess is writing while the tests watch.

Screenshots at 1400 and 800 px wide go to ``$TAKETURNS_SCREENSHOTS`` when it is set
(look at them after changing a page)."""

from __future__ import annotations

import os
import shutil
import signal
import subprocess
import sys
import tempfile
from collections.abc import Callable, Iterator
from pathlib import Path
from typing import TypeVar

import pytest
from selenium import webdriver
from selenium.common.exceptions import NoSuchElementException, StaleElementReferenceException
from selenium.webdriver.chrome.options import Options
from selenium.webdriver.chrome.service import Service
from selenium.webdriver.common.by import By
from selenium.webdriver.remote.webdriver import WebDriver
from selenium.webdriver.remote.webelement import WebElement
from selenium.webdriver.support.ui import WebDriverWait
from viewruns import SCRIPT, eval_run, hostile_run, renamed_run

pytestmark = pytest.mark.slow

T = TypeVar("T")
APT_INSTALL = "apt-get install -y chromium chromium-driver"
WAIT_S = 90
# a run as long-named as real ones get (issue 40 item 19: the runs table's last column
# was cut at 1400 px by names like these, never by the short fixtures)
LONG_RUN = "2026-12-02-qwen2.5-72b-instruct-awq-vs-llama-3.1-405b-instruct-fp8-seed0-t0.7"
LONG_ENV = "my-org-multi-agent-negotiation-environment-with-tools-v2"
LONG_MODEL = "hosted_vllm/meta-llama/Meta-Llama-3.1-405B-Instruct-FP8-dynamic/"


def _binary(*names: str) -> str:
    for name in names:
        if found := shutil.which(name):
            return found
    pytest.fail(f"none of {', '.join(names)} on PATH; install them with: {APT_INSTALL}")


@pytest.fixture(scope="module")
def site(tmp_path_factory: pytest.TempPathFactory) -> Iterator[tuple[str, Path]]:
    """The viewer's URL over a folder holding ``finished``, ``markup``, ``other``,
    ``LONG_RUN`` and ``live`` (a 20,000-episode eval of a 50 ms model, running for the
    whole module)."""
    runs = tmp_path_factory.mktemp("viewer") / "runs"
    finished = eval_run(runs / "finished", n=16)
    hostile_run(finished, runs / "markup")
    renamed_run(finished, runs / LONG_RUN, env=LONG_ENV, model=LONG_MODEL)
    other = eval_run(runs / "other", n=16, model="builtin/echo")
    assert other.is_dir()
    taketurns = [sys.executable, "-m", "taketurns"]
    live = subprocess.Popen(
        [
            *taketurns,
            *("eval", "kuhn-poker", "-n", "20000", "-c", "4", "--no-progress"),
            *("--model", "builtin/bracket?latency_ms=50", "-o", str(runs / "live")),
        ],
        stdout=subprocess.DEVNULL,
        stderr=subprocess.DEVNULL,
    )
    view = subprocess.Popen(
        [*taketurns, "view", str(runs), "--port", "0"],
        stdout=subprocess.PIPE,
        stderr=subprocess.PIPE,
        text=True,
    )
    try:
        assert view.stdout is not None
        url = view.stdout.readline().strip()
        assert url.startswith("http://127.0.0.1:"), view.stderr.read() if view.stderr else ""
        yield url, runs
    finally:
        for proc in (view, live):
            proc.send_signal(signal.SIGINT)
        for proc in (view, live):
            try:
                proc.wait(timeout=30)
            except subprocess.TimeoutExpired:
                proc.kill()
                proc.wait()
        for pipe in (view.stdout, view.stderr):
            if pipe is not None:
                pipe.close()


def _chromium_leftovers() -> set[str]:
    """Chromium's singleton folders in the host's temp directory."""
    return {p.name for p in Path(tempfile.gettempdir()).glob("org.chromium.Chromium.*")}


@pytest.fixture(scope="module")
def browser(tmp_path_factory: pytest.TempPathFactory) -> Iterator[WebDriver]:
    """One browser for the module, its profile and its temp files in a folder of its
    own (module-scoped: it starts outside every test's private TMPDIR, and Chromium,
    stopped by ``quit``, left its singleton folder in the host's temp directory)."""
    own = tmp_path_factory.mktemp("chromium")
    before = _chromium_leftovers()
    options = Options()
    options.binary_location = _binary("chromium", "chromium-browser", "google-chrome")
    for flag in ("--headless=new", "--no-sandbox", "--disable-gpu", "--disable-dev-shm-usage"):
        options.add_argument(flag)
    options.add_argument("--window-size=1400,1000")
    options.add_argument(f"--user-data-dir={own / 'profile'}")
    options.set_capability("goog:loggingPrefs", {"browser": "ALL"})
    service = Service(_binary("chromedriver"), env={**os.environ, "TMPDIR": str(own)})
    driver = webdriver.Chrome(options=options, service=service)
    try:
        yield driver
    finally:
        driver.quit()
    assert _chromium_leftovers() <= before, "the browser left its folder in the temp directory"


def _wait(driver: WebDriver, condition: Callable[[WebDriver], T], timeout: float = WAIT_S) -> T:
    # the live pages swap elements in: one found a moment ago may be gone
    ignored = (NoSuchElementException, StaleElementReferenceException)
    return WebDriverWait(driver, timeout, 0.2, ignored_exceptions=ignored).until(condition)


def _click(driver: WebDriver, css: str) -> None:
    """Click the first element ``css`` selects, again if a live update replaced it."""

    def click(d: WebDriver) -> bool:
        d.find_element(By.CSS_SELECTOR, css).click()
        return True

    _wait(driver, click)


def _row(driver: WebDriver, run: str) -> WebElement:
    return driver.find_element(By.CSS_SELECTOR, f'#runs tr[data-run="{run}"]')


def _done(driver: WebDriver, run: str) -> int:
    cell = _row(driver, run).find_element(By.CSS_SELECTOR, "td.done")
    text = cell.text.replace(",", "").strip()
    return int(text) if text.isdigit() else 0


def _no_console_errors(driver: WebDriver) -> None:
    assert isinstance(driver, webdriver.Chrome)
    errors = [e for e in driver.get_log("browser") if e["level"] == "SEVERE"]
    assert not errors, errors


def test_runs_table_lists_a_finished_and_a_running_run_whose_count_rises(
    site: tuple[str, Path], browser: WebDriver
) -> None:

    url, _ = site
    driver = browser
    driver.get(url)

    def running(d: WebDriver) -> bool:
        try:
            return _row(d, "live").get_attribute("data-state") == "running" and _done(d, "live") > 0
        except NoSuchElementException:
            return False  # the eval has not written its directory yet: the table grows live

    _wait(driver, running)
    assert _row(driver, "finished").get_attribute("data-state") == "finished"
    assert _done(driver, "finished") == 16
    first = _wait(driver, lambda d: _done(d, "live"))
    _wait(driver, lambda d: _done(d, "live") > first)  # no reload: the live stream
    # the state filter and sorting work on the rows as they are
    driver.find_element(By.CSS_SELECTOR, "#state-filter option[value=running]").click()
    assert not _row(driver, "live").get_attribute("hidden")
    assert _row(driver, "finished").get_attribute("hidden")
    driver.find_element(By.CSS_SELECTOR, "#state-filter option[value='']").click()
    driver.find_element(
        By.XPATH, "//th[normalize-space()='run ↕' or starts-with(normalize-space(), 'run')]"
    ).click()
    ids = [
        r.get_attribute("data-run") or ""
        for r in driver.find_elements(By.CSS_SELECTOR, "#runs tbody tr")
    ]
    assert ids == sorted(ids)
    _no_console_errors(driver)


def test_a_running_runs_page_updates_and_a_transcript_opens(
    site: tuple[str, Path], browser: WebDriver
) -> None:

    url, _ = site
    driver = browser
    driver.get(url + "run/live")

    def done(d: WebDriver) -> int:
        text = d.find_element(By.CSS_SELECTOR, '[data-fact="done"] b').text.replace(",", "")
        return int(text) if text.isdigit() else 0

    first = _wait(driver, done)
    _wait(driver, lambda d: done(d) > first)
    _wait(driver, lambda d: d.find_elements(By.CSS_SELECTOR, "#figures svg.plot"))
    _click(driver, "#newest a")
    body = _wait(driver, lambda d: d.find_element(By.CSS_SELECTOR, "details.transcript[open] .msg"))
    assert body.is_displayed()
    # a closed transcript of the list opens on a click; an ended run's figures include
    # the env's own (Kuhn: payoff by card, drawn by its report hook)
    driver.get(url + "run/finished")
    _wait(driver, lambda d: d.find_elements(By.CSS_SELECTOR, "#figures svg#plot-kuhn-payoff"))
    second = driver.find_element(By.CSS_SELECTOR, "#transcripts details.transcript:nth-of-type(2)")
    assert second.get_attribute("open") is None
    second.find_element(By.TAG_NAME, "summary").click()
    _wait(driver, lambda d: second.get_attribute("open") is not None)
    assert second.find_element(By.CSS_SELECTOR, ".role-assistant").is_displayed()
    _no_console_errors(driver)


def test_model_written_markup_shows_as_text(site: tuple[str, Path], browser: WebDriver) -> None:

    url, _ = site
    driver = browser
    driver.get(url + "run/markup?cause=failed")
    episode = driver.find_element(By.CSS_SELECTOR, "#transcripts details.transcript")
    episode.find_element(By.TAG_NAME, "summary").click()
    message = _wait(driver, lambda d: episode.find_element(By.CSS_SELECTOR, ".role-assistant"))
    assert SCRIPT in message.text
    assert driver.execute_script("return window.__xss === undefined")
    assert not driver.find_elements(By.CSS_SELECTOR, "main script, main img[src=x]")


def test_a_comparison_renders(site: tuple[str, Path], browser: WebDriver) -> None:

    url, _ = site
    driver = browser
    driver.get(url)
    _wait(driver, lambda d: _row(d, "other"))
    button = driver.find_element(By.ID, "compare-button")
    assert not button.is_enabled()
    for run in ("finished", "other"):
        _row(driver, run).find_element(By.CSS_SELECTOR, "input[name=run]").click()
    assert button.is_enabled()
    button.click()
    rows = _wait(driver, lambda d: d.find_elements(By.CSS_SELECTOR, "#pair-1 tbody tr[data-agent]"))
    assert {r.get_attribute("data-agent") for r in rows} == {"player0", "player1"}
    diffs = driver.find_elements(By.CSS_SELECTOR, "#pair-1 td.diff b")
    assert all(d.text.startswith(("+", "-")) for d in diffs)
    assert driver.find_elements(By.CSS_SELECTOR, "#pair-1 svg.diffbar")
    _no_console_errors(driver)


@pytest.mark.parametrize("width", [1400, 800])
def test_pages_fit_the_window(site: tuple[str, Path], browser: WebDriver, width: int) -> None:
    """No page scrolls sideways at either width; screenshots for a person to look at."""

    url, _ = site
    driver = browser
    shots = os.environ.get("TAKETURNS_SCREENSHOTS")
    pages = {
        "runs": "",
        "run": "run/finished",
        "live": "run/live",
        "compare": "compare?run=finished&run=other",
    }
    for name, path in pages.items():
        driver.set_window_size(width, 1000)
        driver.get(url + path)
        if name in ("run", "live"):
            _wait(driver, lambda d: d.find_elements(By.CSS_SELECTOR, "#figures svg.plot"))
        wide = driver.execute_script("return document.documentElement.scrollWidth")
        inner = driver.execute_script("return document.documentElement.clientWidth")
        assert wide <= inner, f"{name} at {width} px scrolls sideways ({wide} > {inner})"
        if shots:
            height = driver.execute_script("return document.documentElement.scrollHeight")
            driver.set_window_size(width, min(height + 150, 4000))
            Path(shots).mkdir(parents=True, exist_ok=True)
            driver.save_screenshot(str(Path(shots) / f"{name}-{width}.png"))


@pytest.mark.parametrize(
    ("page", "table"), [("", "runs"), (f"compare?run={LONG_RUN}&run=finished", "compared")]
)
def test_the_runs_tables_fit_1400_px_with_long_names(
    site: tuple[str, Path], browser: WebDriver, page: str, table: str
) -> None:
    """Long run ids, env ids and model names wrap in their cells: at 1400 px the runs
    table (and a comparison's) needs no scrolling of its own and its last column ends
    inside the window."""

    url, _ = site
    driver = browser
    driver.set_window_size(1400, 1000)
    driver.get(url + page)
    _wait(driver, lambda d: LONG_ENV in d.find_element(By.ID, table).text)
    wide, box, last, window, columns = driver.execute_script(
        "var table = document.getElementById(arguments[0]), heads = table.tHead.rows[0].cells;"
        "return [table.scrollWidth, table.parentElement.clientWidth,"
        " heads[heads.length - 1].getBoundingClientRect().right,"
        " document.documentElement.clientWidth,"
        " Array.from(heads, h => Math.round(h.getBoundingClientRect().width))]",
        table,
    )
    assert wide <= box, f"the {table} table scrolls in its box ({wide} > {box} px: {columns})"
    assert last <= window, f"the last column ends at {last} px, past the window ({window})"
