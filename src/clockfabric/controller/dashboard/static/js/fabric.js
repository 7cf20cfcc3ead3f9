// Fabric map: leaf-spine drawn per plane, side by side; each link coloured by its state, by the
// load the flows that surely cross it put on it (a share of its rate), or by the queueing the
// whole probe mesh locates on it now.
// Click (or Enter on) a link for its events and the probe paths and flows that cross it.
import { all, get } from "./api.js";
import { clock, el, rate, svg, table } from "./dom.js";

const WIDTH = 1200, HEIGHT = 430, ROWS = { core: 40, spine: 90, leaf: 220, host: 360 };
const MAX_HOSTS_DRAWN = 96;  // per plane: more boxes than this would not fit the row, nor be readable

export const topics = ["hosts", "events"];
let selected = null;
let colourBy = "state";  // or one of PAINTS

export async function render(refresh) {
  let fabric;
  try {
    fabric = await get("/api/v1/fabric");
  } catch (e) {
    if (e.status === 404) return el("p", { class: "muted" }, e.message);
    throw e;
  }
  const details = el("div", { id: "link-details" });
  const select = async (name) => { selected = name; await refresh(); };
  const paint = PAINTS[colourBy] ? await PAINTS[colourBy].read() : null;
  const map = draw(fabric, select, {}, selected, paint && paint.link);
  if (selected && fabric.links.some((l) => l.name === selected)) details.append(await linkDetails(fabric, selected));
  return el("section", { "aria-label": "Fabric map" },
    el("p", { class: "legend" },
      el("label", { for: "fabric-colour" }, "colour links by "),
      el("select", { id: "fabric-colour", onchange: (e) => { colourBy = e.target.value; refresh(); } },
        [["state", "state"], ...Object.entries(PAINTS).map(([v, p]) => [v, p.name])].map(([v, text]) =>
          el("option", { value: v, selected: v === colourBy }, text))),
      (paint ? paint.legend : ["up", "down", "flapping", "unknown"].map((s) => [`var(--${s})`, s]))
        .map(([colour, text]) => el("span", {}, el("i", { style: `background: ${colour}` }), text)),
      el("span", { class: "muted" }, paint && paint.note ? paint.note
        : `${fabric.name}: ${fabric.links.length} links; click a link for its events, paths and flows`),
      hidden(fabric)),
    map, details);
}

// The colourings besides the state: each reads its data once per render and gives a legend, and
// for each link name a stroke, what it says of the link, and the data-* attributes tests read.
const PAINTS = {
  load: {
    name: "load (share of rate)",
    async read() {
      const loads = (await get("/api/v1/dashboard/link-load")).links;
      return { legend: [0, 0.5, 1].map((f) => [shareColour(f), `${f * 100}%`]), link: (name) => {
        const l = loads[name] || { bps: 0, share: 0 };
        return { stroke: shareColour(l.share || 0), data: { "data-load": l.bps },
          says: `carrying ${rate(l.bps)}${l.share === null ? "" : ` (${(l.share * 100).toFixed(0)}%)`}` };
      } };
    },
  },
  queueing: {
    name: "queueing (located from the probe mesh)",
    async read() {
      const q = await get("/api/v1/dashboard/link-queueing");
      const note = `${q.queued} of ${q.paths} probe paths queued now: ${q.strength.replace("_", " ")}`
        + (q.lacks.length ? ` (${q.lacks.join("; ")})` : "");
      return { note, legend: [[QUIET, "none located"], ...QUEUE_TICKS_US.map((us) => [queueColour(us), micros(us)])],
        link: (name) => {
          const s = q.links[name];
          if (!s) return { stroke: QUIET, data: { "data-excess-us": 0 }, says: "no queue located" };
          const also = s.ambiguous ? `; no probe path tells it from ${s.with.join(", ")}` : "";
          return { stroke: queueColour(s.excess_us), dashed: s.ambiguous, data: { "data-excess-us": s.excess_us ?? "" },
            says: `queueing ${s.excess_us === null ? "(unmeasured)" : micros(s.excess_us)}`
              + `${s.direction ? ` ${s.direction}` : ""}, explaining ${s.queued_paths} queued probe paths${also}` };
        } };
    },
  },
};

const QUIET = "#9aa4ad";
const QUEUE_TICKS_US = [50, 1600, 50000];  // the scale's ends and middle, log: 50 µs to 50 ms
const shareColour = (share) => `hsl(${(1 - Math.min(1, share)) * 120}, 75%, 42%)`;
const queueColour = (us) => shareColour(us ? Math.max(0, Math.log10(us / 50)) / 3 : 1);
const micros = (us) => (us >= 1000 ? `${(us / 1000).toFixed(us >= 10000 ? 0 : 1)} ms` : `${us.toFixed(0)} µs`);

function hosts(fabric) {
  return fabric.nodes.filter((n) => n.kind === "host").length;
}

function hidden(fabric) {
  const per = Math.max(...fabric.planes.map((p) => fabric.nodes.filter((n) => n.kind === "host" && n.planes.includes(p)).length), 0);
  return per > MAX_HOSTS_DRAWN ? el("span", { class: "muted" }, ` (${hosts(fabric)} hosts: their links are not drawn)`) : null;
}

// The map. marks: link name -> an extra class ("job", "culprit verdict-bad"): the jobs view's highlight.
// paint: link name -> {stroke, says, data, dashed}, to colour each link by a PAINTS entry instead
// of its state (null: by state).
export function draw(fabric, select, marks = {}, chosen = null, paint = null) {
  const planes = fabric.planes.length ? fabric.planes : [0];
  const width = WIDTH / planes.length;
  const where = {};  // `${plane}/${node}` -> [x, y]
  const layer = svg("g");
  planes.forEach((plane, i) => {
    const x0 = i * width;
    layer.append(svg("text", { class: "plane", x: x0 + width / 2, y: 14 }, `plane ${plane}`));
    const inPlane = fabric.nodes.filter((n) => n.planes.includes(plane));
    for (const role of Object.keys(ROWS)) {
      const row = inPlane.filter((n) => n.role === role);
      if (role === "host" && row.length > MAX_HOSTS_DRAWN) continue;
      row.forEach((n, j) => { where[`${plane}/${n.name}`] = [x0 + (width * (j + 0.5)) / row.length, ROWS[role]]; });
    }
  });
  const lines = fabric.links.map((l) => {
    const [a, b] = [l.a, l.b].map((end) => where[`${l.plane}/${end.split(":")[0]}`]);
    if (!a || !b) return null;
    const painted = paint ? paint(l.name) : null;
    const extra = `${l.name === chosen ? " selected" : ""}${marks[l.name] ? ` ${marks[l.name]}` : ""}`
      + `${painted && painted.dashed ? " ambiguous" : ""}`;
    const carries = painted ? `, ${painted.says}` : "";
    return svg("line", { class: `link ${l.state}${extra}`, x1: a[0], y1: a[1],
      x2: b[0], y2: b[1], tabindex: 0, role: "button", "data-link": l.name, "data-state": l.state,
      ...(painted ? painted.data : {}), style: painted ? `stroke: ${painted.stroke}` : null,
      "aria-label": `link ${l.name}: ${l.state}${carries}`, onclick: () => select(l.name),
      onkeydown: (e) => { if (e.key === "Enter" || e.key === " ") select(l.name); } },
    svg("title", {}, `${l.name}: ${l.state}, ${l.transitions} transitions in the last minute${carries}`));
  });
  const boxes = Object.entries(where).map(([key, [x, y]]) => {
    const name = key.split("/")[1];
    const isHost = y === ROWS.host;
    return svg("g", { "data-node": name },
      svg("rect", { class: `node${isHost ? " host" : ""}`, x: x - 26, y: y - 11, width: 52, height: 22, rx: 4 }),
      svg("text", { x, y }, name));
  });
  return svg("svg", { class: "fabric", viewBox: `0 0 ${WIDTH} ${HEIGHT}`, role: "group",
    "aria-label": "Fabric map" }, layer, lines, boxes);
}

async function linkDetails(fabric, name) {
  const link = fabric.links.find((l) => l.name === name);
  const ends = [link.a, link.b].map((e) => e.split(":"));
  const since = Date.now() * 1e6 - 3600e9;
  const [events, paths, flows] = await Promise.all([
    Promise.all(ends.map(([host]) => all("/api/v1/events", { host, since_ns: since }, 2000))),
    get("/api/v1/paths"), get("/api/v1/dashboard/link-flows", { link: name })]);
  const mine = events.flat().filter((e) => ends.some(([host, dev]) => e.host === host && e.device === dev))
    .sort((a, b) => b.t_ns - a.t_ns);
  const crossing = paths.items.filter((p) => p.links.includes(name));
  return el("div", { "data-details": name },
    el("h2", {}, `Link ${name}`),
    el("p", {}, `state ${link.state}, ${(link.rate_bps / 1e6).toFixed(0)} Mbit/s, plane ${link.plane}`),
    el("div", { class: "cols" },
      el("div", {}, el("h2", {}, `Events at its ends (last hour): ${mine.length}`),
        el("div", { class: "scroll" }, table(["time (UTC)", "end", "kind"], mine.slice(0, 200).map((e) =>
          el("tr", { "data-kind": e.kind }, el("td", {}, clock(e.t_ns)), el("td", {}, `${e.host}:${e.device}`),
            el("td", {}, e.kind))), { "aria-label": "Link events" }))),
      el("div", {}, el("h2", {}, `Probe paths crossing it: ${crossing.length}`),
        el("div", { class: "scroll" }, table(["from", "to", "path", "via"], crossing.map((p) =>
          el("tr", {}, el("td", {}, p.src), el("td", {}, p.dst), el("td", {}, p.path), el("td", {}, p.via || ""))),
          { "aria-label": "Paths crossing the link" })))),
    el("h2", {}, `Flows crossing it: ${flows.items.length}`),
    flows.items.length ? el("div", { class: "scroll" }, table(["from", "to", "job", "flow", "rate", "crosses"],
      flows.items.map((f) => el("tr", { "data-flow": f.flow }, el("td", {}, f.host), el("td", {}, f.peer || "–"),
        el("td", {}, f.jobid || "–"), el("td", {}, f.flow), el("td", {}, rate(f.tx_bps)),
        el("td", {}, f.certain ? "yes" : "maybe (its spine not traced)"))), { "aria-label": "Flows crossing the link" }))
      : el("p", { class: "muted" }, "No flow pushed in the last 10 s crosses it."));
}
