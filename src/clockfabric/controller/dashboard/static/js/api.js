// Talking to the controller: the token (kept in sessionStorage, sent as a Bearer header), reads,
// and the live stream. EventSource cannot send headers, so the stream is opened with a ticket
// (one use, 30 s) asked for with the token in a header: no URL ever holds the token.
const KEY = "clockfabric.token";

export class Unauthorised extends Error {}
export class Unreachable extends Error {}

export const token = {
  get: () => sessionStorage.getItem(KEY),
  set: (value) => sessionStorage.setItem(KEY, value),
  clear: () => sessionStorage.removeItem(KEY),
};

export async function get(path, params = {}) {
  const query = new URLSearchParams(Object.entries(params).filter(([, v]) => v !== undefined && v !== null && v !== ""));
  const url = query.toString() ? `${path}?${query}` : path;
  let response;
  try {
    response = await fetch(url, { headers: { Authorization: `Bearer ${token.get() || ""}` } });
  } catch (e) {
    throw new Unreachable(`the controller is unreachable (${e.message})`);
  }
  if (response.status === 401) throw new Unauthorised("the token is wrong or no longer accepted");
  if (response.status >= 500) throw new Unreachable(`the controller answered ${response.status}`);
  if (!response.ok) {
    const body = await response.json().catch(() => ({}));
    const error = new Error(body.detail || `HTTP ${response.status}`);
    error.status = response.status;
    throw error;
  }
  return response.json();
}

// Every page of a paged list, up to `max` rows.
export async function all(path, params = {}, max = 5000) {
  const rows = [];
  let after = 0;
  while (rows.length < max) {
    const page = await get(path, { ...params, after_id: after, limit: Math.min(1000, max - rows.length) });
    rows.push(...page.items);
    if (page.next === null || page.next === undefined) break;
    after = page.next;
  }
  return rows;
}

// The live stream: onChange(topics) for each change; onState("live" | "down" | "unauthorised").
// It reconnects by itself while the controller is away.
export function live(onChange, onState) {
  let source = null;
  let retry = null;
  const open = async () => {
    clearTimeout(retry);
    let ticket;
    try {
      ({ ticket } = await get("/api/v1/stream/ticket"));  // a one-use ticket in the URL, never the token
    } catch (e) {
      if (e instanceof Unauthorised) { onState("unauthorised"); return; }
      onState("down");
      retry = setTimeout(open, 1000);
      return;
    }
    source = new EventSource(`/api/v1/stream?ticket=${encodeURIComponent(ticket)}`);
    source.addEventListener("hello", () => { onState("live"); onChange(null); });
    source.addEventListener("change", (e) => onChange(JSON.parse(e.data).topics));
    source.onerror = async () => {
      onState("down");
      if (source.readyState !== EventSource.CLOSED) return;  // the browser retries by itself
      try {
        await get("/api/v1/fleet");
      } catch (e) {
        if (e instanceof Unauthorised) { onState("unauthorised"); return; }
      }
      retry = setTimeout(open, 1000);
    };
  };
  open();
  return () => { clearTimeout(retry); if (source) source.close(); };
}
