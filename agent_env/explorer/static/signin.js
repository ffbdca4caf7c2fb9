// The answer to a one-time link: keep the key it hands over (once) in this tab, then open the explorer.
import { keep } from "./key.js";

const meta = document.querySelector('meta[name="agentenv-explorer-key"]');
if (meta && /^[A-Za-z0-9_-]{43}$/.test(meta.content)) keep(meta.content); // secrets.token_urlsafe(32)
if (meta) meta.remove();
location.replace("/"); // the sign-in answer leaves no entry in the tab's history
