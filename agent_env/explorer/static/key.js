// This tab's key to the explorer's API (agent_env/explorer/auth.py says why a cookie is not enough).
//
// The sign-in page hands it over once and the tab keeps it in sessionStorage: storage is scoped by origin,
// port included, so no other server on 127.0.0.1 can read it (cookies are scoped by host only). Every API
// request sends it in a header, beside the session cookie. A tab without it (a new tab, a bookmark, a
// middle-click) asks the explorer's other open tabs over a BroadcastChannel (same origin only); with none
// open, or once the session has ended, it shows the sign-in page: a new one-time link gets in again.

const STORE = "agentenv-explorer-key";
const HEADER = "x-agentenv-explorer-key";
const ASK_MS = 500; // how long a tab waits for another tab's answer
const channel = new BroadcastChannel("agentenv-explorer");
let asking = null; // the pending ask, shared by the requests that need it
let answer = null; // resolves it

channel.addEventListener("message", ({ data }) => {
  if (!data || typeof data !== "object") return;
  if (data.type === "ask" && key()) channel.postMessage({ type: "key", key: key() });
  if (data.type === "key" && typeof data.key === "string") {
    // a fresh sign-in in another tab replaced the session cookie: its key is the one that works now
    if (data.fresh || answer) sessionStorage.setItem(STORE, data.key);
    if (answer) answer(data.key);
  }
});

export function key() {
  return sessionStorage.getItem(STORE);
}

// A key just handed over by a sign-in: this tab's, and every open tab's (the new cookie is theirs too).
export function keep(value) {
  sessionStorage.setItem(STORE, value);
  channel.postMessage({ type: "key", key: value, fresh: true });
}

function ask() {
  if (!asking) {
    asking = new Promise((resolve) => {
      const done = (value) => {
        answer = null;
        asking = null;
        resolve(value);
      };
      answer = done;
      setTimeout(() => answer === done && done(null), ASK_MS);
      channel.postMessage({ type: "ask" });
    });
  }
  return asking;
}

function forget(value) {
  if (key() === value) sessionStorage.removeItem(STORE);
}

function send(path, init, value) {
  return fetch(path, { ...init, credentials: "same-origin", headers: { ...(init.headers || {}), [HEADER]: value } });
}

// fetch() for the API, with this tab's key. Without a key that works: the sign-in page.
export async function api(path, init = {}) {
  let value = key() || (await ask());
  for (let attempt = 0; value && attempt < 2; attempt++) {
    const response = await send(path, init, value);
    if (response.status !== 401) return response;
    forget(value); // the session ended, or another sign-in replaced it: perhaps another tab holds its key
    const other = await ask();
    value = other !== value ? other : null;
  }
  location.replace("/login"); // the server's sign-in page
  throw new Error("not signed in");
}
