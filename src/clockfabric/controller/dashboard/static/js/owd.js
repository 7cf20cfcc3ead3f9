// One-way delays: a heatmap of the delay each source measured (its worst path to that
// destination, or one path chosen), p50, p99, min or floor, newest or over a chosen window, as
// it is or as its excess over the path's floor; hover a cell for its values. The
// controller shapes it (/api/v1/dashboard/owd): up to 64 hosts, host x host; past that, blocks of
// hosts with consecutive names, each cell its block pair's worst pair: click (or Enter on) a block
// for its hosts. Click (or Enter on) a host cell for that pair's delays over the last 5 minutes, both
// directions and every path. The worst pairs are listed below, 50 a page, paged by the controller.
import { get } from "./api.js";
import { chart, COLOURS } from "./chart.js";
import { el, table } from "./dom.js";

export const topics = ["hosts"];
const COMPACT = 20;
const PAGE = 50;  // the controller's page of worst pairs  // past this many columns a cell is a coloured square, its value in its title
const WINDOWS = [["latest", "newest push"], ["1m", "last minute"], ["5m", "last 5 minutes"], ["15m", "last 15 minutes"],
  ["1h", "last hour"]];
let stat = "p50";
let span = "latest";  // the window: "latest" or a duration
let overFloor = false;
let path = "";
let block = null;  // [row block, column block] while one block pair is shown
let offset = 0;
let pair = null;  // [src, dst] whose series is shown
let refused = "";  // why the window chosen last was refused (too many delays for this fleet): said once

const us = (ns) => `${(ns / 1e3).toFixed(1)} µs`;

export async function render(refresh) {
  const query = { stat, window: span, over_floor: overFloor, path, offset,
    ...(block ? { src_block: block[0], dst_block: block[1] } : {}) };
  let owd;
  try {
    owd = await get("/api/v1/dashboard/owd", query);
  } catch (e) {
    if (e.status === 422 && span !== "latest") {  // a window too long for this fleet: back to the newest
      [span, refused] = ["latest", e.message];
      return render(refresh);
    }
    if (e.status !== 404 || !block) throw e;
    block = null;  // the fleet shrank under the block shown: back to every block
    return render(refresh);
  }
  if (owd.pending) {  // a large fleet's first reading of its delays: it goes on, and is asked again
    setTimeout(refresh, 2000);
    return el("section", { "aria-label": "One-way delays" }, el("p", { class: "muted", role: "status" }, owd.detail));
  }
  const notice = refused ? el("p", { class: "muted", role: "alert" }, `window refused: ${refused}`) : null;
  refused = "";
  const { lo_ns: lo, hi_ns: hi } = owd;
  const colour = (ns) => {
    const f = hi > lo ? (ns - lo) / (hi - lo) : 0;
    return `hsl(${(1 - f) * 120}, 70%, ${85 - f * 25}%)`;
  };
  const toolbar = el("div", { class: "toolbar" },
    el("label", { for: "owd-stat" }, "statistic"),
    el("select", { id: "owd-stat", onchange: (e) => {
      stat = e.target.value; overFloor = overFloor && stat !== "floor"; offset = 0; refresh(); } },
      ["p50", "p99", "min", "floor"].map((s) => el("option", { value: s, selected: s === stat }, s))),
    el("label", { for: "owd-window" }, "over"),
    el("select", { id: "owd-window", onchange: (e) => { span = e.target.value; offset = 0; refresh(); } },
      WINDOWS.map(([value, text]) => el("option", { value, selected: value === span }, text))),
    el("input", { type: "checkbox", id: "owd-over-floor", checked: overFloor, disabled: stat === "floor",
      onchange: (e) => { overFloor = e.target.checked; offset = 0; refresh(); } }),
    el("label", { for: "owd-over-floor" }, "excess over floor"),
    el("label", { for: "owd-path" }, "path"),
    el("select", { id: "owd-path", onchange: (e) => { path = e.target.value; offset = 0; refresh(); } },
      el("option", { value: "", selected: path === "" }, "worst of each pair"),
      (owd.planes || []).map((p) => el("option", { value: p, selected: p === path }, `plane ${p}: worst of its paths`)),
      owd.paths.map((p) => el("option", { value: p, selected: p === path }, p))),
    block ? el("button", { type: "button", id: "owd-all-blocks", onclick: () => { block = null; refresh(); } },
      "‹ every block") : null,
    el("span", { class: "muted" }, summary(owd)));
  if (!owd.pairs) return el("section", { "aria-label": "One-way delays" }, toolbar, notice,
    el("p", { class: "muted" }, path ? `no delays on path ${path}` : "no one-way delays pushed yet"));
  return el("section", { "aria-label": "One-way delays" }, toolbar, notice,
    el("div", { class: "scroll-x" }, grid(owd, colour, refresh)), pair ? await series(refresh) : null,
    el("h2", {}, `Worst pairs: ${owd.worst.total}`), worst(owd, colour, refresh));
}

function summary(owd) {
  const shown = owd.over_floor ? "excess over floor, µs" : "µs";
  // a fleet whose delays take seconds to read is read every few tens of seconds: say how old this is
  const age = owd.age_s >= 2 ? `; read ${Math.round(owd.age_s)} s ago` : "";
  const what = `${owd.hosts} hosts, ${owd.pairs} pairs, ${shown}${age}; rows: source, columns: destination`;
  if (owd.block) return `${what}; shown: ${owd.rows[0]}–${owd.rows.at(-1)} to ${owd.cols[0]}–${owd.cols.at(-1)}`;
  return owd.block_size > 1 ? `${what}; ${owd.blocks} blocks of ${owd.block_size} hosts, each cell its worst pair` : what;
}

function grid(owd, colour, refresh) {
  const blocks = owd.block_size > 1 && !owd.block;
  const compact = owd.cols.length > COMPACT;
  const rows = owd.rows.map((src, i) => el("tr", {}, el("th", { scope: "row" }, src), owd.cols.map((dst, j) => {
    const c = owd.cells[i][j];
    if (!c) return el("td", { class: "empty" }, "");
    const attrs = { style: `background: ${colour(c.ns)}` };
    if (blocks) {
      const open = () => { block = [i, j]; refresh(); };
      Object.assign(attrs, { "data-block": `${i},${j}`, role: "button", tabindex: 0,
        title: `${c.pairs} pairs; worst ${c.src} → ${c.dst}: ${us(c.ns)}`,
        "aria-label": `hosts ${src} to ${dst}: worst ${us(c.ns)}, ${c.pairs} pairs; open`,
        onclick: open, onkeydown: (e) => { if (e.key === "Enter" || e.key === " ") open(); } });
    } else {
      const open = () => { pair = [src, dst]; refresh(); };
      Object.assign(attrs, { "data-pair": `${src}|${dst}`, role: "button", tabindex: 0,
        title: Object.entries(c.paths).map(([p, ns]) => `${p}: ${us(ns)}`).join("\n"),
        "aria-label": `${src} to ${dst}: ${us(c.ns)}; its series`,
        onclick: open, onkeydown: (e) => { if (e.key === "Enter" || e.key === " ") open(); } });
    }
    return el("td", attrs, compact ? "" : (c.ns / 1e3).toFixed(1));
  })));
  return table([blocks ? "from \\ to (hosts)" : "from \\ to", ...owd.cols], rows,
    { class: `heatmap${compact ? " compact" : ""}`, "aria-label": "One-way delay heatmap" });
}

// The chosen pair's delays over the last 5 minutes: a panel per direction, a line per path.
async function series(refresh) {
  const [src, dst] = pair;
  const found = await get("/api/v1/dashboard/owd-pair", { src, dst, stat, since: "5m" });
  const close = el("button", { type: "button", onclick: () => { pair = null; refresh(); } }, "close");
  const head = el("h2", {}, `${src} ⇄ ${dst}, ${stat} over the last 5 minutes `, close);
  if (!found.t_ns.length) return el("div", { id: "owd-pair" }, head, el("p", { class: "muted" }, "no pushes in the window"));
  const lines = found.lines.map((l, i) => ({ ...l, name: `${l.from} → ${l.to} ${l.path}`, colour: COLOURS[i % COLOURS.length] }));
  const panel = (a, b) => ({ label: `${a} → ${b}`, quantity: "s", scale: 1e-9,
    lines: lines.filter((l) => l.from === a && l.to === b).map((l) => ({ name: l.name, values: l.ns, colour: l.colour })) });
  return el("div", { id: "owd-pair" }, head,
    chart(`owd ${src} ${dst} ${stat}`, found.t_ns, [panel(src, dst), panel(dst, src)], `${src} and ${dst} over time`));
}

function worst(owd, colour, refresh) {
  const { total, items } = owd.worst;
  const page = (to) => { offset = Math.max(0, to); refresh(); };
  const info = el("span", { class: "muted", "data-range": "Worst pairs" },
    total ? `${owd.worst.offset + 1}–${owd.worst.offset + items.length} of ${total}` : "none");
  const rows = items.map((p) => el("tr", {}, el("td", {}, p.src), el("td", {}, p.dst),
    el("td", { style: `background: ${colour(p.ns)}`, "data-worst": `${p.src}|${p.dst}` }, (p.ns / 1e3).toFixed(1)),
    el("td", {}, Object.entries(p.paths).map(([name, ns]) => `${name} ${(ns / 1e3).toFixed(1)}`).join(", "))));
  return el("div", { class: "paged" },
    el("div", { class: "toolbar" },
      el("button", { type: "button", "aria-label": "Worst pairs: previous page", disabled: offset === 0,
        onclick: () => page(offset - PAGE) }, "‹ prev"),
      el("button", { type: "button", "aria-label": "Worst pairs: next page",
        disabled: owd.worst.offset + items.length >= total, onclick: () => page(offset + PAGE) }, "next ›"),
      info),
    table(["from", "to", "µs", "each path, µs"], rows, { "aria-label": "Worst pairs" }));
}
