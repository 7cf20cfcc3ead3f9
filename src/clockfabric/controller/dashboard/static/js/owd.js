// One-way delays: a host x host heatmap of the newest delay each source measured (the worst of
// its paths to that destination), p50 or p99; hover a cell for every path's value.
import { get } from "./api.js";
import { el, table } from "./dom.js";

export const topics = ["hosts"];
let stat = "p50";

export async function render(refresh) {
  const owd = await get("/api/v1/owd", { stat });
  const cells = {};  // `${src}|${dst}` -> [{path, owd_ns}]
  for (const r of owd.items) (cells[`${r.src}|${r.dst}`] ||= []).push(r);
  const hosts = [...new Set(owd.items.flatMap((r) => [r.src, r.dst]))].sort();
  const values = owd.items.map((r) => r.owd_ns);
  const [lo, hi] = [Math.min(...values), Math.max(...values)];
  const colour = (ns) => {
    const f = hi > lo ? (ns - lo) / (hi - lo) : 0;
    return `hsl(${(1 - f) * 120}, 70%, ${85 - f * 25}%)`;
  };
  const choose = el("select", { id: "owd-stat", "aria-label": "Statistic",
    onchange: (e) => { stat = e.target.value; refresh(); } },
  ["p50", "p99", "min", "floor"].map((s) => el("option", { value: s, selected: s === stat }, s)));
  const rows = hosts.map((src) => el("tr", {}, el("th", { scope: "row" }, src), hosts.map((dst) => {
    const paths = cells[`${src}|${dst}`];
    if (!paths) return el("td", { class: "empty" }, "");
    const worst = Math.max(...paths.map((p) => p.owd_ns));
    return el("td", { style: `background: ${colour(worst)}`, "data-pair": `${src}|${dst}`,
      title: paths.map((p) => `${p.path}: ${(p.owd_ns / 1e3).toFixed(1)} µs`).join("\n") },
    (worst / 1e3).toFixed(1));
  })));
  return el("section", { "aria-label": "One-way delays" },
    el("div", { class: "toolbar" }, el("label", { for: "owd-stat" }, "statistic"), choose,
      el("span", { class: "muted" }, `µs, worst path of each pair; rows: source, columns: destination; ` +
        `${owd.items.length} paths`)),
    hosts.length ? table(["from \\ to", ...hosts], rows, { class: "heatmap", "aria-label": "One-way delay heatmap" })
      : el("p", { class: "muted" }, "no one-way delays pushed yet"));
}
