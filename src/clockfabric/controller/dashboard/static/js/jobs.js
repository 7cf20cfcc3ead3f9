// Jobs: the jobs list; a job's QoS class and what the hosts do about it; its flows (peers, rate,
// RTT, retransmits, OWD, path), its throughput and each flow's delay on one time axis, the root-cause verdict with its evidence, and the
// links its flows cross on the fabric map, the verdict's link in the verdict's colour.
import { get } from "./api.js";
import { COLOURS, chart } from "./chart.js";
import { ago, cls, el, micros, paged, rate } from "./dom.js";
import { draw } from "./fabric.js";

export const topics = ["hosts"];
const WINDOWS = ["1m", "5m", "15m", "1h"];
// how bad each verdict is: the colour of its sentence and of its link on the map
const SEVERITY = { healthy: "ok", no_flows: "unknown", straggler_host: "warn", slow_unlocated: "warn",
  queue_unexplained: "warn", held_unlocated: "warn", rate_unexplained: "warn",
  misconfigured_class: "warn", misconfigured_interface: "warn" };
let chosen = null;
let since = "5m";

export async function render(refresh) {
  const jobs = (await get("/api/v1/jobs", { limit: 1000 })).items;
  if (!jobs.length) {
    return el("section", { "aria-label": "Jobs" }, el("p", {}, "No job reported yet. Start one on the hosts: ",
      el("code", {}, "clockfabric job run --name NAME -- COMMAND"), " (or run it under Slurm, torchrun or Kubernetes)."));
  }
  if (!jobs.some((j) => j.jobid === chosen)) chosen = (jobs.find((j) => j.active) || jobs[0]).jobid;
  const id = encodeURIComponent(chosen);
  const [job, why, series, fabric, qos] = await Promise.all([
    get(`/api/v1/jobs/${id}`), get(`/api/v1/jobs/${id}/why`, { since }),
    get("/api/v1/dashboard/job-series", { jobid: chosen, since }), get("/api/v1/fabric").catch(() => null),
    get("/api/v1/qos").catch(() => null)]);
  const list = paged("Jobs", ["job", "state", "hosts", "ranks", "started", "last seen"], jobs, (j) =>
    el("tr", { "data-job": j.jobid, class: j.jobid === chosen ? "chosen" : null },
      el("td", {}, el("button", { type: "button", "aria-label": `open job ${j.jobid}`,
        onclick: () => { chosen = j.jobid; refresh(); } }, j.jobid)),
      el("td", { class: j.active ? "state-ok" : "state-unknown" }, j.active ? "running" : "ended"),
      el("td", {}, j.hosts.join(", ")), el("td", {}, j.ranks.join(", ")), el("td", {}, ago(j.start_ns)),
      el("td", {}, ago(j.last_seen_ns))), { size: 20, match: (j, q) => j.jobid.toLowerCase().includes(q) });
  const window = el("select", { id: "job-window", "aria-label": "Window",
    onchange: (e) => { since = e.target.value; refresh(); } },
  WINDOWS.map((w) => el("option", { value: w, selected: w === since }, `last ${w}`)));
  return el("section", { "aria-label": "Jobs", "data-job": chosen },
    el("h2", {}, `Jobs: ${jobs.length}`), list,
    el("div", { class: "toolbar" }, el("h2", {}, `Job ${chosen}`), el("label", { for: "job-window" }, "window"), window),
    qosLine(qos, chosen), verdict(why),
    el("h2", {}, "Throughput and per-flow delay"), timeline(series),
    el("h2", {}, "Its flows on the fabric"), map(fabric, why),
    el("h2", {}, `Flows: ${job.flows.length}`), flows(job, why));
}

// "QoS: critical, weight 70 (enforced) · h0: 2 sockets, 310 packets marked"
function qosLine(qos, jobid) {
  const p = qos && qos.items.find((i) => i.jobid === jobid);
  if (!p) return el("p", { id: "job-qos", class: "muted" }, "QoS: none (clockfabric qos set JOB --class C)");
  const hosts = Object.entries(p.hosts).map(([h, j]) => `${h}: ${j.sockets} sockets, ${j.marked_packets} packets marked`);
  return el("p", { id: "job-qos", "data-class": p.class },
    [`QoS: ${p.class}, weight ${p.weight} (${p.state})`, ...hosts].join(" · "));
}

// the links a verdict names: one, or several the evidence cannot tell apart
function named(why) {
  return why.links || (why.link ? [why.link] : []);
}

function verdict(why) {
  const severity = SEVERITY[why.verdict] || "bad";
  const evidence = Object.entries(why.evidence || {});
  return el("div", { id: "job-verdict", class: `verdict-box verdict-${severity}`, "data-verdict": why.verdict },
    el("p", { class: "sentence" }, why.sentence),
    el("p", { class: "muted" }, [named(why).length ? `link ${named(why).join(" or ")}` : null,
      why.culprit ? `culprit ${why.culprit}` : null,
      why.throughput_ratio !== null && why.throughput_ratio !== undefined
        ? `throughput now ${(why.throughput_ratio * 100).toFixed(0)}% of the window's start` : null]
      .filter(Boolean).join(" · ")),
    (why.late || []).length ? el("p", { id: "job-late", class: "muted" }, "late readings: " + why.late.map((l) =>
      `${l.host} (newest ${l.newest_age_s} s old, ${l.readings} in the span judged)`).join(", ")
      + ": their flows are judged on fewer, older readings") : null,
    evidence.length ? el("details", {}, el("summary", {}, "evidence"),
      el("dl", { class: "evidence" }, evidence.map(([k, v]) =>
        [el("dt", {}, k), el("dd", {}, typeof v === "object" ? JSON.stringify(v) : String(v))]))) : null);
}

function timeline(series) {
  if (!series.t_ns.length) return el("p", { class: "muted" }, "no flow of this job sent in the window");
  const sources = [...new Set(series.flows.map((f) => f.delay_source))].join(", ");
  return el("div", { id: "job-timeline" },
    chart(`job ${series.jobid} ${since}`, series.t_ns, [
      { label: "throughput sent (all flows)", quantity: "bit/s", scale: 1,
        lines: [{ name: "job", values: series.throughput_bps, colour: "#1f2328", emphasis: true }] },
      { label: `delay per flow (${sources})`, quantity: "s", scale: 1e-6,
        lines: series.flows.map((f, i) => ({ name: `${f.host} ${f.flow}`, values: f.delay_us,
          colour: COLOURS[i % COLOURS.length] })) }],
    "Throughput and per-flow delay"));
}

function map(fabric, why) {
  if (!fabric) return el("p", { class: "muted" }, "the controller has no topology: no map");
  const marks = {};
  for (const f of why.flows || []) for (const name of f.links) marks[name] = "job";
  // the verdict's links keep their "crossed" mark when the job's flows cross them too; links it
  // cannot tell apart are each drawn dashed
  const culprits = named(why), severity = SEVERITY[why.verdict] || "bad";
  const crossed = Object.keys(marks).length;
  for (const name of culprits) {
    marks[name] = `${marks[name] ? "job " : ""}culprit verdict-${severity}${culprits.length > 1 ? " ambiguous" : ""}`;
  }
  return el("div", { id: "job-map" },
    el("p", { class: "legend" }, el("span", {}, el("i", { class: "job" }), `crossed by the job's flows (${crossed})`),
      culprits.length ? el("span", {}, el("i", { class: `culprit-key verdict-${severity}` }),
        culprits.length > 1 ? `${culprits.join(", ")}: the verdict's links, which the evidence cannot tell apart`
          : `${culprits[0]}: the verdict's link`) : null),
    draw(fabric, () => {}, marks));
}

function flows(job, why) {
  const judged = new Map((why.flows || []).map((f) => [`${f.host}|${f.flow}`, f]));
  const rows = job.flows.map((f) => ({ ...f, judged: judged.get(`${f.host}|${f.flow}`) }));
  return paged("Job flows", ["host", "peer", "local → remote", "sent", "received", "RTT", "retransmits", "OWD",
    "path", "judged"], rows, (f) => {
    const j = f.judged;
    const state = !j ? (f.active ? "receiving" : "ended") : j.network_slow ? "slow" : j.starved ? "starved" : "ok";
    return el("tr", { "data-flow": `${f.host} ${f.flow}`, "data-judged": state, class: f.active ? null : "muted" },
      el("td", {}, f.host), el("td", {}, f.peer || "?"), el("td", {}, `${f.local} → ${f.remote}`),
      el("td", {}, rate(f.tx_bps)), el("td", {}, rate(f.rx_bps)), el("td", {}, micros(f.rtt_us)),
      el("td", {}, f.retransmits_total === null ? "–" : f.retransmits_total.toFixed(0)),
      el("td", {}, j && j.delay_source === "inband" ? micros(j.delay_us) : "–"),
      el("td", {}, j && j.links.length ? j.links.join(" → ") : "–"),
      el("td", { class: `judged-${cls(state)}`, title: j ? j.why.join("; ") : "" }, state));
  }, { size: 50, match: (f, q) => `${f.host} ${f.peer} ${f.flow}`.toLowerCase().includes(q) });
}
