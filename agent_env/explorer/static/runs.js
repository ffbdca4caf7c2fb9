// The runs list: filters, a page at a time, refreshed while it is on screen.
import { el, getJSON, score, status, when } from "./dom.js";

const STATUSES = ["", "running", "passed", "failed", "error", "cancelled"];
const REFRESH_MS = 3000;

export function runsView(root, params) {
  const filters = {
    task: params.get("task") || "",
    status: params.get("status") || "",
    min_score: params.get("min_score") || "",
    max_score: params.get("max_score") || "",
    since: params.get("since") || "",
  };
  const body = el("tbody");
  const more = el("button", { type: "button", hidden: true }, "more");
  const note = el("p", { className: "dim" });
  let next = null;

  const input = (name, props) =>
    el("input", { name, value: filters[name], ...props, on: { change: (e) => apply(name, e.target.value) } });
  const form = el(
    "form",
    { className: "filters", on: { submit: (e) => e.preventDefault() } },
    el("label", {}, "task ", input("task", { placeholder: "any", size: 14 })),
    el(
      "label",
      {},
      "status ",
      el(
        "select",
        { name: "status", on: { change: (e) => apply("status", e.target.value) } },
        STATUSES.map((s) => el("option", { value: s, selected: s === filters.status }, s || "any")),
      ),
    ),
    el("label", {}, "score ≥ ", input("min_score", { type: "number", min: 0, max: 1, step: 0.05, size: 4 })),
    el("label", {}, "score ≤ ", input("max_score", { type: "number", min: 0, max: 1, step: 0.05, size: 4 })),
    el("label", {}, "since ", input("since", { type: "datetime-local" })),
  );

  function apply(name, value) {
    filters[name] = value;
    const query = new URLSearchParams(Object.entries(filters).filter(([, v]) => v));
    location.hash = `#/?${query}`;
  }

  function query(cursor) {
    const q = new URLSearchParams(Object.entries(filters).filter(([, v]) => v));
    if (filters.since) q.set("since", new Date(filters.since).toISOString());
    q.set("limit", "50");
    if (cursor) q.set("cursor", cursor);
    return `/api/runs?${q}`;
  }

  function row(run) {
    return el(
      "tr",
      { dataset: { testid: "run-row", runId: run.run_id, status: run.status } },
      el("td", {}, el("a", { href: `#/runs/${encodeURIComponent(run.run_id)}` }, run.run_id)),
      el("td", {}, `${run.task_id} v${run.task_version}`, run.episode ? el("span", { className: "tag" }, "episode") : null),
      el("td", {}, status(run.status)),
      el("td", { className: "num" }, score(run.score)),
      el("td", {}, when(run.started_at)),
      el("td", { className: "num" }, run.took_s === null ? "" : `${run.took_s.toFixed(2)} s`),
    );
  }

  async function load(cursor) {
    const page = await getJSON(query(cursor));
    if (!cursor) body.replaceChildren();
    body.append(...page.runs.map(row));
    next = page.next;
    more.hidden = !next;
    note.textContent = body.children.length ? "" : "no runs match — try `agent-env run hello`";
  }

  more.addEventListener("click", () => load(next));
  root.replaceChildren(
    el("h1", {}, "Runs"),
    form,
    el(
      "table",
      { className: "runs", dataset: { testid: "runs" } },
      el("thead", {}, el("tr", {}, ["run", "task", "status", "score", "started", "took"].map((h) => el("th", {}, h)))),
      body,
    ),
    note,
    more,
  );
  load(null).catch((e) => (note.textContent = e.message));
  // Live: the first page again while nothing further was loaded (a longer list is the reader's to keep).
  const timer = setInterval(() => {
    if (!document.hidden && body.children.length <= 50) load(null).catch(() => {});
  }, REFRESH_MS);
  return () => clearInterval(timer);
}
