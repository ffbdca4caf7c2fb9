// Small helpers shared by the views: fetch the API, build elements (text only: data never becomes markup).
import { api } from "./key.js";

export async function getJSON(path) {
  const response = await api(path, { headers: { accept: "application/json" } });
  const body = await response.json();
  if (!response.ok) throw new Error(body.error || response.statusText);
  return body;
}

// Save what the API answers at `path` as a file called `name`. A link could not send the tab's key, so the
// page fetches it and hands the browser the bytes.
export async function download(path, name) {
  const response = await api(path);
  if (!response.ok) throw new Error((await response.json()).error || response.statusText);
  const url = URL.createObjectURL(await response.blob());
  const link = el("a", { href: url, download: name, hidden: true });
  document.body.append(link);
  link.click();
  link.remove();
  setTimeout(() => URL.revokeObjectURL(url), 60000); // after the browser has taken the file
}

// el("tr", {dataset: {testid: "run-row"}, className: "x"}, child, "text", ...)
export function el(tag, props = {}, ...children) {
  const node = document.createElement(tag);
  for (const [key, value] of Object.entries(props)) {
    if (value === undefined || value === null) continue;
    if (key === "dataset") Object.assign(node.dataset, value);
    else if (key === "on") for (const [event, fn] of Object.entries(value)) node.addEventListener(event, fn);
    else if (key in node) node[key] = value;
    else node.setAttribute(key, value);
  }
  for (const child of children.flat()) {
    if (child === undefined || child === null || child === false) continue;
    node.append(child instanceof Node ? child : String(child));
  }
  return node;
}

export function json(value, limit = 400) {
  const text = typeof value === "string" ? value : JSON.stringify(value);
  return text.length > limit ? text.slice(0, limit) + "…" : text;
}

export function ms(value) {
  if (value === null || value === undefined) return "";
  return value < 10000 ? `${Math.round(value)} ms` : `${(value / 1000).toFixed(1)} s`;
}

export function when(iso) {
  return iso ? new Date(iso).toLocaleString() : "";
}

// A virtual time in the world's own zone when it has one (else UTC), with the ISO value kept in `datetime`.
export function virtualTime(iso, zone) {
  let shown = iso;
  try {
    shown = new Date(iso).toLocaleString("sv-SE", { timeZone: zone || "UTC" }) + (zone ? ` ${zone}` : " UTC");
  } catch (_) {
    /* an unknown zone: the ISO value */
  }
  return el("time", { dateTime: iso, className: "vtime", title: iso }, shown);
}

export function score(value) {
  return value === null || value === undefined ? "" : value.toFixed(2);
}

export function status(value) {
  return el("span", { className: `status ${value}` }, value);
}

export function section(title, ...children) {
  return el("section", {}, el("h2", {}, title), ...children);
}

// node.replaceChildren, skipping absent children (null, undefined, false) as `el` does.
export function fill(node, ...children) {
  node.replaceChildren(...children.flat().filter((c) => c !== undefined && c !== null && c !== false));
}
