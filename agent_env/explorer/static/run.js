// One run: its DAG, scores, the world's timeline, every tool call (a page at a time), transcripts, artifacts.
import { download, el, fill, getJSON, json, ms, score, section, status, virtualTime, when } from "./dom.js";

const CALL_PAGE = 100;
const WORLD_PAGE = 100;
const REFRESH_MS = 2000;

export function runView(root, runId) {
  const base = `/api/runs/${encodeURIComponent(runId)}`;
  const head = el("div");
  const dag = el("div", { className: "dag", dataset: { testid: "dag" } });
  const stepDetail = el("div", { className: "step-detail" });
  const criteria = el("div");
  const timeline = pagedList("world-events", WORLD_PAGE, loadWorld);
  const calls = pagedTable(loadCalls);
  const transcripts = el("div");
  const files = el("ul", { className: "artifacts" });
  const callFilters = { agent: "", refused: "" };
  let zone = null;
  let shownStep = null;

  root.replaceChildren(
    head,
    section("Steps", dag, stepDetail),
    section("Scores", criteria),
    section("World timeline (virtual time)", timeline.node),
    section("Tool calls", calls.filters, calls.node),
    section("Conversations", transcripts),
    section("Artifacts", files),
  );

  async function refresh() {
    const run = await getJSON(base);
    zone = run.world && run.world.clock ? run.world.clock.zone : null;
    renderHead(run);
    renderDag(run.steps);
    renderScores(run.steps);
    renderTranscripts(run.steps);
    renderFiles(run.artifacts);
    return run;
  }

  function renderHead(run) {
    const clock = run.world && run.world.clock;
    fill(
      head,
      el("h1", {}, `${run.task_id} v${run.task_version} `, status(run.status), run.live ? el("span", { className: "tag" }, "live") : null),
      el("p", { className: "dim" }, run.description),
      el(
        "dl",
        { className: "facts" },
        el("dt", {}, "run"), el("dd", { dataset: { testid: "run-id" } }, run.run_id),
        el("dt", {}, "score"), el("dd", {}, score(run.score)),
        el("dt", {}, "started"), el("dd", {}, when(run.started_at)),
        el("dt", {}, "took"), el("dd", {}, run.took_s === null ? "running" : `${run.took_s.toFixed(2)} s`),
        clock ? [el("dt", {}, "world time"), el("dd", {}, virtualTime(clock.now, clock.zone), ` (${clock.mode})`)] : null,
        run.temporal_url
          ? [el("dt", {}, "Temporal"), el("dd", {}, el("a", { href: run.temporal_url, target: "_blank", rel: "noopener noreferrer", dataset: { testid: "temporal-link" } }, "this run in the Temporal UI"))]
          : null,
      ),
      run.error ? el("p", { className: "error" }, run.error) : null,
    );
  }

  function renderDag(steps) {
    const layers = [];
    for (const step of steps) (layers[step.depth] ||= []).push(step);
    dag.replaceChildren(
      ...layers.map((layer, depth) =>
        el(
          "div",
          { className: "layer", dataset: { depth } },
          (layer || []).map((step) =>
            el(
              "button",
              {
                type: "button",
                className: `step ${step.status}`,
                dataset: { testid: "step", stepId: step.id, status: step.status },
                title: step.depends_on.length ? `after ${step.depends_on.join(", ")}` : "first",
                on: { click: () => showStep(step) },
              },
              el("strong", {}, step.id),
              el("span", { className: "dim" }, step.type),
              el("span", {}, step.status, step.took_ms !== null ? ` · ${ms(step.took_ms)}` : ""),
              step.score ? el("span", {}, `score ${score(step.score.value)}`) : null,
            ),
          ),
        ),
      ),
    );
    if (shownStep) showStep(steps.find((s) => s.id === shownStep.id));
  }

  function showStep(step) {
    shownStep = step;
    if (!step) return stepDetail.replaceChildren();
    fill(
      stepDetail,
      el("h3", {}, `${step.id} (${step.type})`),
      el("p", {}, `${step.status}, ${step.attempts} attempt(s)`, step.started_at ? `, started ${when(step.started_at)}` : "", step.took_ms !== null ? `, took ${ms(step.took_ms)}` : ""),
      step.error ? el("p", { className: "error" }, step.error) : null,
      el("pre", { dataset: { testid: "step-outputs" } }, JSON.stringify(step.outputs, null, 1)),
    );
  }

  function renderScores(steps) {
    const scored = steps.filter((s) => s.score);
    criteria.replaceChildren(
      ...(scored.length ? [] : [el("p", { className: "dim" }, "no step scored this run (yet)")]),
      ...scored.map((s) =>
        el(
          "div",
          { className: "score" },
          el("h3", {}, `${s.id}: ${score(s.score.value)} (threshold ${score(s.score.threshold)}) `, status(s.score.passed ? "passed" : "failed")),
          el(
            "ul",
            {},
            s.score.criteria.map((c) =>
              el(
                "li",
                { className: c.passed ? "pass" : "fail", dataset: { testid: "criterion", name: c.name, passed: String(c.passed) } },
                `${c.passed ? "✓" : "✗"} ${c.name}`,
                c.weight !== 1 ? el("span", { className: "dim" }, ` (weight ${c.weight})`) : null,
                c.detail ? el("span", { className: "reason" }, `: ${c.detail}`) : null,
              ),
            ),
          ),
        ),
      ),
    );
  }

  function renderTranscripts(steps) {
    const prompts = steps.filter((s) => s.transcript);
    if (transcripts.dataset.steps === prompts.map((s) => s.id).join(",")) return;
    transcripts.dataset.steps = prompts.map((s) => s.id).join(",");
    transcripts.replaceChildren(
      ...(prompts.length ? [] : [el("p", { className: "dim" }, "no conversations in this run")]),
      ...prompts.map((s) => {
        const box = el("div", { className: "transcript", dataset: { testid: "transcript", stepId: s.id } });
        const open = el("button", { type: "button", on: { click: () => loadTranscript(s.id, box) } }, `show ${s.id}'s conversation`);
        box.append(open);
        return box;
      }),
    );
  }

  async function loadTranscript(stepId, box) {
    const doc = await getJSON(`${base}/transcripts/${encodeURIComponent(stepId)}`);
    box.replaceChildren(
      el("h3", {}, `${stepId}: ${doc.agent}`, doc.partner ? ` and ${doc.partner}` : "", ` (${doc.tool_calls} tool calls, ${doc.refused} refused)`),
      ...doc.messages.map((m) =>
        el("div", { className: `message ${m.side}`, dataset: { testid: "message", side: m.side } }, el("strong", {}, m.speaker || m.side), el("p", {}, m.text)),
      ),
    );
  }

  function renderFiles(list) {
    files.replaceChildren(
      ...(list.length ? [] : [el("li", { className: "dim" }, "nothing kept")]),
      ...list.map((a) => {
        const item = el("li");
        const path = `${base}/artifacts/${a.path.split("/").map(encodeURIComponent).join("/")}`;
        const save = () => download(path, a.path.split("/").pop()).catch((e) => item.append(el("span", { className: "error" }, ` ${e.message}`)));
        item.append(el("button", { type: "button", className: "link", title: "download", on: { click: save }, dataset: { testid: "artifact" } }, a.path));
        return item;
      }),
    );
  }

  async function loadWorld(offset) {
    const page = await getJSON(`${base}/world?offset=${offset}&limit=${WORLD_PAGE}`);
    const items = page.events.map((e) =>
      el(
        "li",
        { className: `event ${e.kind}`, dataset: { testid: "world-event", kind: e.kind, seq: e.seq, virtualTime: e.virtual_time, trigger: e.trigger || "" } },
        virtualTime(e.virtual_time, zone),
        el("span", { className: "kind" }, e.kind),
        el("details", {}, el("summary", {}, e.summary), el("pre", {}, JSON.stringify(e.detail, null, 1))),
      ),
    );
    const dropped = Object.values(page.dropped || {}).reduce((a, b) => a + b, 0);
    return { items, total: page.total, note: dropped ? `${dropped} earlier events were dropped from the log` : "" };
  }

  async function loadCalls(offset) {
    const q = new URLSearchParams({ offset, limit: CALL_PAGE });
    if (callFilters.agent) q.set("agent", callFilters.agent);
    if (callFilters.refused) q.set("refused", callFilters.refused);
    const page = await getJSON(`${base}/calls?${q}`);
    updateAgents(page.agents);
    const items = page.calls.map((c) =>
      el(
        "tr",
        {
          className: c.refused ? "refused" : "",
          title: [c.via && `via ${c.via}`, c.cause, c.instance].filter(Boolean).join(" · "),
          dataset: { testid: "tool-call", refused: String(c.refused), n: c.n, agent: c.agent, tool: c.tool },
        },
        el("td", { className: "num" }, c.n),
        el("td", {}, c.virtual_time ? virtualTime(c.virtual_time, zone) : ""),
        el("td", {}, when(c.real_time)),
        el("td", {}, c.agent || ""),
        el("td", {}, c.role || ""),
        el("td", {}, c.tool),
        el("td", { className: "args" }, json(c.arguments || {}, 200)),
        el("td", { className: "outcome" }, c.refused ? `refused: ${c.error}` : "error" in c ? `error: ${json(c.error, 200)}` : json(c.result, 200)),
        el("td", { className: "num" }, c.duration_ms !== undefined ? c.duration_ms.toFixed(1) : ""),
      ),
    );
    const missing = page.unavailable.length ? ` (unavailable now: ${page.unavailable.join(", ")})` : "";
    return { items, total: page.total, note: `${page.refused} refused in all${missing}` };
  }

  const agentSelect = el("select", { on: { change: (e) => { callFilters.agent = e.target.value; calls.load(0); } } }, el("option", { value: "" }, "any agent"));
  const refusedSelect = el(
    "select",
    { on: { change: (e) => { callFilters.refused = e.target.value; calls.load(0); } } },
    el("option", { value: "" }, "refused or not"), el("option", { value: "true" }, "refused only"), el("option", { value: "false" }, "not refused"),
  );
  calls.filters.append(agentSelect, refusedSelect);
  function updateAgents(agents) {
    const known = [...agentSelect.options].map((o) => o.value);
    for (const a of agents) if (!known.includes(a)) agentSelect.append(el("option", { value: a }, a));
  }

  refresh()
    .then(() => Promise.all([timeline.load(0), calls.load(0)]))
    .catch((e) => head.replaceChildren(el("p", { className: "error" }, e.message)));
  const timer = setInterval(async () => {
    if (document.hidden || head.querySelector(".status.running") === null) return;
    const run = await refresh().catch(() => null);
    if (run) {
      timeline.reload();
      calls.reload();
    }
  }, REFRESH_MS);
  return () => clearInterval(timer);
}

// A list that shows one page at a time, with previous/next (a 10,000-call run renders 100 rows).
function pager(container, pageSize, loader) {
  let offset = 0;
  const info = el("span", { className: "dim" });
  const prev = el("button", { type: "button", on: { click: () => load(Math.max(0, offset - pageSize)) } }, "previous");
  const next = el("button", { type: "button", on: { click: () => load(offset + pageSize) } }, "next");
  const nav = el("div", { className: "pager" }, prev, next, info);
  async function load(at) {
    offset = at;
    const page = await loader(at);
    container.replaceChildren(...page.items);
    prev.disabled = offset === 0;
    next.disabled = offset + pageSize >= page.total;
    const last = Math.min(offset + page.items.length, page.total);
    info.textContent = page.total ? ` ${offset + 1}–${last} of ${page.total}. ${page.note}` : ` none. ${page.note}`;
  }
  return { nav, load, reload: () => load(offset).catch(() => {}) };
}

function pagedList(testid, pageSize, loader) {
  const list = el("ol", { className: "timeline", dataset: { testid } });
  const p = pager(list, pageSize, loader);
  return { node: el("div", {}, p.nav, list), load: p.load, reload: p.reload };
}

function pagedTable(loader) {
  const body = el("tbody");
  const p = pager(body, CALL_PAGE, loader);
  const head = el("thead", {}, el("tr", {}, ["#", "virtual time", "real time", "agent", "role", "tool", "arguments", "outcome", "ms"].map((h) => el("th", {}, h))));
  return {
    filters: el("div", { className: "filters" }),
    node: el("div", {}, p.nav, el("table", { className: "calls", dataset: { testid: "tool-calls" } }, head, body)),
    load: p.load,
    reload: p.reload,
  };
}
