// Events and alerts: the newest events of the last hour, filterable by kind and host; alerts open and
// resolved; the failover decisions of the hour, each move with the job flows it moved.
import { all, get } from "./api.js";
import { ago, clock, cls, el, paged, rate, table } from "./dom.js";

export const topics = ["events", "alerts"];
const filter = { kind: "", host: "" };

export async function render(refresh) {
  const since = Date.now() * 1e6 - 3600e9;
  const [events, alerts] = await Promise.all([
    all("/api/v1/events", { since_ns: since, kind: filter.kind, host: filter.host }, 20000),
    all("/api/v1/alerts", { since_ns: since - 23 * 3600e9 }, 2000)]);
  const everything = filter.kind || filter.host ? await all("/api/v1/events", { since_ns: since }, 20000) : events;
  // the decisions with the flows they moved, asked only when the hour holds one: most hours none
  const failovers = everything.some((e) => e.kind.startsWith("failover_"))
    ? await get("/api/v1/dashboard/failovers", { since: "1h" }) : { items: [], complete: true };
  const picker = (key, label) => el("select", { id: `filter-${key}`, "aria-label": label,
    onchange: (e) => { filter[key] = e.target.value; refresh(); } },
  el("option", { value: "" }, `every ${key}`),
  [...new Set(everything.map((e) => e[key]))].sort().map((v) => el("option", { value: v, selected: v === filter[key] }, v)));
  const newest = events.slice().reverse();
  alerts.sort((a, b) => (a.resolved_ns === null) - (b.resolved_ns === null) || a.opened_ns - b.opened_ns).reverse();
  return el("section", { "aria-label": "Events and alerts" },
    el("div", { class: "cols" },
      el("div", {},
        el("h2", {}, `Events in the last hour: ${events.length}`),
        el("div", { class: "toolbar" }, picker("kind", "Event kind"), picker("host", "Host")),
        el("div", { id: "timeline" }, paged("Events", ["time (UTC)", "host", "kind", "device"], newest, (e) =>
          el("tr", { "data-kind": e.kind, "data-host": e.host }, el("td", {}, clock(e.t_ns)), el("td", {}, e.host),
            el("td", {}, e.kind), el("td", {}, e.device)), { size: 100 }))),
      el("div", {},
        el("h2", {}, `Alerts of the last day: ${alerts.length}`),
        el("div", { class: "scroll" }, table(["state", "severity", "kind", "message", "opened"], alerts.map((a) =>
          el("tr", { "data-alert": a.kind, "data-open": a.resolved_ns === null },
            el("td", {}, a.resolved_ns === null ? "open" : "resolved"),
            el("td", { class: `severity-${cls(a.severity)}` }, a.severity), el("td", {}, a.kind),
            el("td", { title: JSON.stringify(a.detail) }, a.message), el("td", {}, ago(a.opened_ns)))),
        { "aria-label": "Alerts" })))),
    el("h2", {}, `Failover decisions in the last hour: ${failovers.items.length}${failovers.complete ? "" : "+"}`),
    paged("Failover decisions", ["time (UTC)", "host", "peer", "decision", "planes", "reason", "flows moved"],
      failovers.items, decision, { size: 50 }));
}

function decision(d) {
  const moved = d.steered ? [el("div", {}, d.steered)]
    : d.flows.map((f) => el("div", { "data-moved": f.flow }, `${f.jobid}: ${f.flow} (${rate(f.tx_bps)})`));
  return el("tr", { "data-decision": d.decision, "data-host": d.host },
    el("td", {}, clock(d.t_ns)), el("td", {}, d.host), el("td", {}, d.peer), el("td", {}, d.decision),
    el("td", {}, d.planes.join(", ")), el("td", {}, d.reason),
    el("td", {}, moved.length ? moved : el("span", { class: "muted" }, d.decision === "moved" ? "no job flows" : "–")));
}
