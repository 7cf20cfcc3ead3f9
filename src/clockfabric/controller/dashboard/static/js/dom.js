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
