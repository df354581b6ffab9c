// The dashboard shell: API access (with the token), the SSE reader, routing, the runs table and
// the submit form. The run page lives in run.js, the plots in plots.js.
"use strict";

const $ = (sel, root = document) => root.querySelector(sel);
const TOKEN_KEY = "trm-token";
const TERMINAL = new Set(["completed", "failed", "cancelled"]);
const sleep = (ms) => new Promise((resolve) => setTimeout(resolve, ms));

function h(tag, attrs = {}, ...children) {
  const el = document.createElement(tag);
  for (const [k, v] of Object.entries(attrs)) {
    if (v === null || v === undefined || v === false) continue;
    if (k.startsWith("on")) el.addEventListener(k.slice(2), v);
    else el.setAttribute(k, v === true ? "" : String(v));
  }
  for (const c of children.flat()) {
    if (c !== null && c !== undefined && c !== false) el.append(c instanceof Node ? c : String(c));
  }
  return el;
}

function setText(el, text) {
  if (el.textContent !== text) el.textContent = text;
}

// ---- API access: every call carries the token once the user gave it ----------------------

class ApiFailure extends Error {
  constructor(status, body) {
    const err = (body && body.error) || {};
    super(err.message || `HTTP ${status}`);
    this.status = status;
    this.code = err.code;
    this.details = err.details;
  }
}

let tokenPrompt = null;

function authHeaders() {
  const token = sessionStorage.getItem(TOKEN_KEY);
  return token ? { Authorization: `Bearer ${token}` } : {};
}

// One prompt at a time, however many requests were refused together.
function askToken() {
  if (tokenPrompt) return tokenPrompt;
  const refused = sessionStorage.getItem(TOKEN_KEY) !== null;
  sessionStorage.removeItem(TOKEN_KEY);
  tokenPrompt = new Promise((resolve) => {
    const dialog = $("#token-dialog"), form = $("#token-form"), input = $("#token-input");
    $("#token-error").hidden = !refused;
    input.value = "";
    form.onsubmit = () => {
      sessionStorage.setItem(TOKEN_KEY, input.value.trim());
      tokenPrompt = null;
      showApiState();
      resolve();
    };
    dialog.oncancel = (e) => e.preventDefault(); // nothing works without it
    dialog.showModal();
  });
  return tokenPrompt;
}

async function api(path, opts = {}) {
  for (;;) {
    const resp = await fetch(path, { ...opts, headers: { ...(opts.headers || {}), ...authHeaders() } });
    if (resp.status !== 401) return resp;
    await askToken();
  }
}

async function apiJson(path, opts) {
  const resp = await api(path, opts);
  const body = await resp.json().catch(() => null);
  if (!resp.ok) throw new ApiFailure(resp.status, body);
  return body;
}

function showApiState() {
  const el = $("#api-state");
  el.replaceChildren();
  if (sessionStorage.getItem(TOKEN_KEY)) {
    el.append("token set · ", h("a", { href: "#", onclick: (e) => { e.preventDefault(); sessionStorage.removeItem(TOKEN_KEY); showApiState(); } }, "forget"));
  }
}

// ---- Server-sent events over fetch (EventSource cannot send the token) -------------------
// Reconnects after a drop with Last-Event-ID, so the server replays exactly what was missed.

class EventStream {
  constructor(path, onEvent, onState, isOver = null) {
    Object.assign(this, { path, onEvent, onState, isOver });
    this.lastId = null;
    this.seen = [];
    this.reconnects = 0;
    this.closed = false;
    this.ended = false;
    this.controller = null;
    this.run();
  }

  close() {
    this.closed = true;
    if (this.controller) this.controller.abort();
  }

  async run() {
    let backoff = 250;
    while (!this.closed && !this.ended) {
      this.controller = new AbortController();
      const headers = { Accept: "text/event-stream", ...authHeaders() };
      if (this.lastId !== null) headers["Last-Event-ID"] = String(this.lastId);
      try {
        const resp = await fetch(this.path, { headers, signal: this.controller.signal, cache: "no-store" });
        if (resp.status === 401) { await askToken(); continue; }
        if (!resp.ok) throw new ApiFailure(resp.status, await resp.json().catch(() => null));
        this.onState("live");
        backoff = 250;
        await this.read(resp.body);
        // A clean end without the terminal event: the run may have ended before we asked.
        if (!this.ended && this.isOver && (await this.isOver())) this.ended = true;
      } catch (err) {
        if (this.closed) return;
        if (err instanceof ApiFailure && err.status === 404) { this.onState(err.message); return; }
      }
      if (this.ended || this.closed) break;
      this.reconnects += 1;
      this.onState("reconnecting");
      await sleep(backoff);
      backoff = Math.min(backoff * 2, 4000);
    }
    if (this.ended) this.onState("ended");
  }

  async read(body) {
    const reader = body.pipeThrough(new TextDecoderStream()).getReader();
    let buffer = "", id = null, data = [];
    for (;;) {
      const { value, done } = await reader.read();
      if (done) return;
      buffer += value;
      let cut;
      while ((cut = buffer.indexOf("\n")) >= 0) {
        const line = buffer.slice(0, cut).replace(/\r$/, "");
        buffer = buffer.slice(cut + 1);
        if (line === "") {
          if (data.length) this.dispatch(id, data.join("\n"));
          id = null; data = [];
        } else if (!line.startsWith(":")) {
          const colon = line.indexOf(":");
          const field = colon < 0 ? line : line.slice(0, colon);
          const val = colon < 0 ? "" : line.slice(colon + 1).replace(/^ /, "");
          if (field === "data") data.push(val);
          else if (field === "id") id = val;
        }
      }
    }
  }

  dispatch(id, text) {
    const ev = JSON.parse(text);
    this.lastId = id !== null ? Number(id) : ev.id;
    this.seen.push(ev.id);
    if (ev.type === "status" && TERMINAL.has(ev.data && ev.data.status)) this.ended = true;
    this.onEvent(ev);
  }
}

// Calls `fn` at most every `ms`, always once more after the last request.
function throttle(fn, ms) {
  let timer = null, again = false;
  const fire = async () => {
    again = false;
    try { await fn(); } catch (err) { console.error(err); }
    timer = setTimeout(() => { timer = null; if (again) wrapped(); }, ms);
  };
  const wrapped = () => { if (timer) again = true; else { timer = true; fire(); } };
  return wrapped;
}

// ---- Formatting ----------------------------------------------------------------------------

function age(iso) {
  if (!iso) return "-";
  const s = Math.max(0, (Date.now() - Date.parse(iso)) / 1000);
  if (s < 60) return `${Math.floor(s)}s`;
  if (s < 3600) return `${Math.floor(s / 60)}m`;
  if (s < 86400) return `${Math.floor(s / 3600)}h ${Math.floor((s % 3600) / 60)}m`;
  return `${Math.floor(s / 86400)}d`;
}

function duration(from, to) {
  if (!from) return "-";
  const s = ((to ? Date.parse(to) : Date.now()) - Date.parse(from)) / 1000;
  if (s < 60) return `${s.toFixed(1)}s`;
  return `${Math.floor(s / 60)}m ${Math.round(s % 60)}s`;
}

const num = (v, d = 3) => (typeof v === "number" ? v.toFixed(d) : "-");

// Every byte figure on the page goes through here. Decimal units, as the status card's "GB"
// (1 GB = 10^9 bytes), three significant digits: 2147483648 -> "2.15 GB", 1234 -> "1.23 KB".
const BYTE_UNITS = ["B", "KB", "MB", "GB", "TB", "PB"];
function bytesText(n) {
  if (typeof n !== "number" || !Number.isFinite(n)) return "-";
  let i = 0, v = Math.abs(n);
  while (v >= 999.5 && i < BYTE_UNITS.length - 1) { v /= 1000; i += 1; }
  const digits = i === 0 ? String(Math.round(v)) : v.toPrecision(3);
  return `${n < 0 ? "-" : ""}${digits} ${BYTE_UNITS[i]}`;
}

// A counter or usage figure named `..._bytes` (peak_rss_bytes, bytes_read) is a size.
const isBytesKey = (key) => /(^|_)bytes(_|$)/i.test(key);
function figure(key, v) {
  if (typeof v === "number" && isBytesKey(key)) return bytesText(v);
  if (typeof v === "number") return String(Number.isInteger(v) ? v : +v.toFixed(3));
  return v !== null && typeof v === "object" ? JSON.stringify(v) : String(v);
}
const when = (iso) => (iso ? new Date(iso).toLocaleString() : "-");

// ---- Views ----------------------------------------------------------------------------------

const views = { runs: null, run: null, submit: null };
let current = null;

function route() {
  const hash = location.hash.replace(/^#/, "") || "/";
  const m = hash.match(/^\/runs\/([^/?]+)/);
  const [name, arg] = m ? ["run", decodeURIComponent(m[1])] : hash.startsWith("/submit") ? ["submit"] : ["runs"];
  if (current && current.leave) current.leave();
  for (const key of Object.keys(views)) $(`#view-${key}`).hidden = key !== name;
  document.querySelectorAll("[data-nav]").forEach((a) => a.classList.toggle("active", a.dataset.nav === name));
  current = views[name];
  current.enter(arg);
}

// ---- Runs table: polls GET /runs, updates rows in place (no flicker) ------------------------

views.runs = {
  timer: null,
  limit: 50,
  rows: new Map(),
  enter() {
    const again = () => this.refresh();
    $("#filter-kind").onchange = again;
    $("#filter-status").onchange = again;
    $("#runs-more").onclick = () => { this.limit = Math.min(500, this.limit + 50); again(); };
    this.refresh();
  },
  leave() { clearTimeout(this.timer); this.timer = null; },
  async refresh() {
    clearTimeout(this.timer);
    const q = new URLSearchParams({ limit: String(this.limit) });
    if ($("#filter-kind").value) q.set("kind", $("#filter-kind").value);
    if ($("#filter-status").value) q.set("status", $("#filter-status").value);
    try {
      const body = await apiJson(`/runs?${q}`);
      this.render(body.runs);
      $("#runs-more").hidden = !body.next_cursor || this.limit >= 500;
      setText($("#runs-updated"), `updated ${new Date().toLocaleTimeString()}`);
    } catch (err) {
      setText($("#runs-updated"), `cannot reach the API: ${err.message}`);
    }
    if (current === this) this.timer = setTimeout(() => this.refresh(), 2000);
  },
  render(runs) {
    const tbody = $("#runs-table tbody");
    const keep = new Set(runs.map((r) => r.id));
    for (const [id, tr] of this.rows) if (!keep.has(id)) { tr.remove(); this.rows.delete(id); }
    let before = tbody.firstChild;
    for (const run of runs) {
      let tr = this.rows.get(run.id);
      if (!tr) {
        tr = h("tr", { "data-run": run.id },
          h("td", { class: "id" }, h("a", { href: `#/runs/${run.id}` }, run.id), h("div", { class: "muted small run-name" })),
          h("td"), h("td", {}, h("span", { class: "status" })), h("td"),
          h("td", { class: "num" }, h("span", { class: "bar" }, h("span")), h("span", { class: "pct" })),
          h("td", { class: "num" }), h("td", { class: "num" }));
        this.rows.set(run.id, tr);
      }
      if (tr !== before) tbody.insertBefore(tr, before);
      before = tr.nextSibling;
      const cells = tr.children;
      setText(cells[0].lastChild, run.name || "");
      cells[0].lastChild.title = run.name || "";
      setText(cells[1], run.kind);
      const badge = cells[2].firstChild;
      setText(badge, run.status);
      badge.className = `status ${run.status}`;
      setText(cells[3], run.phase || "-");
      cells[4].firstChild.firstChild.style.width = `${run.percent}%`;
      setText(cells[4].lastChild, `${run.percent.toFixed(1)}%`);
      setText(cells[5], num(run.best_anchor));
      setText(cells[6], age(run.created_at));
      cells[6].title = when(run.created_at);
    }
    $("#runs-empty").hidden = runs.length > 0;
  },
};

// ---- Submit form: JSON in, fields out; the API's 422 goes next to the field it names ----------

function flatten(value, path, out) {
  const isObj = value && typeof value === "object";
  if (isObj && Object.keys(value).length) {
    for (const [k, v] of Object.entries(value)) {
      flatten(v, Array.isArray(value) ? `${path}[${k}]` : path ? `${path}.${k}` : k, out);
    }
  } else {
    out.push([path, value]);
  }
  return out;
}

function setPath(obj, path, value) {
  const parts = path.match(/[^.[\]]+/g);
  let node = obj;
  parts.slice(0, -1).forEach((p) => { node = node[p]; });
  node[parts[parts.length - 1]] = value;
}

views.submit = {
  key: null,
  keyFor: null,
  loaded: false,
  enter() {
    const text = $("#submit-json");
    text.oninput = throttle(() => this.renderFields(), 250);
    $("#submit-form").onsubmit = (e) => { e.preventDefault(); this.submit(); };
    $("#submit-sample").onchange = (e) => this.useSample(e.target.value);
    this.renderFields();
    if (!this.loaded) { this.loaded = true; this.loadSamples(); this.loadBenches(); }
  },
  parse() {
    const err = $("#submit-json-error");
    try {
      const spec = JSON.parse($("#submit-json").value);
      err.hidden = true;
      return spec;
    } catch (e) {
      err.hidden = false;
      setText(err, `not valid JSON: ${e.message}`);
      return undefined;
    }
  },
  renderFields(errors = []) {
    const spec = this.parse();
    const box = $("#submit-fields");
    if (spec === undefined) return;
    box.replaceChildren();
    const rows = new Map();
    for (const [path, value] of flatten(spec, "", [])) {
      const input = h("input", { value: typeof value === "string" ? value : JSON.stringify(value), "data-kind": typeof value });
      input.onchange = () => this.editField(path, input);
      const row = h("div", { class: "field", "data-field": path || "body" }, h("label", {}, path || "(spec)"), input, h("span", { class: "field-error" }));
      rows.set(path || "body", row);
      box.append(row);
    }
    for (const d of errors) {
      const field = d.field || "body";
      let row = rows.get(field);
      if (!row) { // a missing field: name it, with what the API said
        row = h("div", { class: "field missing", "data-field": field }, h("label", {}, field), h("em", { class: "muted" }, "not in the spec"), h("span", { class: "field-error" }));
        rows.set(field, row);
        box.prepend(row);
      }
      row.classList.add("invalid");
      const slot = $(".field-error", row);
      slot.textContent = slot.textContent ? `${slot.textContent}; ${d.message}` : d.message;
    }
  },
  editField(path, input) {
    const spec = this.parse();
    if (spec === undefined) return;
    let value = input.value;
    if (input.dataset.kind !== "string") { try { value = JSON.parse(value); } catch { /* keep the text */ } }
    setPath(spec, path, value);
    $("#submit-json").value = JSON.stringify(spec, null, 2);
    this.renderFields();
  },
  async submit() {
    const message = $("#submit-message");
    message.hidden = true;
    const spec = this.parse();
    if (spec === undefined) return;
    const body = JSON.stringify(spec);
    if (this.keyFor !== body) { this.key = crypto.randomUUID(); this.keyFor = body; } // a double click submits once
    const resp = await api("/runs", { method: "POST", body, headers: { "Content-Type": "application/json", "Idempotency-Key": this.key } });
    const out = await resp.json().catch(() => null);
    if (resp.ok) { location.hash = `#/runs/${out.id}`; return; }
    const err = new ApiFailure(resp.status, out);
    message.hidden = false;
    setText(message, `${resp.status} ${err.code || ""}: ${err.message}`);
    this.renderFields(resp.status === 422 && Array.isArray(err.details) ? err.details : []);
  },
  async loadSamples() {
    try {
      const body = await apiJson("/ui/specs");
      this.samples = body.specs;
      for (const s of body.specs) $("#submit-sample").append(h("option", { value: s.file }, `${s.file} (${s.kind})`));
    } catch (err) { console.warn("no sample specs", err); }
  },
  useSample(file) {
    const s = (this.samples || []).find((x) => x.file === file);
    if (!s) return;
    $("#submit-json").value = JSON.stringify(s.spec, null, 2);
    $("#submit-message").hidden = true;
    this.renderFields();
  },
  async loadBenches() {
    const box = $("#bench-menu");
    let body;
    try { body = await apiJson("/benches"); } catch (err) {
      box.replaceChildren(h("p", { class: "muted" }, `The bench menu is not available (${err.message}).`));
      return;
    }
    const list = Array.isArray(body) ? body : Array.isArray(body.benches) ? body.benches : Object.entries(body.benches || body).map(([name, b]) => ({ name, ...b }));
    box.replaceChildren(...list.map((b) => {
      const out = h("pre", { class: "small", hidden: true });
      const start = async (dry) => {
        const resp = await api(`/benches/${encodeURIComponent(b.name)}${dry ? "?dry_run=true" : ""}`, { method: "POST" });
        const res = await resp.json().catch(() => null);
        if (resp.ok && res && res.id) { location.hash = `#/runs/${res.id}`; return; } // a dry run is a run too
        out.hidden = false;
        out.textContent = resp.ok ? JSON.stringify(res, null, 2) : `${resp.status}: ${new ApiFailure(resp.status, res).message}`;
      };
      const asSpec = () => { $("#submit-json").value = JSON.stringify({ kind: "bench", bench: b.name, baseline: "none", router: "none" }, null, 2); this.renderFields(); };
      return h("div", { class: "bench", "data-bench": b.name },
        h("strong", {}, b.name), b.families ? h("span", { class: "muted" }, ` · ${[].concat(b.families).join(", ")}`) : null,
        h("p", { class: "small" }, b.description || ""),
        h("button", { type: "button", onclick: () => start(false) }, "Start"), " ",
        h("button", { type: "button", onclick: () => start(true) }, "Dry run"), " ",
        h("button", { type: "button", onclick: asSpec }, "Edit as spec"), out);
    }));
  },
};

window.addEventListener("hashchange", route);
window.addEventListener("DOMContentLoaded", () => { showApiState(); route(); });
