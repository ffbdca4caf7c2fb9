// Eval runs: the list (#/evals), each with its aggregate, and one eval run's table (#/evals/ID): each run's
// status and score, the mean score and the pass rate; with k runs of each task, each task's runs, mean and
// pass@k and the share of tasks with a passing run (the server's `EvalTable`, as `eval run` prints it).
// A table still filling in is read again every few seconds.
import { el, getJSON, score, section, status, when } from "./dom.js";

function table(testid, columns, rows) {
  if (!rows.length) return el("p", { className: "dim" }, "none yet");
  return el(
    "table",
    { dataset: { testid } },
    el("thead", {}, el("tr", {}, columns.map(([title]) => el("th", {}, title)))),
    el("tbody", {}, rows.map((row) => el("tr", { dataset: { testid: `${testid}-row`, name: row.task || row.eval_run_id } }, columns.map(([, cell]) => el("td", {}, cell(row)))))),
  );
}

function aggregate(e) {
  const mean = e.mean === null ? "—" : score(e.mean);
  return `mean ${mean} · pass rate ${score(e.pass_rate)} (${e.passed}/${e.rows.length} passed, ${e.finished} finished)`;
}

// Each task over its k runs: its runs (links), passed/k, mean and pass@k, as the server scored them.
function perTask(e) {
  const runsOf = (t) => e.rows.filter((r) => r.task === t.task && r.version === t.version);
  const links = (t) =>
    el("span", {}, runsOf(t).map((r, i) => [i ? " " : "", el("a", { href: `#/runs/${encodeURIComponent(r.run_id)}`, title: r.status }, `${i + 1}`)]).flat());
  return el(
    "div",
    {},
    el("p", { dataset: { testid: "eval-pass-at-k" } }, `pass@${e.k} ${score(e.pass_at_k)} (tasks with a passing run)`),
    table(
      "eval-per-task",
      [
        ["task", (t) => t.task],
        ["version", (t) => t.version],
        ["runs", links],
        ["passed", (t) => `${t.passed}/${t.runs}`],
        ["mean", (t) => score(t.mean)],
        [`pass@${e.k}`, (t) => (t.pass_at_k ? "yes" : "no")],
      ],
      e.tasks,
    ),
  );
}

export async function evalsView(root) {
  root.replaceChildren(el("h1", {}, "Evals"), el("p", { className: "dim" }, "loading…"));
  const body = await getJSON("/api/evals");
  root.replaceChildren(
    el("h1", {}, "Evals"),
    el("p", { className: "dim" }, "Run a bundle's evals with `agent-env run BUNDLE` (or `--eval NAME`)."),
    table(
      "evals",
      [
        ["eval run", (e) => el("a", { href: `#/evals/${encodeURIComponent(e.eval_run_id)}` }, e.eval_run_id)],
        ["eval", (e) => `${e.eval} v${e.version}`],
        ["finished", (e) => e.finished],
        ["passed", (e) => e.passed],
        ["mean", (e) => score(e.mean)],
        ["pass rate", (e) => score(e.pass_rate)],
        ["pass@k", (e) => (e.k > 1 ? `${score(e.pass_at_k)} (k=${e.k})` : "—")],
        ["started", (e) => when(e.started_at)],
      ],
      body.evals,
    ),
  );
}

export function evalView(root, id) {
  let timer = null;
  async function load() {
    const e = await getJSON(`/api/evals/${encodeURIComponent(id)}`);
    root.replaceChildren(
      el("h1", {}, `eval ${e.eval} v${e.version}`),
      el("p", { className: "dim" }, `${e.eval_run_id} · ${e.source} · started ${when(e.started_at)}`),
      el("p", { dataset: { testid: "eval-aggregate" } }, aggregate(e)),
      e.k > 1 && section("Per task", perTask(e)),
      section(
        e.k > 1 ? "Runs" : "Tasks",
        table(
          "eval-tasks",
          [
            ["task", (r) => r.task],
            ["version", (r) => r.version],
            ["status", (r) => status(r.status)],
            ["score", (r) => score(r.score)],
            ["run", (r) => el("a", { href: `#/runs/${encodeURIComponent(r.run_id)}` }, r.run_id)],
          ],
          e.rows,
        ),
      ),
    );
    if (e.finished < e.rows.length) timer = setTimeout(() => load().catch(show), 3000);
  }
  function show(err) {
    root.replaceChildren(el("p", { className: "error" }, err.message));
  }
  load().catch(show);
  return () => clearTimeout(timer);
}
