// Audit: the runs the controller keeps; a run as category -> check -> verdict -> findings, with the
// fix, and its back-end NIC table. Audits run where the hosts are reachable (over SSH or on a lab)
// and post their report here: the controller cannot run one, so the view shows how.
import { get } from "./api.js";
import { clock, cls, el, table } from "./dom.js";

export const topics = ["audits"];
const HOW = "clockfabric audit --lab NAME --controller URL --token-file FILE";
// The back-end NIC table's columns: the check behind each.
const NIC_CHECKS = [["initialized", "backend.nic_init"], ["active", "backend.nic_active"], ["GID index", "backend.gid"],
  ["connectivity", "backend.connectivity"], ["cabling", "backend.cabling"]];
const RANK = { fail: 4, unknown: 3, warn: 2, skip: 1, pass: 0 };
let chosen = null;

export async function render(refresh) {
  const runs = (await get("/api/v1/audits", { limit: 1000 })).items.reverse();
  if (!runs.length) {
    return el("section", { "aria-label": "Audit" }, el("p", { id: "audit-how" }, "No audit stored yet. Run one and store it here: ",
      el("code", {}, HOW)));
  }
  if (!runs.some((r) => r.id === chosen)) chosen = runs[0].id;
  const run = await get(`/api/v1/audits/${chosen}`);
  const list = table(["run", "started (UTC)", "fleet", "verdict", "checks"], runs.map((r) =>
    el("tr", { "data-run": r.id },
      el("td", {}, el("button", { type: "button", "aria-label": `open audit ${r.id}`,
        onclick: () => { chosen = r.id; refresh(); } }, `#${r.id}`)),
      el("td", {}, clock(r.t_ns)), el("td", {}, r.fleet), el("td", { class: `verdict-${cls(r.verdict)}` }, r.verdict),
      el("td", {}, Object.entries(r.counts).filter(([, n]) => n).map(([v, n]) => `${n} ${v}`).join(", ")))),
  { "aria-label": "Audit runs" });
  const checks = run.report.checks || [];
  return el("section", { "aria-label": "Audit" }, el("h2", {}, "Runs"), list,
    el("p", { id: "audit-how", class: "muted" }, "A new audit: run ", el("code", {}, HOW),
      " where the hosts are reachable; its report lands here."),
    el("h2", {}, `Run #${run.id}: ${run.fleet}, ${run.verdict}`), tree(checks),
    el("h2", {}, "Back-end NICs"), nicTable(checks));
}

// One row per NIC a back-end check found something on; a NIC not listed passed every one.
function nicTable(checks) {
  const byId = Object.fromEntries(checks.map((c) => [c.id, c]));
  const ran = NIC_CHECKS.filter(([, id]) => byId[id]);
  const nics = new Map();  // "host:device" -> { check id -> finding verdict }
  for (const [, id] of ran) {
    for (const f of byId[id].findings.filter((f) => f.host && f.device)) {
      const row = nics.get(`${f.host}:${f.device}`) || {};
      if (!row[id] || RANK[f.verdict] > RANK[row[id]]) row[id] = f.verdict;
      nics.set(`${f.host}:${f.device}`, row);
    }
  }
  if (!ran.length) return el("p", { class: "muted" }, "This run has no back-end NIC checks.");
  const cell = (row, id) => {
    if (!byId[id]) return "–";  // not run
    return row[id] || (["skip", "unknown"].includes(byId[id].verdict) ? byId[id].verdict : "pass");
  };
  const rows = [...nics.entries()].sort().map(([where, row]) => {
    const [host, nic] = [where.slice(0, where.lastIndexOf(":")), where.slice(where.lastIndexOf(":") + 1)];
    const verdicts = NIC_CHECKS.map(([, id]) => cell(row, id));
    const status = verdicts.filter((v) => v !== "–").sort((a, b) => RANK[b] - RANK[a])[0];
    return el("tr", { "data-nic": where }, el("td", { class: `verdict-${cls(status)}` }, status), el("td", {}, host),
      el("td", {}, nic), verdicts.map((v) => el("td", { class: `verdict-${cls(v)}` }, v)));
  });
  return el("div", {},
    rows.length ? table(["status", "host", "NIC", ...NIC_CHECKS.map(([name]) => name)], rows, { "aria-label": "Back-end NICs" })
      : null,
    el("p", { class: "muted" }, `${rows.length ? "NICs not listed" : "Every NIC"} passed every back-end check run`));
}

function tree(checks) {
  const categories = {};
  for (const c of checks) (categories[c.category] ||= []).push(c);
  const worst = (cs) => cs.map((c) => c.verdict).sort((a, b) => RANK[b] - RANK[a])[0];
  return el("div", { id: "audit-tree" }, Object.entries(categories).map(([category, cs]) => {
    const verdict = worst(cs);
    return el("details", { open: verdict !== "pass", "data-category": category },
      el("summary", {}, el("span", { class: `verdict-${cls(verdict)}` }, verdict), ` ${category} (${cs.length} checks)`),
      cs.map((c) => el("details", { open: c.verdict !== "pass" && c.verdict !== "skip", "data-check": c.id },
        el("summary", {}, el("span", { class: `verdict-${cls(c.verdict)}` }, c.verdict), ` ${c.title}: ${c.summary}`),
        c.findings.map((f) => el("div", { class: "finding", "data-where": [f.host, f.device].filter(Boolean).join(":") },
          el("span", { class: `verdict-${cls(f.verdict)}` }, f.verdict), ` ${[f.host, f.device].filter(Boolean).join(":") || "fleet"}: `,
          f.message)),
        c.fix ? el("div", { class: "fix" }, `fix: ${c.fix}`) : null)));
  }));
}
