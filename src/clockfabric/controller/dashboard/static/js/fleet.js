// Fleet: nodes pushing or stale, clock sync per host, open alerts with their age, events of the last hour.
import { all, get } from "./api.js";
import { ago, cls, el, paged, table } from "./dom.js";

const HOUR_NS = 3600e9;
const byName = (h, q) => h.host.toLowerCase().includes(q) || h.state.includes(q);

export const topics = ["hosts", "events", "alerts"];

export async function render() {
  const since = Date.now() * 1e6 - HOUR_NS;
  const [hosts, alerts, events, fabric] = await Promise.all([
    get("/api/v1/hosts"), get("/api/v1/alerts", { open_only: true, limit: 1000 }),
    all("/api/v1/events", { since_ns: since }, 20000), get("/api/v1/fabric").catch(() => null)]);
  const switches = new Set((fabric ? fabric.nodes : []).filter((n) => n.kind === "switch").map((n) => n.name));
  const rows = hosts.items;
  const byKind = {};
  for (const e of events) byKind[e.kind] = (byKind[e.kind] || 0) + 1;
  const pushing = rows.filter((h) => h.state === "ok").length;
  const stale = rows.filter((h) => h.state === "stale").length;
  const nodeRow = (h) => el("tr", { "data-host": h.host },
    el("td", {}, h.host), el("td", { class: `state-${cls(h.state)}` }, h.state === "ok" ? "pushing" : h.state),
    el("td", {}, h.age_s === null ? "never" : `${h.age_s.toFixed(1)} s ago`),
    switches.has(h.host) ? null : el("td", { class: h.info.synced ? "state-ok" : "state-stale" },
      h.info.synced === undefined ? "?" : h.info.synced ? "synced" : "not synced"));
  return el("section", { "aria-label": "Fleet" },
    el("div", { class: "cards" },
      el("div", { class: "card", "data-card": "pushing" }, el("b", {}, `${pushing}/${rows.length}`), "nodes pushing"),
      el("div", { class: "card", "data-card": "stale" }, el("b", {}, stale), "stale"),
      el("div", { class: "card", "data-card": "alerts" }, el("b", {}, alerts.items.length), "open alerts"),
      el("div", { class: "card", "data-card": "events" }, el("b", {}, events.length), "events in the last hour")),
    el("div", { class: "cols" },
      el("div", {},
        el("h2", {}, "Hosts"),
        paged("Hosts", ["host", "state", "last push", "clock"], rows.filter((h) => !switches.has(h.host)), nodeRow,
          { match: byName }),
        el("h2", {}, "Switches"),
        paged("Switches", ["switch", "state", "last push"], rows.filter((h) => switches.has(h.host)), nodeRow,
          { match: byName })),
      el("div", {},
        el("h2", {}, "Open alerts"),
        alerts.items.length ? table(["severity", "kind", "message", "opened"], alerts.items.map((a) =>
          el("tr", { "data-alert": a.kind }, el("td", { class: `severity-${cls(a.severity)}` }, a.severity),
            el("td", {}, a.kind), el("td", {}, a.message), el("td", {}, ago(a.opened_ns)))), { "aria-label": "Open alerts" })
          : el("p", { class: "muted" }, "none"),
        el("h2", {}, "Events in the last hour, by kind"),
        table(["kind", "count"], Object.entries(byKind).sort((a, b) => b[1] - a[1]).map(([k, n]) =>
          el("tr", {}, el("td", {}, k), el("td", {}, n))), { "aria-label": "Events by kind" }))));
}
