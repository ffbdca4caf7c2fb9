"""The explorer as a person sees it: a real headless Chromium (tests/headless.py) opens the page served on a real
port, over the session's real runs (`workplace` and a refund run as `support`, tests/explorer_util.py). It signs in
with a one-time link, finds the workplace run, sees its steps and a trigger firing at its virtual time, and the
refund run's refused tool calls, downloads an artifact; the page logs no errors and never holds the admin token.
The session: a cookie that another port of 127.0.0.1 receives opens nothing there, a second tab gets in while
another is open, and a session that ends shows the sign-in page. A screenshot of each stage is kept under
test-artifacts/screenshots/."""

from __future__ import annotations

import contextlib
import http.server
import threading
import time
from collections.abc import Iterator
from zoneinfo import ZoneInfo

import explorer_util
import headless
import httpx
import pytest
from headless import screenshot

from agent_env.explorer.auth import COOKIE, IDLE_TTL, KEY_HEADER, Door
from agent_env.explorer.server import create_app
from agent_env.spec.evals import EvalRun, EvalTaskRun
from agent_env.stores import keys, open_stores

browser = headless.browser
finished_runs = explorer_util.finished_runs
WAIT_S = 20  # generous: a 2-core CI box renders slowly


KEY_STORE = "agentenv-explorer-key"  # where the page keeps its key (static/key.js)
later = [0.0]  # seconds the site's door clock is ahead of the real one (a test moves it past a session's end)


@pytest.fixture(scope="module")
def site(settings, client, finished_runs):
    """The explorer on a free port of 127.0.0.1 (its own thread and event loop), and its door."""
    door = Door(clock=lambda: time.monotonic() + later[0])
    with explorer_util.serving(create_app(settings, door, temporal=client)) as base:
        yield base, door


@contextlib.contextmanager
def another_server() -> Iterator[tuple[str, list[str]]]:
    """A page on another port of 127.0.0.1, as an agent's own server would serve it: it keeps the Cookie headers
    the browser sends it. Yields its base URL and those headers."""
    seen: list[str] = []

    class Page(http.server.BaseHTTPRequestHandler):
        def do_GET(self) -> None:
            seen.append(self.headers.get("cookie", ""))
            body = b"<!doctype html><title>an agent's page</title><p>hello</p>"
            self.send_response(200)
            self.send_header("content-type", "text/html")
            self.send_header("content-length", str(len(body)))
            self.end_headers()
            self.wfile.write(body)

        def log_message(self, *args) -> None:
            pass

    server = http.server.ThreadingHTTPServer(("127.0.0.1", 0), Page)
    thread = threading.Thread(target=server.serve_forever, daemon=True)
    thread.start()
    try:
        yield f"http://127.0.0.1:{server.server_address[1]}", seen
    finally:
        server.shutdown()
        server.server_close()


def wait(browser, condition, what: str):
    from selenium.webdriver.support.ui import WebDriverWait

    return WebDriverWait(browser, WAIT_S).until(condition, message=f"the page never showed {what}")


def found(browser, css: str) -> list:
    from selenium.webdriver.common.by import By

    return browser.find_elements(By.CSS_SELECTOR, css)


def sign_in(browser, site) -> None:
    """Open a fresh one-time link: the runs list."""
    base, door = site
    browser.get(f"{base}/login?code={door.new_code()}")
    wait(browser, lambda d: found(d, '[data-testid="runs"]'), "the runs list")


def console_errors(browser) -> list[dict]:
    """What the page logged as errors since the last look (reading the log empties it)."""
    return [e for e in browser.get_log("browser") if e["level"] == "SEVERE"]


def assert_no_admin_token(browser, settings) -> None:
    from agent_env.gateway.embedded import admin_token

    assert admin_token(settings) not in browser.page_source


def test_the_page_asks_for_the_link_and_the_link_signs_in(browser, site, settings):
    base, _ = site
    browser.delete_all_cookies()
    browser.get(f"{base}/")
    wait(browser, lambda d: found(d, '[data-testid="login"]'), "the sign-in page")
    assert "agent-env up" in found(browser, '[data-testid="login"]')[0].text
    screenshot(browser, "explorer-1-login")
    errors = console_errors(browser)  # the sign-in page answers 401 and Chromium logs that, nothing else
    assert errors and all(e["source"] == "network" and "401" in e["message"] for e in errors), errors

    sign_in(browser, site)
    assert browser.current_url == f"{base}/"  # the key never shows in a URL
    screenshot(browser, "explorer-2-runs")
    assert browser.execute_script("return document.cookie") == ""  # HttpOnly: no script reads the session
    cookie = browser.get_cookie(COOKIE)
    assert cookie is not None and cookie["httpOnly"] is True and cookie["sameSite"] == "Strict"
    key = browser.execute_script(f"return sessionStorage.getItem('{KEY_STORE}')")
    assert key and key not in browser.page_source  # kept by the tab, not left in the page
    assert_no_admin_token(browser, settings)
    assert console_errors(browser) == []


def test_the_workplace_run_shows_its_steps_and_triggers_at_their_virtual_times(browser, site, finished_runs, settings):
    workplace, _ = finished_runs
    sign_in(browser, site)
    task = found(browser, 'input[name="task"]')[0]
    task.send_keys("workplace\t")  # the filter applies on change
    row_css = f'[data-testid="run-row"][data-run-id="{workplace.run_id}"]'
    wait(browser, lambda d: found(d, row_css), "the workplace run in the runs list")
    wait(browser, lambda d: "task=workplace" in d.current_url, "the filter in the address")
    assert found(browser, row_css)[0].get_attribute("data-status") == "passed"
    screenshot(browser, "explorer-3-runs-filtered")

    found(browser, f"{row_css} a")[0].click()
    expected = {step_id: step.status.value for step_id, step in workplace.steps.items()}
    wait(browser, lambda d: len(found(d, '[data-testid="step"]')) == len(expected), "the run's steps")
    shown = {
        s.get_attribute("data-step-id"): s.get_attribute("data-status") for s in found(browser, '[data-testid="step"]')
    }
    assert shown == expected and set(shown.values()) == {"succeeded"}

    trigger_css = '[data-testid="world-event"][data-kind="trigger"]'
    wait(browser, lambda d: found(d, f'{trigger_css}[data-trigger="sam_triages"]'), "a trigger firing")
    assert workplace.world is not None and workplace.world.clock is not None
    zone = workplace.world.clock.zone
    recorded = {e.seq: e for e in workplace.world.events if e.kind == "fired"}
    firings = found(browser, trigger_css)
    for firing in firings:  # each shown at the virtual time the run recorded, in the world's own zone
        event = recorded[int(firing.get_attribute("data-seq"))]
        assert firing.get_attribute("data-trigger") == event.trigger
        assert firing.get_attribute("data-virtual-time") == event.virtual_time.isoformat()
        time = firing.find_element("css selector", "time")
        assert time.get_attribute("datetime") == event.virtual_time.isoformat()
        local = event.virtual_time.astimezone(ZoneInfo(zone))
        assert time.text == f"{local:%Y-%m-%d %H:%M:%S} {zone}", (time.text, event)
    sam = next(f for f in firings if f.get_attribute("data-trigger") == "sam_triages")
    assert sam.find_element("css selector", "time").text == "2026-03-02 10:00:00 America/New_York"
    browser.execute_script("arguments[0].scrollIntoView({block: 'center'})", sam)
    screenshot(browser, "explorer-4-workplace-run")

    criteria = found(browser, '[data-testid="criterion"]')
    assert "Dana's ticket is solved" in {c.get_attribute("data-name") for c in criteria}
    assert {c.get_attribute("data-passed") for c in criteria} == {"true"}
    # No link into the Temporal UI: the embedded server's is off unless asked for (SECURITY.md).
    assert settings.run_url(workplace.run_id) is None and not found(browser, '[data-testid="temporal-link"]')
    artifacts = {a.text for a in found(browser, '[data-testid="artifact"]')}
    assert "snapshots/end_state.tar" in artifacts
    assert_no_admin_token(browser, settings)
    assert console_errors(browser) == []


def test_the_refund_run_shows_its_refused_calls_and_conversation(browser, site, finished_runs, settings):
    _, refund = finished_runs
    sign_in(browser, site)
    base, _ = site
    browser.get(f"{base}/#/runs/{refund.run_id}")
    refused_css = '[data-testid="tool-call"][data-refused="true"]'
    wait(browser, lambda d: len(found(d, refused_css)) == 2, "the two refused tool calls")
    refused = found(browser, refused_css)
    assert sorted(r.get_attribute("data-tool") for r in refused) == ["issue_refund", "verify_order"]
    assert all(r.get_attribute("data-agent") == "refunds" for r in refused)
    assert all("refused: " in r.text and "not available to role" in r.text for r in refused)
    assert found(browser, '[data-testid="tool-call"][data-refused="false"]')  # the calls it was allowed
    browser.execute_script("arguments[0].scrollIntoView({block: 'center'})", refused[0])
    screenshot(browser, "explorer-5-refund-refused-calls")

    found(browser, '[data-testid="transcript"][data-step-id="work"] button')[0].click()
    wait(browser, lambda d: len(found(d, '[data-testid="message"]')) == 2, "the conversation")
    assert [m.get_attribute("data-side") for m in found(browser, '[data-testid="message"]')] == ["user", "agent"]
    screenshot(browser, "explorer-6-refund-conversation")
    assert_no_admin_token(browser, settings)
    assert console_errors(browser) == []


def test_a_cookie_another_port_receives_opens_nothing(browser, site, settings):
    """The red team's finding, in a real browser: it sends the explorer's cookie to an agent's page on another port
    of 127.0.0.1. That page cannot read the tab's key, and the cookie replayed from there reads no runs."""
    base, _ = site
    sign_in(browser, site)
    key = browser.execute_script(f"return sessionStorage.getItem('{KEY_STORE}')")
    with another_server() as (elsewhere, cookies):
        browser.get(f"{elsewhere}/")
        stolen = [c for c in cookies if f"{COOKIE}=" in c]
        assert stolen, cookies  # what browsers do: cookies are scoped by host, not by port
        assert browser.execute_script("return sessionStorage.length") == 0  # the key is the explorer origin's only
    replayed = httpx.get(f"{base}/api/runs", headers={"cookie": stolen[0]})
    assert replayed.status_code == 401, replayed.text
    assert httpx.get(f"{base}/api/runs", headers={"cookie": stolen[0], KEY_HEADER: key}).status_code == 200
    console_errors(browser)


def test_a_second_tab_gets_in_while_another_is_open(browser, site, finished_runs):
    base, _ = site
    workplace, _ = finished_runs
    sign_in(browser, site)
    first = browser.current_window_handle
    browser.switch_to.new_window("tab")  # a fresh tab (its own sessionStorage), as a bookmark or a typed URL opens
    browser.get(f"{base}/#/runs/{workplace.run_id}")
    wait(browser, lambda d: found(d, '[data-testid="step"]'), "the run in the second tab")
    assert browser.execute_script(f"return sessionStorage.getItem('{KEY_STORE}')")  # handed over by the first tab
    screenshot(browser, "explorer-7-second-tab")
    assert console_errors(browser) == []
    browser.close()

    browser.switch_to.window(first)
    browser.get("about:blank")  # no tab of the explorer is open now
    browser.switch_to.new_window("tab")
    browser.get(f"{base}/")  # the cookie is still there, but no tab can hand the key over: the sign-in page
    wait(browser, lambda d: found(d, '[data-testid="login"]'), "the sign-in page")
    console_errors(browser)
    browser.close()
    browser.switch_to.window(first)


def test_a_new_sign_in_in_one_tab_carries_on_in_the_others(browser, site):
    base, _ = site
    sign_in(browser, site)
    first = browser.current_window_handle
    old = browser.execute_script(f"return sessionStorage.getItem('{KEY_STORE}')")
    browser.switch_to.new_window("tab")
    sign_in(browser, site)  # a new one-time link: a new session, whose cookie replaces the first tab's
    browser.close()
    browser.switch_to.window(first)
    assert browser.execute_script(f"return sessionStorage.getItem('{KEY_STORE}')") not in (None, old)
    browser.get(f"{base}/#/registry")
    wait(browser, lambda d: found(d, '[data-testid="view"] section h2'), "the registry")
    assert found(browser, '[data-testid="login"]') == []
    assert console_errors(browser) == []


def test_an_artifact_downloads(browser, site, finished_runs, settings, tmp_path):
    """A link cannot send the tab's key: the page fetches the file with it and hands the browser its bytes."""
    base, _ = site
    workplace, _ = finished_runs
    sign_in(browser, site)
    browser.execute_cdp_cmd("Browser.setDownloadBehavior", {"behavior": "allow", "downloadPath": str(tmp_path)})
    browser.get(f"{base}/#/runs/{workplace.run_id}")
    wait(browser, lambda d: found(d, '[data-testid="artifact"]'), "the run's artifacts")
    next(a for a in found(browser, '[data-testid="artifact"]') if a.text == "snapshots/end_state.tar").click()
    saved = tmp_path / "end_state.tar"
    wait(browser, lambda d: saved.exists() and not list(tmp_path.glob("*.crdownload")), "the downloaded file")
    stores = open_stores(settings)
    try:
        assert saved.read_bytes() == stores.objects.get(keys.snapshot(workplace.run_id, "end_state"))
    finally:
        stores.close()
    assert console_errors(browser) == []


def test_an_eval_run_shows_its_table(browser, site, finished_runs, settings):
    """An eval run over the session's two runs (recorded as `run_eval` records one): the list shows its aggregate,
    its page a row per task with status and score, and a link to each run."""
    base, _ = site
    workplace, refund = finished_runs
    record = EvalRun(
        eval_run_id=f"eval-browser-{time.time_ns()}",
        eval="browser",
        version="2",
        source="evals/browser.toml",
        started_at="2026-01-01T00:00:00Z",
        tasks=[
            EvalTaskRun(task=s.task_id, version=s.task_version, ref=s.task_id, run_id=s.run_id)
            for s in (workplace, refund)
        ],
    )
    stores = open_stores(settings)
    try:
        stores.documents.put(keys.EVAL_RUNS, record.eval_run_id, record.model_dump(mode="json"))
    finally:
        stores.close()
    sign_in(browser, site)
    browser.get(f"{base}/#/evals")
    wait(browser, lambda d: found(d, f'[data-testid="evals-row"][data-name="{record.eval_run_id}"]'), "the eval run")
    found(browser, f'[data-testid="evals-row"][data-name="{record.eval_run_id}"] a')[0].click()
    wait(browser, lambda d: len(found(d, '[data-testid="eval-tasks-row"]')) == 2, "the eval's table")
    rows = {r.get_attribute("data-name"): r.text for r in found(browser, '[data-testid="eval-tasks-row"]')}
    assert "passed" in rows[workplace.task_id] and "failed" in rows[refund.task_id], rows
    mean = ((workplace.score or 0) + (refund.score or 0)) / 2
    aggregate = found(browser, '[data-testid="eval-aggregate"]')[0].text
    assert f"mean {mean:.2f} · pass rate 0.50 (1/2 passed, 2 finished)" == aggregate
    screenshot(browser, "explorer-eval-table")
    assert console_errors(browser) == []


def test_a_k_2_eval_run_shows_each_tasks_runs_mean_and_pass_at_k(browser, site, finished_runs, settings):
    """An eval run of k=2 (each of the session's two runs counted twice): its page shows a row per task with
    its two runs, passed/k, mean and pass@2, and the share of tasks with a passing run."""
    base, _ = site
    workplace, refund = finished_runs
    record = EvalRun(
        eval_run_id=f"eval-k2-{time.time_ns()}",
        eval="browser",
        version="1",
        source="evals/browser.toml",
        started_at="2026-01-01T00:00:00Z",
        tasks=[
            EvalTaskRun(task=s.task_id, version=s.task_version, ref=s.task_id, run_id=s.run_id, attempt=n)
            for s in (workplace, refund)
            for n in (1, 2)
        ],
        k=2,
    )
    stores = open_stores(settings)
    try:
        stores.documents.put(keys.EVAL_RUNS, record.eval_run_id, record.model_dump(mode="json"))
    finally:
        stores.close()
    sign_in(browser, site)
    browser.get(f"{base}/#/evals/{record.eval_run_id}")
    wait(browser, lambda d: len(found(d, '[data-testid="eval-per-task-row"]')) == 2, "the per-task table")
    rows = {r.get_attribute("data-name"): r.text for r in found(browser, '[data-testid="eval-per-task-row"]')}
    assert "2/2" in rows[workplace.task_id] and rows[workplace.task_id].endswith("yes"), rows
    assert "0/2" in rows[refund.task_id] and rows[refund.task_id].endswith("no"), rows
    assert len(found(browser, f'[data-testid="eval-per-task-row"][data-name="{workplace.task_id}"] a')) == 2
    assert found(browser, '[data-testid="eval-pass-at-k"]')[0].text == "pass@2 0.50 (tasks with a passing run)"
    assert len(found(browser, '[data-testid="eval-tasks-row"]')) == 4, "and each run"
    screenshot(browser, "explorer-eval-per-task")
    assert console_errors(browser) == []


def test_when_the_session_ends_the_page_asks_for_a_new_link(browser, site):
    base, _ = site
    sign_in(browser, site)
    later[0] += IDLE_TTL + 1  # no request for longer than a session may idle
    try:
        browser.get(f"{base}/#/registry")
        wait(browser, lambda d: found(d, '[data-testid="login"]'), "the sign-in page")
        screenshot(browser, "explorer-8-session-ended")
        console_errors(browser)
        sign_in(browser, site)  # a new link gets in again
        assert found(browser, '[data-testid="login"]') == []
    finally:
        later[0] = 0.0
