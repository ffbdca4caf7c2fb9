"""The explorer (`agent-env up`) in headless Chromium: time to first render, from navigation start to the first
frame holding (a) a `run-row` of the runs list, over a temp store of 200 runs (the page shows 50), and (b) a
`tool-call` row of a run with 10,000 tool calls (the page shows 100). The page is plain ES modules fetching JSON,
so this is its module loads, its API requests and the DOM it builds.

Baseline, in the same run: static HTML pages with the same rows already in the markup (50 run rows, 100 call rows)
served by the same server kind (Starlette's StaticFiles under uvicorn, 127.0.0.1), so the ratio is what the page's
scripts and API cost over a page that needs neither. Times are read in the page: a MutationObserver installed
before any script notes `performance.now()` (milliseconds since navigation start) at the first animation frame
after the row is inserted. The 10,000-call run's first visit reads and orders its calls (then they are kept):
printed apart as "cold". Needs Debian's chromium and chromedriver; without them it prints why and measures nothing.
"""

from __future__ import annotations

import json
import shutil
import threading
from datetime import UTC, datetime, timedelta
from pathlib import Path

from common import free_port, row, summarize, temp_dir

RUNS = 200
CALLS = 10_000
SAMPLES = 15
BIG_RUN = "bench-big-run"
# Before any script of the page: when each row kind is first in a frame (ms since navigation start).
OBSERVE = """
(() => {
  const seen = (window.__firstRender = {});
  new MutationObserver(() => {
    for (const selector of ['[data-testid="run-row"]', '[data-testid="tool-call"]']) {
      if (selector in seen || !document.querySelector(selector)) continue;
      seen[selector] = null;
      requestAnimationFrame(() => { seen[selector] = performance.now(); });
    }
  }).observe(document, { childList: true, subtree: true });
})();
"""


def chromium():
    """Headless Chromium as tests/headless.py drives it (bench cannot import tests/), or None with a reason."""
    binary, driver = shutil.which("chromium"), shutil.which("chromedriver")
    if binary is None or driver is None:
        return None
    from selenium import webdriver

    options = webdriver.ChromeOptions()
    options.binary_location = binary
    for argument in ("--headless=new", "--no-sandbox", "--disable-gpu", "--disable-dev-shm-usage"):
        options.add_argument(argument)
    options.add_argument("--window-size=1400,1000")
    browser = webdriver.Chrome(options=options, service=webdriver.ChromeService(executable_path=driver))
    browser.execute_cdp_cmd("Page.addScriptToEvaluateOnNewDocument", {"source": OBSERVE})
    return browser


def fill_store(stores) -> None:
    """RUNS finished runs, and one whose single instance made CALLS tool calls (a tenth of them refused)."""
    from agent_env.spec.run import RunState, RunStatus, StepState, StepStatus
    from agent_env.stores import keys

    started = datetime(2026, 3, 2, 13, tzinfo=UTC)
    for i in range(RUNS):
        steps = {
            s: StepState(id=s, type="sleep", status=StepStatus.SUCCEEDED, depends_on=[] if n == 0 else ["a"])
            for n, s in enumerate(("a", "b", "c"))
        }
        state = RunState(
            run_id=f"bench-run-{i:03}",
            task_id=f"task-{i % 9}",
            task_version="1",
            status=RunStatus.PASSED if i % 4 else RunStatus.FAILED,
            score=(i % 10) / 10,
            started_at=started + timedelta(minutes=i),
            finished_at=started + timedelta(minutes=i, seconds=30),
            steps=steps,
        )
        stores.documents.put(keys.RUNS, state.run_id, state.model_dump(mode="json"))
    instance = f"{BIG_RUN}.desk"
    big = RunState(
        run_id=BIG_RUN,
        task_id="big",
        task_version="1",
        status=RunStatus.PASSED,
        started_at=started - timedelta(days=1),
        finished_at=started - timedelta(days=1) + timedelta(minutes=5),
        steps={
            "desk": StepState(id="desk", type="deploy_env", status=StepStatus.SUCCEEDED, outputs={"instance": instance})
        },
    )
    stores.documents.put(keys.RUNS, BIG_RUN, big.model_dump(mode="json"))
    calls = (
        {
            "seq": i + 1,
            "instance": instance,
            "agent": f"agent-{i % 7}",
            "role": "support",
            "tool": "get_ticket",
            "arguments": {"ticket_id": f"TCK-{i}", "note": "x" * 200},
            **(
                {"error": "not available to role 'support'"}
                if i % 10 == 0
                else {"result": {"id": i, "body": "y" * 500}}
            ),
            "refused": i % 10 == 0,
            "virtual_time": (started + timedelta(seconds=i)).isoformat(),
            "real_time": (started + timedelta(milliseconds=i)).isoformat(),
            "duration_ms": 1.0,
        }
        for i in range(CALLS)
    )
    stores.objects.put(keys.trajectory(BIG_RUN, instance), "".join(json.dumps(c) + "\n" for c in calls).encode())


def static_pages(folder: Path) -> None:
    """The baseline's pages: the explorer's stylesheet and the same rows, written into the HTML."""
    from agent_env.explorer.server import STATIC

    shutil.copy(STATIC / "style.css", folder / "style.css")
    head = '<!doctype html><html><head><meta charset="utf-8"><link rel="stylesheet" href="style.css"></head><body>'
    runs = "".join(
        f'<tr data-testid="run-row"><td><a href="#">bench-run-{i:03}</a></td><td>task-{i % 9} v1</td>'
        f'<td><span class="status passed">passed</span></td><td class="num">0.50</td><td>3/2/2026</td><td>30 s</td></tr>'
        for i in range(50)
    )
    (folder / "runs.html").write_text(f'{head}<table class="runs"><tbody>{runs}</tbody></table></body></html>')
    cells = "".join(f"<td>{'z' * 30}</td>" for _ in range(8))
    calls = "".join(f'<tr data-testid="tool-call"><td class="num">{i}</td>{cells}</tr>' for i in range(100))
    (folder / "calls.html").write_text(f'{head}<table class="calls"><tbody>{calls}</tbody></table></body></html>')


def serve(app) -> tuple[str, object]:
    import uvicorn

    port = free_port()
    server = uvicorn.Server(uvicorn.Config(app, host="127.0.0.1", port=port, log_level="warning"))
    threading.Thread(target=server.run, daemon=True).start()
    while not server.started:
        threading.Event().wait(0.01)
    return f"http://127.0.0.1:{port}", server


def first_render_ms(browser, url: str, selector: str) -> float:
    """Milliseconds from navigation start to the first frame holding `selector` (a fresh load each time)."""
    from selenium.webdriver.support.ui import WebDriverWait

    browser.get("about:blank")
    browser.get(url)
    wait = WebDriverWait(browser, 60, poll_frequency=0.01)
    return float(wait.until(lambda d: d.execute_script("return window.__firstRender[arguments[0]]", selector)))


def measure() -> dict:
    print("explorer in headless Chromium (time to first render, navigation start -> first row in a frame)")
    browser = chromium()
    if browser is None:
        row(
            "explorer first render",
            "skipped",
            "needs chromium and chromedriver (apt-get install chromium chromium-driver)",
        )
        return {}
    from starlette.applications import Starlette
    from starlette.routing import Mount
    from starlette.staticfiles import StaticFiles

    from agent_env.config import Settings
    from agent_env.explorer.auth import Door
    from agent_env.explorer.server import create_app
    from agent_env.stores import open_stores

    state = temp_dir("agentenv-bench-explorer-")
    (state / "static").mkdir()
    static_pages(state / "static")
    stores = open_stores(Settings(state_dir=state))
    fill_store(stores)
    door = Door()
    explorer, explorer_server = serve(create_app(Settings(state_dir=state), door, stores=stores))
    baseline, baseline_server = serve(Starlette(routes=[Mount("/", StaticFiles(directory=state / "static"))]))
    try:
        browser.get(f"{explorer}/login?code={door.new_code()}")  # the session cookie and the tab's key, once
        cold_ms = first_render_ms(browser, f"{explorer}/#/runs/{BIG_RUN}", '[data-testid="tool-call"]')
        pages = {
            "runs list (200 runs, 50 shown)": (f"{explorer}/", '[data-testid="run-row"]', "runs.html"),
            f"run page ({CALLS:,} calls, 100 shown)": (
                f"{explorer}/#/runs/{BIG_RUN}",
                '[data-testid="tool-call"]',
                "calls.html",
            ),
        }
        results: dict[str, float] = {"big_run_cold_ms": cold_ms}
        for (name, (url, selector, static)), key in zip(pages.items(), ("runs_list", "big_run"), strict=True):
            for _ in range(2):  # warm: connections, the browser's compiled modules
                first_render_ms(browser, url, selector)
                first_render_ms(browser, f"{baseline}/{static}", selector)
            page = summarize([first_render_ms(browser, url, selector) for _ in range(SAMPLES)])
            still = summarize([first_render_ms(browser, f"{baseline}/{static}", selector) for _ in range(SAMPLES)])
            ratio = page["median"] / still["median"]
            row(
                f"static page, same rows (baseline for {key})",
                f"{still['median']:.1f} ms",
                f"p90 {still['p90']:.1f} ms",
            )
            row(f"{name} p50", f"{page['median']:.1f} ms", f"p90 {page['p90']:.1f} ms; {ratio:.1f}x the static page")
            results |= {
                f"{key}_p50_ms": page["median"],
                f"{key}_baseline_p50_ms": still["median"],
                f"{key}_ratio": ratio,
            }
        row(f"{CALLS:,}-call run page, first visit (cold)", f"{cold_ms:.1f} ms", "its calls read and ordered once")
        return results
    finally:
        browser.quit()
        explorer_server.should_exit = baseline_server.should_exit = True
        stores.close()
        shutil.rmtree(state, ignore_errors=True)


if __name__ == "__main__":
    measure()
