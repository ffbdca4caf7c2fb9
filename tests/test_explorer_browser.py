"""The explorer as a person sees it: a real headless Chromium (tests/headless.py) opens the page served on a real
port, over the session's real runs (`workplace` and a refund run as `support`, tests/explorer_util.py). It signs in
with a one-time link, finds the workplace run, sees its steps and a trigger firing at its virtual time, and the
refund run's refused tool calls; the page logs no errors and never holds the admin token. A screenshot of each
stage is kept under test-artifacts/screenshots/."""

from __future__ import annotations

from zoneinfo import ZoneInfo

import explorer_util
import headless
import pytest
from headless import screenshot

from agentenv.explorer.auth import COOKIE, Door
from agentenv.explorer.server import create_app

browser = headless.browser
finished_runs = explorer_util.finished_runs
WAIT_S = 20  # generous: a 2-core CI box renders slowly


@pytest.fixture(scope="module")
def site(settings, client, finished_runs):
    """The explorer on a free port of 127.0.0.1 (its own thread and event loop), and its door."""
    door = Door()
    with explorer_util.serving(create_app(settings, door, temporal=client)) as base:
        yield base, door


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
    from agentenv.gateway.embedded import admin_token

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
    assert browser.current_url == f"{base}/"
    screenshot(browser, "explorer-2-runs")
    assert browser.execute_script("return document.cookie") == ""  # HttpOnly: no script reads the session
    cookie = browser.get_cookie(COOKIE)
    assert cookie is not None and cookie["httpOnly"] is True and cookie["sameSite"] == "Strict"
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
    link = found(browser, '[data-testid="temporal-link"]')[0]
    assert link.get_attribute("href") == settings.run_url(workplace.run_id)
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
