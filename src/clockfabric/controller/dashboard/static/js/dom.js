// Building the page. Every string goes in as text (textContent), never as markup: host names,
// alert messages and findings come from agents and reports, so nothing here can inject HTML.
const SVG = "http://www.w3.org/2000/svg";

export function el(tag, attrs = {}, ...children) {
  return fill(document.createElement(tag), attrs, children);
}

export function svg(tag, attrs = {}, ...children) {
  return fill(document.createElementNS(SVG, tag), attrs, children);
}

function fill(node, attrs, children) {
  for (const [key, value] of Object.entries(attrs)) {
    if (value === undefined || value === null || value === false) continue;
    if (key.startsWith("on")) node.addEventListener(key.slice(2), value);
    // through CSSOM: the page's CSP (style-src 'self') refuses a style attribute set as markup
    else if (key === "style") node.style.cssText = String(value);
    else node.setAttribute(key, value === true ? "" : String(value));
  }
  for (const child of children.flat()) {
    if (child === undefined || child === null || child === false) continue;
    node.append(child instanceof Node ? child : document.createTextNode(String(child)));
  }
  return node;
}

export function table(headers, rows, attrs = {}) {
  return el("table", attrs,
    el("thead", {}, el("tr", {}, headers.map((h) => el("th", { scope: "col" }, h)))),
    el("tbody", {}, rows));
}

export function ago(tNs) {
  const s = Math.max(0, Date.now() / 1000 - tNs / 1e9);
  if (s < 90) return `${s.toFixed(0)} s ago`;
  if (s < 5400) return `${(s / 60).toFixed(0)} min ago`;
  return `${(s / 3600).toFixed(1)} h ago`;
}

export function clock(tNs) {
  const d = new Date(tNs / 1e6);
  return d.toISOString().slice(11, 23);
}

export function cls(text) {
  return String(text).replace(/[^a-z0-9]+/gi, "-").toLowerCase();
}

// A list shown a page at a time, so a fleet of thousands never puts thousands of rows in the
// page: only the page on screen is in the DOM. Its page and filter outlive re-renders.
const pages = new Map();  // label -> { page, filter }

export function paged(label, headers, items, rowOf, { size = 50, match = null } = {}) {
  const state = pages.get(label) || { page: 0, filter: "" };
  pages.set(label, state);
  const body = el("tbody");
  const info = el("span", { class: "muted", "data-range": label });
  const prev = el("button", { type: "button", "aria-label": `${label}: previous page` }, "‹ prev");
  const next = el("button", { type: "button", "aria-label": `${label}: next page` }, "next ›");
  const fill = () => {
    const wanted = state.filter.toLowerCase();
    const shown = match && wanted ? items.filter((item) => match(item, wanted)) : items;
    const last = Math.max(0, Math.ceil(shown.length / size) - 1);
    state.page = Math.min(state.page, last);
    const first = state.page * size;
    body.replaceChildren(...shown.slice(first, first + size).map(rowOf));
    info.textContent = shown.length ? `${first + 1}–${Math.min(first + size, shown.length)} of ${shown.length}` : "none";
    prev.disabled = state.page === 0;
    next.disabled = state.page >= last;
  };
  prev.addEventListener("click", () => { state.page -= 1; fill(); });
  next.addEventListener("click", () => { state.page += 1; fill(); });
  const search = match ? el("input", { type: "search", id: `filter-${cls(label)}`, placeholder: "filter",
    "aria-label": `${label}: filter`, value: state.filter,
    oninput: (e) => { state.filter = e.target.value; state.page = 0; fill(); } }) : null;
  fill();
  const paging = items.length > size || state.filter;
  return el("div", { class: "paged" },
    paging || search ? el("div", { class: "toolbar" }, search, paging ? [prev, next] : null, info) : null,
    el("table", { "aria-label": label },
      el("thead", {}, el("tr", {}, headers.map((h) => el("th", { scope: "col" }, h)))), body));
}

export function rate(bps) {
  if (bps === null || bps === undefined) return "–";
  return bps >= 1e9 ? `${(bps / 1e9).toFixed(2)} Gbit/s` : `${(bps / 1e6).toFixed(1)} Mbit/s`;
}

export function micros(us) {
  return us === null || us === undefined ? "–" : `${us.toFixed(0)} µs`;
}
