// The explorer's page: a router over the hash (#/, #/runs/ID, #/evals, #/evals/ID, #/registry) and the views it shows.
import { el } from "./dom.js";
import { evalsView, evalView } from "./evals.js";
import { registryView } from "./registry.js";
import { runView } from "./run.js";
import { runsView } from "./runs.js";

const root = document.getElementById("view");
let stop = null; // the shown view's timers

function route() {
  if (stop) stop();
  stop = null;
  const [path, query] = (location.hash.slice(1) || "/").split("?");
  const params = new URLSearchParams(query || "");
  const run = path.match(/^\/runs\/(.+)$/);
  const evalRun = path.match(/^\/evals\/(.+)$/);
  try {
    if (run) stop = runView(root, decodeURIComponent(run[1]));
    else if (evalRun) stop = evalView(root, decodeURIComponent(evalRun[1]));
    else if (path === "/evals") evalsView(root).catch(show);
    else if (path === "/registry") registryView(root).catch(show);
    else stop = runsView(root, params);
  } catch (e) {
    show(e);
  }
}

function show(e) {
  root.replaceChildren(el("p", { className: "error" }, e.message));
}

window.addEventListener("hashchange", route);
route();
