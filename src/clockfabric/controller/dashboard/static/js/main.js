// The page: tabs, the login form, and re-rendering the view on screen when the stream says its
// data changed (events, alerts and audits at once; pushes, which come every second, at most once a second).
import { Unauthorised, Unreachable, get, live, token } from "./api.js";
import * as audit from "./audit.js";
import { el } from "./dom.js";
import * as events from "./events.js";
import * as fabric from "./fabric.js";
import * as fleet from "./fleet.js";
import * as jobs from "./jobs.js";
import * as owd from "./owd.js";

const VIEWS = { fleet, fabric, owd, events, audit, jobs };
const PUSH_EVERY_MS = 1000;
const $ = (id) => document.getElementById(id);
let current = "fleet";
let stopStream = null;
let rendering = null;
let again = false;
let lastRender = 0;
let pushTimer = null;

function status(state, text) {
  $("status").dataset.state = state;
  $("status").textContent = text;
}

function login(reason, isError) {
  if (stopStream) stopStream();
  stopStream = null;
  token.clear();
  $("login-reason").textContent = reason;
  $("login-reason").toggleAttribute("data-error", Boolean(isError));
  if (!$("login-dialog").open) $("login-dialog").showModal();
  $("token").focus();
}

// One render at a time; a request during one runs once after it.
async function render() {
  if (rendering) { again = true; return rendering; }
  rendering = (async () => {
    const name = current;
    try {
      const node = await VIEWS[name].render(render);
      const focused = document.activeElement && document.activeElement.id;  // a filter being typed in
      if (name === current) $("view").replaceChildren(node);
      if (focused && $(focused) && $(focused) !== document.activeElement) $(focused).focus();
      $("view").dataset.view = name;
      $("view").dataset.rendered = String(Date.now());
    } catch (e) {
      if (e instanceof Unauthorised) login("Your token was refused (wrong or revoked): sign in again.", true);
      else if (e instanceof Unreachable) status("down", "controller unreachable: reconnecting…");
      else $("view").replaceChildren(el("p", { class: "state-down" }, `could not load this view: ${e.message}`));
    }
    lastRender = Date.now();
  })();
  await rendering;
  rendering = null;
  if (again) { again = false; await render(); }
}

function changed(topics) {
  const mine = VIEWS[current].topics;
  if (topics === null || topics.some((t) => t !== "hosts" && mine.includes(t))) {
    render();
  } else if (topics.includes("hosts") && mine.includes("hosts") && !pushTimer) {
    pushTimer = setTimeout(() => { pushTimer = null; render(); }, Math.max(0, lastRender + PUSH_EVERY_MS - Date.now()));
  }
}

function connect() {
  if (stopStream) stopStream();
  stopStream = live(changed, (state) => {
    if (state === "live") status("live", "live");
    else if (state === "down") status("down", "controller unreachable: reconnecting…");
    else login("Your token was refused (wrong or revoked): sign in again.", true);
  });
}

function show(name) {
  current = name;
  for (const tab of document.querySelectorAll("#tabs button")) {
    tab.setAttribute("aria-selected", String(tab.dataset.view === name));
  }
  history.replaceState(null, "", `#${name}`);
  if (token.get()) render();
}

async function signIn(value) {
  token.set(value);
  try {
    await get("/api/v1/fleet");
  } catch (e) {
    if (e instanceof Unauthorised) { login("That token was refused: check it and try again.", true); return; }
  }
  $("login-dialog").close();
  connect();
}

document.addEventListener("DOMContentLoaded", () => {
  for (const tab of document.querySelectorAll("#tabs button")) tab.addEventListener("click", () => show(tab.dataset.view));
  $("login").addEventListener("submit", (e) => { e.preventDefault(); signIn($("token").value.trim()); });
  $("login-dialog").addEventListener("cancel", (e) => e.preventDefault());  // nothing to see without a token
  $("sign-out").addEventListener("click", () => login("Signed out.", false));
  const start = location.hash.slice(1);
  if (VIEWS[start]) current = start;
  show(current);
  if (token.get()) connect();
  else login("Enter the fleet token or a read-only viewer token.", false);
});

// A page left for another (kept in the back-forward cache) lets its stream go: a browser allows six
// connections to one server, and each kept page holding one would starve the page on screen.
window.addEventListener("pagehide", () => { if (stopStream) { stopStream(); stopStream = null; } });
window.addEventListener("pageshow", (e) => { if (e.persisted && token.get()) { connect(); render(); } });
