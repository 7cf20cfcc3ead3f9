// One-way delays: a host x host heatmap of the newest delay each source measured (the worst of
// its paths to that destination), p50 or p99; hover a cell for every path's value. Past
// MAX_GRID hosts a grid would not fit a screen (nor a tab's memory): the pairs, worst first, a
// page at a time.
import { get } from "./api.js";
import { el, paged, table } from "./dom.js";

export const topics = ["hosts"];
const MAX_GRID = 64;
let stat = "p50";

export async function render(refresh) {
  const owd = await get("/api/v1/owd", { stat });
  const cells = {};  // `${src}|${dst}` -> [{path, owd_ns}]
  for (const r of owd.items) (cells[`${r.src}|${r.dst}`] ||= []).push(r);
  const hosts = [...new Set(owd.items.flatMap((r) => [r.src, r.dst]))].sort();
  let [lo, hi] = [Infinity, -Infinity];
  for (const r of owd.items) { lo = Math.min(lo, r.owd_ns); hi = Math.max(hi, r.owd_ns); }
  const colour = (ns) => {
    const f = hi > lo ? (ns - lo) / (hi - lo) : 0;
    return `hsl(${(1 - f) * 120}, 70%, ${85 - f * 25}%)`;
  };
  const worst = (paths) => Math.max(...paths.map((p) => p.owd_ns));
  const title = (paths) => paths.map((p) => `${p.path}: ${(p.owd_ns / 1e3).toFixed(1)} µs`).join("\n");
  const choose = el("select", { id: "owd-stat", "aria-label": "Statistic",
    onchange: (e) => { stat = e.target.value; refresh(); } },
  ["p50", "p99", "min", "floor"].map((s) => el("option", { value: s, selected: s === stat }, s)));
  let body;
  if (!hosts.length) {
    body = el("p", { class: "muted" }, "no one-way delays pushed yet");
  } else if (hosts.length <= MAX_GRID) {
    const rows = hosts.map((src) => el("tr", {}, el("th", { scope: "row" }, src), hosts.map((dst) => {
      const paths = cells[`${src}|${dst}`];
      if (!paths) return el("td", { class: "empty" }, "");
      return el("td", { style: `background: ${colour(worst(paths))}`, "data-pair": `${src}|${dst}`, title: title(paths) },
        (worst(paths) / 1e3).toFixed(1));
    })));
    body = table(["from \\ to", ...hosts], rows, { class: "heatmap", "aria-label": "One-way delay heatmap" });
  } else {
    const pairs = Object.entries(cells).map(([key, paths]) => ({ key, paths, worst: worst(paths) }))
      .sort((a, b) => b.worst - a.worst);
    body = paged("One-way delays by pair", ["from", "to", "µs (worst path)", "paths"], pairs, (p) => {
      const [src, dst] = p.key.split("|");
      return el("tr", {}, el("td", {}, src), el("td", {}, dst),
        el("td", { style: `background: ${colour(p.worst)}`, "data-pair": p.key, title: title(p.paths) },
          (p.worst / 1e3).toFixed(1)), el("td", {}, p.paths.length));
    }, { size: 50, match: (p, q) => p.key.toLowerCase().includes(q) });
  }
  return el("section", { "aria-label": "One-way delays" },
    el("div", { class: "toolbar" }, el("label", { for: "owd-stat" }, "statistic"), choose,
      el("span", { class: "muted" }, hosts.length <= MAX_GRID
        ? `µs, worst path of each pair; rows: source, columns: destination; ${owd.items.length} paths`
        : `${hosts.length} hosts, ${owd.items.length} paths: the pairs, worst first`)),
    body);
}
