// Audit: the runs the controller keeps; a run as category -> check -> verdict -> findings, with the fix.
import { get } from "./api.js";
import { clock, cls, el, table } from "./dom.js";

export const topics = ["audits"];
let chosen = null;

export async function render(refresh) {
  const runs = (await get("/api/v1/audits", { limit: 1000 })).items.reverse();
  if (!runs.length) {
    return el("section", { "aria-label": "Audit" }, el("p", {}, "No audit stored yet. Run one and store it here: ",
      el("code", {}, "clockfabric audit --lab NAME --controller URL --token-file FILE")));
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
  return el("section", { "aria-label": "Audit" }, el("h2", {}, "Runs"), list,
    el("h2", {}, `Run #${run.id}: ${run.fleet}, ${run.verdict}`), tree(run.report.checks || []));
}

function tree(checks) {
  const categories = {};
  for (const c of checks) (categories[c.category] ||= []).push(c);
  const rank = { fail: 4, unknown: 3, warn: 2, skip: 1, pass: 0 };
  const worst = (cs) => cs.map((c) => c.verdict).sort((a, b) => rank[b] - rank[a])[0];
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
