// The registry's envs, agents, tasks and evals, and the runs a trainer played in (episodes).
import { el, getJSON, score, section, status, when } from "./dom.js";

function table(testid, columns, rows) {
  if (!rows.length) return el("p", { className: "dim" }, "none yet");
  return el(
    "table",
    { dataset: { testid } },
    el("thead", {}, el("tr", {}, columns.map(([title]) => el("th", {}, title)))),
    el("tbody", {}, rows.map((row) => el("tr", { dataset: { testid: `${testid}-row`, name: row.name || row.run_id } }, columns.map(([, cell]) => el("td", {}, cell(row)))))),
  );
}

export async function registryView(root) {
  root.replaceChildren(el("h1", {}, "Registry"), el("p", { className: "dim" }, "loading…"));
  const [registry, episodes] = await Promise.all([getJSON("/api/registry"), getJSON("/api/episodes")]);
  const item = [
    ["name", (r) => r.name],
    ["latest", (r) => r.latest],
    ["versions", (r) => r.versions],
    ["description", (r) => r.description],
    ["pushed", (r) => when(r.pushed_at)],
  ];
  root.replaceChildren(
    el("h1", {}, "Registry"),
    el("p", { className: "dim" }, "Push a bundle with `agent-env registry push FOLDER`."),
    section("Environments", table("registry-envs", item, registry.envs)),
    section("Agents", table("registry-agents", item, registry.agents)),
    section("Tasks", table("registry-tasks", item, registry.tasks)),
    section("Evals", table("registry-evals", item, registry.evals)),
    section(
      "Trainer episodes",
      table(
        "episodes",
        [
          ["run", (r) => el("a", { href: `#/runs/${encodeURIComponent(r.run_id)}` }, r.run_id)],
          ["task", (r) => r.task_id],
          ["status", (r) => status(r.status)],
          ["reward", (r) => score(r.score)],
          ["started", (r) => when(r.started_at)],
        ],
        episodes.episodes,
      ),
    ),
  );
}
