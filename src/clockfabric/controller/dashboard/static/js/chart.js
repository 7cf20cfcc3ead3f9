// Time series as uPlot panels stacked on one time axis (local wall time), so a drop in one panel
// lines up with a rise in another. The cursor reads every panel's values at one instant in each
// legend; a drag zooms every panel to the dragged time span, a double-click resets.
//
// Views re-render every second: a chart asked for again under the same id keeps its uPlot (and
// so its zoom, its cursor and a drag under way) and only takes the new data. More than MAX_GAP
// nulls in a row break a line (no readings, not zero); fewer are bridged (a push landing in the
// next second). A reading with gaps on both sides is drawn as a dot.
import uPlot from "../vendor/uplot/uPlot.esm.js";
import { el } from "./dom.js";

const MAX_GAP = 3;
const HEIGHT = 170, AXIS = 84, WIDTH = 1200;
const TIME_STEPS = [1, 2, 5, 10, 15, 30, 60, 120, 300, 600, 900, 1800, 3600];  // s between time ticks: whole seconds
export const COLOURS = ["#1f6feb", "#d62d20", "#2e9e4f", "#f28c18", "#8250df", "#0a8a8a", "#bf3989", "#6e7781"];
// the units a quantity is shown in, largest first: a panel takes the largest its top value reaches
const UNITS = {
  "bit/s": [[1e9, "Gbit/s"], [1e6, "Mbit/s"], [1e3, "kbit/s"], [1, "bit/s"]],
  s: [[1, "s"], [1e-3, "ms"], [1e-6, "µs"], [1e-9, "ns"]],
};
const charts = new Map();  // id -> { node, plots, shape, zoom }: the charts the page may still show

// panels: [{ label, quantity: "bit/s" | "s", scale, lines: [{ name, values, colour, emphasis }] }],
// each value times `scale` in the quantity's unit, every values list on tNs. The element keeps its
// uPlot instances on its panels (`.uplot`) and marks each legend row with data-series and
// data-points (how many readings the line has).
export function chart(id, tNs, panels, label) {
  sweep();
  const xs = tNs.map((t) => t / 1e9);
  const shown = panels.map((p) => ({ ...p, unit: unitOf(p) }));
  const shape = JSON.stringify(shown.map((p) => [p.label, p.unit[1], p.lines.map((l) => [l.name, l.colour, l.emphasis])]));
  let found = charts.get(id);
  if (!found || found.shape !== shape) {  // new, or other series or units: new panels, on the same span
    const zoom = found ? found.zoom : null;
    if (found) drop(found);
    found = build(id, shown, label);
    Object.assign(found, { shape, zoom });
    charts.set(id, found);
  }
  found.node.setAttribute("aria-label", `${label}: ${range(xs)}`);
  shown.forEach((p, i) => {
    const u = found.plots[i];
    u.setData([xs, ...p.lines.map((l) => bridged(l.values.map((v) => (v === null ? null : (v * p.scale) / p.unit[0]))))]);
    if (found.zoom) u.setScale("x", { min: found.zoom[0], max: found.zoom[1] });  // new data, same span
    mark(u, p);
  });
  return found.node;
}

function build(id, panels, label) {
  const node = el("div", { class: "timechart", role: "group", "aria-label": label });
  const found = { node, plots: [], zoom: null };  // zoom: [min, max] in s while zoomed, kept through new data
  const width = () => Math.max(320, node.clientWidth || WIDTH);
  const key = uPlot.sync(`chart ${id}`).key;  // one cursor, one drag and one reset for the chart's panels
  for (const panel of panels) {
    const holder = el("div", { class: "timechart-panel" });
    node.append(holder);
    const u = new uPlot(options(panel, key, width(), found), [[]], holder);
    u.over.addEventListener("dblclick", () => { found.zoom = null; });
    holder.uplot = u;
    found.plots.push(u);
  }
  // the page lays the chart out after it is built: size the panels to it then, and on resizes
  found.resized = new ResizeObserver(() => {
    if (node.isConnected) found.plots.forEach((u) => u.setSize({ width: width(), height: HEIGHT }));
  });
  found.resized.observe(node);
  return found;
}

function options(panel, key, width, found) {
  const unit = panel.unit[1];
  const number = (v) => (v === null || v === undefined ? "–" : `${Number(v.toPrecision(3))} ${unit}`);
  return {
    title: `${panel.label}, in ${unit}`, width, height: HEIGHT,
    padding: [12, 32, 0, 0],  // room on the right for the last time tick's label
    cursor: { y: false, sync: { key, setSeries: true }, drag: { x: true, y: false, setScale: true }, focus: { prox: 16 } },
    focus: { alpha: 0.35 },
    legend: { live: true },
    scales: { x: { time: true, range: (u, min, max) => (min === max ? [min - 30, max + 30] : [min, max]) },
      y: { range: (u, min, max) => [0, max > 0 ? max * 1.1 : 1] } },
    axes: [
      { values: (u, ticks) => ticks.map(wall), incrs: TIME_STEPS, space: 80, size: 40 },
      { values: (u, ticks) => ticks.map(number), size: AXIS },
    ],
    series: [
      { label: "time", value: (u, v) => (v === null || v === undefined ? "–" : wall(v)) },
      ...panel.lines.map((l) => ({ label: l.name, stroke: l.colour, width: l.emphasis ? 2.5 : 1.5,
        value: (u, v) => number(v), points: { filter: isolated } })),
    ],
    hooks: {
      // a drag's span, read before uPlot zooms to it (each panel of the chart gets the same drag)
      setSelect: [(u) => {
        if (u.select.width > 0) found.zoom = [u.posToVal(u.select.left, "x"), u.posToVal(u.select.left + u.select.width, "x")];
      }],
    },
  };
}

function drop(found) {
  found.resized.disconnect();
  found.plots.forEach((u) => u.destroy());
}

// The largest unit the panel's top value reaches (its smallest when nothing does), as [divisor, name].
function unitOf(panel) {
  const top = Math.max(0, ...panel.lines.flatMap((l) => l.values.filter((v) => v !== null))) * panel.scale;
  const units = UNITS[panel.quantity];
  return units.find(([div]) => top >= div) || units[units.length - 1];
}

// Runs of up to MAX_GAP nulls become undefined, which uPlot bridges; longer runs stay null: a gap.
function bridged(values) {
  const out = values.slice();
  let start = -1;
  for (let i = 0; i <= out.length; i += 1) {
    if (i < out.length && out[i] === null) { if (start < 0) start = i; continue; }
    if (start > 0 && i < out.length && i - start <= MAX_GAP) out.fill(undefined, start, i);
    start = -1;
  }
  return out;
}

// uPlot's points filter: the indices of readings with no neighbour to draw a line to.
function isolated(u, si, show) {
  if (show) return null;  // every point is drawn anyway
  const ys = u.data[si];
  const near = (i, step) => {
    for (let j = i + step; j >= 0 && j < ys.length; j += step) if (ys[j] !== undefined) return ys[j] !== null;
    return false;
  };
  const out = [];
  ys.forEach((v, i) => { if (v !== null && v !== undefined && !near(i, -1) && !near(i, 1)) out.push(i); });
  return out.length ? out : null;
}

// Legend rows name their series for tests and scripts, with how many readings each line has.
function mark(u, panel) {
  u.root.querySelectorAll(".u-legend tr.u-series").forEach((row, i) => {
    if (i === 0) return;
    const line = panel.lines[i - 1];
    row.dataset.series = line.name;
    row.dataset.points = String(line.values.filter((v) => v !== null).length);
  });
}

// Charts no longer on the page and not about to be (kept only while connected or just built).
function sweep() {
  for (const [id, c] of charts) {
    if (c.node.isConnected || !c.shown) { c.shown = c.node.isConnected || c.shown; continue; }
    drop(c);
    charts.delete(id);
  }
}

function wall(s) {
  const d = new Date(s * 1e3);
  return [d.getHours(), d.getMinutes(), d.getSeconds()].map((n) => String(n).padStart(2, "0")).join(":");
}

function range(xs) {
  return xs.length ? `${xs.length} readings from ${wall(xs[0])} to ${wall(xs[xs.length - 1])}` : "no readings";
}
