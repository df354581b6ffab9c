// The run page: the live status card (SSE), stages and their manifests, artifacts, the
// scorecard, the failure, cancel, and the plots (training curves, hill-climb, bench).
"use strict";

const SCORE_KEYS = ["train_score", "anchor_score", "failure_rate", "recovery_rate", "generalization_gap"];
const DECISIONS = new Set(["best", "branch", "discard", "failed"]);
const EVAL_KEY = /(acc|accuracy|anchor|score)/i;
const WRAPPED = new Set(["knob_diff", "reason"]); // ledger columns of free text
// The run page replays only this many of a run's latest events (plots show their window).
const RECENT_EVENTS = 200;
// A train run's features of most gain shown on its page (the summary may list more).
const TOP_FEATURES = 10;

// Scorecards (worker/evaluate, format trm-scorecard/1) keep each score as {value, n, ci95} under
// `scores`, and the plain number at the top level; a bench adds `baseline`, `router`, `delta`.
// Read tolerantly: a missing key is "-", a real 0.0 is a score.
function pair(v) {
  if (Array.isArray(v) && v.length === 2) return v;
  if (v && typeof v === "object") {
    const lo = v.lo ?? v.low ?? v.lower, hi = v.hi ?? v.high ?? v.upper;
    if (typeof lo === "number") return [lo, hi];
  }
  return null;
}

function score(card, key) {
  const out = { value: null, lo: null, hi: null, n: null };
  if (!card) return out;
  const v = card.scores && card.scores[key] !== undefined ? card.scores[key] : card[key];
  if (typeof v === "number") out.value = v;
  else if (v && typeof v === "object") {
    out.value = [v.value, v.score, v.mean].find((x) => typeof x === "number") ?? null;
    const iv = pair(v.ci95 ?? v.ci ?? v.interval);
    if (iv) [out.lo, out.hi] = iv;
    if (typeof v.n === "number") out.n = v.n;
  }
  if (out.n === null && card.n && typeof card.n === "object") {
    const n = card.n[key] ?? card.n[key.replace(/_score$/, "")];
    if (typeof n === "number") out.n = n;
  }
  return out;
}

// {family: {anchor_score, train_score}} from `per_family` (a number means an anchor score).
function families(card) {
  const raw = card && (card.per_family ?? card.families);
  const out = {};
  if (!raw || typeof raw !== "object") return out;
  const entries = Array.isArray(raw) ? raw.map((f) => [f.family ?? f.name, f]) : Object.entries(raw);
  for (const [name, f] of entries) {
    out[name] = typeof f === "number"
      ? { anchor_score: { value: f, lo: null, hi: null, n: null } }
      : { anchor_score: score(f, "anchor_score"), train_score: score(f, "train_score") };
  }
  return out;
}

const interval = (s) => (s.lo !== null && s.hi !== null ? `[${num(s.lo)}, ${num(s.hi)}]` : "-");

views.run = {
  enter(id) {
    this.leave();
    Object.assign(this, { id, run: null, metrics: [], ledger: null, scorecard: null, artifacts: [], corpusManifest: null, summary: null });
    for (const sel of ["#run-card", "#run-facts", "#run-plots", "#run-stages", "#run-artifacts", "#run-spec", "#run-scorecard", "#run-ledger"]) $(sel).replaceChildren();
    setText($("#run-title"), `Run ${id}`);
    setText($("#run-live"), "");
    $("#run-failure").hidden = true;
    $("#run-cancel").hidden = true;
    $("#run-scorecard-box").hidden = true;
    $("#run-features-box").hidden = true;
    $("#run-features").replaceChildren();
    $("#run-ledger-box").hidden = true;
    $("#run-cancel").onclick = () => this.cancel();
    this.refreshRun = throttle(() => this.loadRun(), 500);
    this.refreshCard = throttle(() => this.loadCard(), 300);
    this.refreshPlots = throttle(() => this.drawPlots(), 400);
    this.refreshLedger = throttle(() => this.loadLedger(), 700);
    this.refreshArtifacts = throttle(() => this.loadArtifacts(), 1500);
    this.refreshRun();
    this.refreshCard();
    this.refreshArtifacts();
    // The card and the run come from their own GETs above; the stream starts at the run's last
    // RECENT_EVENTS events, not at 0 (a long run's whole history would be replayed into the page).
    this.stream = new EventStream(`/runs/${encodeURIComponent(id)}/events?tail=${RECENT_EVENTS}`, (ev) => this.onEvent(ev), (state) => this.onStreamState(state), async () => {
      const run = await apiJson(`/runs/${encodeURIComponent(id)}`).catch(() => null);
      return Boolean(run && TERMINAL.has(run.status));
    });
    window.trmStream = this.stream; // for the browser tests and the curious
  },
  leave() {
    if (this.stream) this.stream.close();
    this.stream = null;
  },
  onStreamState(state) {
    const s = this.stream;
    const extra = s && s.reconnects ? ` · reconnected ${s.reconnects}×` : "";
    const label = state === "live" ? "● live" : state === "ended" ? "stream ended" : state === "reconnecting" ? "reconnecting…" : state;
    setText($("#run-live"), `${label}${extra} · ${s ? s.seen.length : 0} events`);
    $("#run-live").dataset.state = state;
    if (state === "ended") { this.refreshRun(); this.refreshCard(); this.refreshArtifacts(); this.refreshLedger(); }
  },
  onEvent(ev) {
    if (ev.type === "metric") { this.metrics.push(ev.data); this.refreshPlots(); }
    else if (ev.type === "card" || ev.type === "status") { this.refreshCard(); if (ev.type === "status") this.refreshRun(); }
    else if (ev.type === "stage") { this.refreshRun(); this.refreshArtifacts(); }
    else if (ev.type === "ledger") this.refreshLedger();
    const s = this.stream;
    setText($("#run-live"), `${s.ended ? "stream ended" : "● live"}${s.reconnects ? ` · reconnected ${s.reconnects}×` : ""} · ${s.seen.length} events`);
  },
  async loadRun() {
    const run = await apiJson(`/runs/${encodeURIComponent(this.id)}`);
    this.run = run;
    const badge = $("#run-status");
    setText(badge, run.status);
    badge.className = `status ${run.status}`;
    setText($("#run-title"), `${run.kind} run ${run.id}${run.name ? ` · ${run.name}` : ""}`);
    $("#run-cancel").hidden = TERMINAL.has(run.status);
    $("#run-failure").hidden = run.status !== "failed" && !run.failure_reason;
    setText($("#run-failure-class"), run.failure_class || run.status);
    setText($("#run-failure-reason"), run.failure_reason || "");
    this.renderFacts(run);
    this.renderStages(run.stages || []);
    setText($("#run-spec"), JSON.stringify(run.spec, null, 2));
    if (run.kind === "hillclimb" && !this.ledger) this.refreshLedger();
    this.drawPlots();
  },
  async loadCard() {
    const resp = await api(`/runs/${encodeURIComponent(this.id)}/card?format=text`);
    if (resp.ok) setText($("#run-card"), await resp.text());
  },
  async loadLedger() {
    const resp = await api(`/runs/${encodeURIComponent(this.id)}/ledger`);
    if (!resp.ok) return;
    this.ledger = (await resp.json()).entries || [];
    if (this.ledger.length || (this.run && this.run.kind === "hillclimb")) this.renderLedger();
    this.drawPlots();
  },
  async loadArtifacts() {
    const resp = await api(`/runs/${encodeURIComponent(this.id)}/artifacts`);
    if (!resp.ok) return;
    this.artifacts = (await resp.json()).artifacts;
    const list = $("#run-artifacts");
    list.replaceChildren(...this.artifacts.map((a) => h("li", { "data-artifact": a.path },
      h("a", { href: this.artifactUrl(a.path), title: a.path, download: a.path.split("/").pop(), onclick: (e) => this.download(e, a.path) }, a.path),
      h("span", { class: "muted size", title: `${a.bytes.toLocaleString()} bytes` }, bytesText(a.bytes)))));
    if (!this.artifacts.length) list.append(h("li", { class: "muted" }, "nothing yet"));
    const card = this.artifacts.find((a) => a.path === "scorecard.json") || this.artifacts.find((a) => a.path.endsWith("scorecard.json"));
    if (card) {
      const resp2 = await api(this.artifactUrl(card.path));
      if (resp2.ok) { this.scorecard = await resp2.json(); this.renderScorecard(); this.drawPlots(); }
    }
    // A finished train run's summary: the model's features of most gain (worker/kinds/train.py).
    if (!this.summary && this.artifacts.some((a) => a.path === "summary.json")) {
      const resp4 = await api(this.artifactUrl("summary.json"));
      if (resp4.ok) { this.summary = await resp4.json(); this.renderFeatures(); }
    }
    // The corpus builder's own manifest (corpus.plan.json on a dry run) has the invalid-row reasons.
    const corpus = ["corpus/manifest.json", "corpus.plan.json"].find((p) => this.artifacts.some((a) => a.path === p));
    if (corpus && !this.corpusManifest) {
      const resp3 = await api(this.artifactUrl(corpus));
      if (resp3.ok) { this.corpusManifest = await resp3.json(); if (this.run) this.renderStages(this.run.stages || []); }
    }
  },
  artifactUrl(path) {
    return `/runs/${encodeURIComponent(this.id)}/artifacts/${path.split("/").map(encodeURIComponent).join("/")}`;
  },
  async download(event, path) {
    if (!sessionStorage.getItem(TOKEN_KEY)) return; // a plain link works without a token
    event.preventDefault();
    const resp = await api(this.artifactUrl(path));
    const url = URL.createObjectURL(await resp.blob());
    h("a", { href: url, download: path.split("/").pop() }).click();
    setTimeout(() => URL.revokeObjectURL(url), 10000);
  },
  async cancel() {
    const button = $("#run-cancel");
    button.disabled = true;
    try { await apiJson(`/runs/${encodeURIComponent(this.id)}/cancel`, { method: "POST" }); }
    catch (err) { alert(`cancel refused: ${err.message}`); }
    button.disabled = false;
    this.refreshRun();
  },
  renderFacts(run) {
    const usage = run.usage || {};
    const facts = [
      ["status", run.status], ["phase", run.phase || "-"], ["percent", `${run.percent.toFixed(1)}%`],
      ["best anchor", num(run.best_anchor)], ["attempt", `${run.attempt} of ${run.max_attempts}`],
      ["worker", run.worker_id || "-"], ["created", when(run.created_at)], ["started", when(run.started_at)],
      ["finished", when(run.finished_at)], ["wall time", duration(run.started_at, run.finished_at)],
    ];
    if (run.stopped_by) facts.push(["stopped by", run.stopped_by]);
    if (run.dry_run) facts.push(["dry run", "yes"]);
    for (const [k, v] of Object.entries(usage)) if (v !== null && typeof v !== "object") facts.push([k.replace(/_bytes$/, "").replace(/_/g, " "), figure(k, v)]);
    const dl = $("#run-facts");
    dl.replaceChildren(...facts.flatMap(([k, v]) => [h("dt", {}, k), h("dd", {}, v)]));
    if (run.parent_id) dl.append(h("dt", {}, "parent"), h("dd", {}, h("a", { href: `#/runs/${run.parent_id}` }, run.parent_id)));
  },
  renderStages(stages) {
    const rows = stages.map((s) => {
      const m = s.manifest || {};
      const counters = Object.entries(m.counters || {}).map(([k, v]) => h("span", { class: "chip" }, `${k} ${figure(k, v)}`));
      const invalid = { ...(m.invalid || {}), ...(s.name === "prepare_corpus" && this.corpusManifest ? this.corpusManifest.invalid || {} : {}) };
      const reasons = Object.entries(invalid);
      const extra = [
        ...(m.notes || []).map((n) => h("div", { class: "note" }, n)),
        reasons.length ? h("div", { class: "invalid" }, "invalid rows: ", ...reasons.map(([r, n]) => h("span", { class: "chip bad" }, `${r} ${n}`))) : null,
        m.error ? h("div", { class: "error" }, `${m.error.class || m.error.type || "error"}: ${m.error.message || m.error.reason || JSON.stringify(m.error)}`) : null,
        h("a", { href: this.artifactUrl(`${s.name}/manifest.json`), class: "small", onclick: (e) => this.download(e, `${s.name}/manifest.json`) }, "manifest.json"),
      ];
      return h("tr", { "data-stage": s.name },
        h("td", { class: "stage" }, s.name), h("td", {}, h("span", { class: `status ${s.status}` }, s.status)), h("td", { class: "num" }, String(s.attempt)),
        h("td", {}, when(s.started_at)), h("td", { class: "num" }, s.started_at ? duration(s.started_at, s.completed_at) : "-"),
        h("td", { class: "wrap" }, counters, extra));
    });
    const table = h("table", { class: "stages" }, h("thead", {}, h("tr", {}, ...["stage", "status", "attempt", "started", "took", "counters, notes, errors"].map((t) => h("th", {}, t)))), h("tbody", {}, rows));
    $("#run-stages").replaceChildren(stages.length ? table : h("p", { class: "muted" }, "No stage has started."));
  },
  renderScorecard() {
    const sc = this.scorecard;
    $("#run-scorecard-box").hidden = !sc;
    if (!sc) return;
    const bench = sc.baseline && sc.router && typeof sc.baseline === "object";
    const sides = bench ? [["baseline", sc.baseline], ["router", sc.router]] : [["", sc]];
    const head = h("tr", {}, h("th", {}, "score"),
      ...sides.flatMap(([name]) => [h("th", { class: "num" }, name || "value"), h("th", {}, "95% interval"), h("th", { class: "num" }, "n")]),
      // router − baseline; where the metric is better lower (a makespan gap), a negative delta
      // is the router ahead, and the header says so.
      bench ? [h("th", { class: "num" }, sc.higher_is_better === false ? "delta (lower is better)" : "delta"), h("th", {}, "95% interval")] : null);
    const line = (label, pick, deltaOf) => {
      const vals = sides.map(([, card]) => pick(card));
      if (vals.every((v) => v.value === null)) return null;
      const delta = bench ? deltaOf() : null;
      return h("tr", { "data-score": label }, h("td", {}, label),
        ...vals.flatMap((v) => [h("td", { class: "num" }, num(v.value)), h("td", {}, interval(v)), h("td", { class: "num" }, v.n ?? "-")]),
        bench ? [h("td", { class: "num" }, delta.value === null ? "-" : (delta.value >= 0 ? "+" : "") + delta.value.toFixed(3)), h("td", {}, interval(delta))] : null);
    };
    const rows = SCORE_KEYS.map((k) => line(k.replace(/_/g, " "), (card) => score(card, k), () => {
      const d = score(sc.delta || {}, k);
      if (d.value !== null) return d;
      const [b, r] = sides.map(([, card]) => score(card, k).value);
      return { ...d, value: b !== null && r !== null ? r - b : null };
    }));
    const fams = new Set(sides.flatMap(([, card]) => Object.keys(families(card))));
    for (const f of fams) {
      for (const k of ["anchor_score", "train_score"]) {
        rows.push(line(`${f} · ${k.replace(/_score$/, "")}`, (card) => (families(card)[f] || {})[k] || score(null, k), () => {
          const [b, r] = sides.map(([, card]) => ((families(card)[f] || {})[k] || {}).value ?? null);
          return { value: b !== null && r !== null ? r - b : null, lo: null, hi: null };
        }));
      }
    }
    if (sc.anchor_split && sc.anchor_split !== "anchor") rows.push(h("tr", {}, h("td", { colspan: 9, class: "muted" }, `anchor scores are on the ${sc.anchor_split} split`)));
    for (const note of sc.notes || []) rows.push(h("tr", {}, h("td", { colspan: 9, class: "muted" }, note)));
    const tables = [h("table", { class: "scorecard" }, h("thead", {}, head), h("tbody", {}, rows.filter(Boolean)))];
    // What a user would pick instead (worker/evaluate/references.py), on the router's anchors.
    const refs = Object.entries(sc.references || {});
    if (refs.length) {
      const refHead = h("tr", {}, ...["reference", "model", "anchor", "95% interval", "n", "router − it", "95% interval", "McNemar p"].map((t) => h("th", {}, t)));
      const refRows = refs.map(([name, ref]) => {
        const a = score({ scores: { anchor_score: ref.anchor_score } }, "anchor_score");
        const d = ref.delta || {};
        const dv = d.value === null || d.value === undefined ? "-" : (d.value >= 0 ? "+" : "") + d.value.toFixed(3);
        return h("tr", { "data-reference": name }, h("td", {}, name), h("td", {}, ref.model || "-"),
          h("td", { class: "num" }, num(a.value)), h("td", {}, interval(a)), h("td", { class: "num" }, a.n ?? "-"),
          h("td", { class: "num" }, dv), h("td", {}, interval(Object.fromEntries(["lo", "hi"].map((k, i) => [k, (pair(d.ci95) || [null, null])[i]])))),
          h("td", { class: "num" }, (ref.mcnemar || {}).p_value ?? "-"));
      });
      tables.push(h("table", { class: "scorecard references" }, h("thead", {}, refHead), h("tbody", {}, refRows)));
    }
    // An external bench's every figure (worker/evaluate/external.py `methods`): the data set's
    // own baselines beside the router, per anchor set and metric, the best of each marked (the
    // least where lower is better: `best`).
    const methods = Array.isArray(sc.methods) ? sc.methods : [];
    if (sc.external && methods.length) {
      const best = sc.best || {};
      const methodHead = h("tr", {}, ...["anchors", "method", "metric", "value", "95% interval", "n", "seeds"].map((t) => h("th", {}, t)));
      const methodRows = methods.map((m) => {
        const top = (best[`${m.anchors} ${m.metric}`] || {}).method === m.method;
        const metric = m.higher_is_better === false ? `${m.metric} (lower is better)` : m.metric;
        const ci = pair(m.ci95) || [null, null];
        return h("tr", { "data-method": `${m.anchors} ${m.method}`, class: top ? "best" : null },
          h("td", {}, m.anchors), h("td", {}, top ? `${m.method} (best)` : m.method), h("td", {}, metric),
          h("td", { class: "num" }, num(m.value)), h("td", {}, interval({ lo: ci[0], hi: ci[1] })),
          h("td", { class: "num" }, m.n ?? "-"), h("td", { class: "num" }, m.seeds ?? "-"));
      });
      tables.push(h("table", { class: "scorecard methods" }, h("thead", {}, methodHead), h("tbody", {}, methodRows)));
    }
    $("#run-scorecard").replaceChildren(...tables);
  },
  // The first TOP_FEATURES of the trainer's `top_features` ({feature, gain, meaning}), each in
  // words first, its column name and gain beside it.
  renderFeatures() {
    const top = (this.summary && Array.isArray(this.summary.top_features)) ? this.summary.top_features : [];
    $("#run-features-box").hidden = !top.length;
    const most = Math.max(...top.map((f) => f.gain || 0), 1e-12);
    $("#run-features").replaceChildren(...top.slice(0, TOP_FEATURES).map((f) => h("li", { "data-feature": f.feature },
      h("span", { class: "meaning" }, f.meaning || f.feature), " ",
      h("code", { class: "muted small", title: "feature name" }, f.feature), " ",
      h("span", { class: "muted small", title: `gain ${f.gain}` }, `gain ${Math.round((100 * (f.gain || 0)) / most)}%`))));
  },
  renderLedger() {
    $("#run-ledger-box").hidden = false;
    const cols = ["seq", "candidate_id", "event", "parent_id", "rung", "knob_diff", "status", "train_score", "anchor_score", "generalization_gap", "decision", "reason"];
    const cell = (e, c) => {
      const v = e[c];
      if (c === "candidate_id" && e.run_id) return h("a", { href: `#/runs/${e.run_id}` }, v);
      if (c === "knob_diff" && v && typeof v === "object") return Object.entries(v).map(([k, x]) => `${k}=${typeof x === "object" ? JSON.stringify(x) : x}`).join(", ");
      if (typeof v === "number" && !Number.isInteger(v)) return num(v);
      return v === null || v === undefined ? "-" : typeof v === "object" ? JSON.stringify(v) : String(v);
    };
    $("#run-ledger").replaceChildren(h("table", { class: "ledger" },
      h("thead", {}, h("tr", {}, ...cols.map((c) => h("th", {}, c.replace(/_/g, " "))))),
      h("tbody", {}, this.ledger.map((e) => h("tr", { class: e.decision || "" }, ...cols.map((c) => h("td", { class: WRAPPED.has(c) ? "wrap" : null }, cell(e, c))))))));
  },
  // One point per finished candidate: its last row with a decision, in ledger order.
  candidates() {
    const last = new Map();
    for (const e of [...this.ledger].sort((a, b) => a.seq - b.seq)) if (DECISIONS.has(e.decision)) { last.delete(e.candidate_id); last.set(e.candidate_id, e); }
    return [...last.values()].sort((a, b) => a.seq - b.seq).map((e, i) => ({
      n: i + 1, id: e.candidate_id, score: typeof e.anchor_score === "number" && e.decision !== "failed" ? e.anchor_score : null,
      decision: e.decision, rung: e.rung, reason: e.reason,
    }));
  },
  // An external bench's cost/quality curves (worker/evaluate/external.py: scorecard `methods`,
  // each with its `curve` of [share of strong calls, quality]): one plot per anchor set, one line
  // per router, the router first.
  curveCharts() {
    const methods = this.scorecard && Array.isArray(this.scorecard.methods) ? this.scorecard.methods : [];
    const sets = new Map();
    for (const m of methods) {
      if (!Array.isArray(m.curve) || !m.curve.length) continue;
      if (!sets.has(m.anchors)) sets.set(m.anchors, []);
      sets.get(m.anchors).push({ name: m.method, points: m.curve });
    }
    const first = (s) => (s.name === "router" ? 0 : s.name === "baseline" ? 1 : 2);
    return [...sets].map(([anchors, series]) => TrmPlots.lineChart({
      title: `cost/quality · ${anchors}`, xLabel: "share of strong calls", yLabel: "quality",
      yDomain: [0, 1], xTicks: [0, 0.25, 0.5, 0.75, 1], cls: "curve",
      series: series.sort((a, b) => first(a) - first(b)),
    }));
  },
  drawPlots() {
    const box = $("#run-plots");
    const plots = [];
    const run = this.run || {};
    if (run.kind === "hillclimb" || (this.ledger && this.ledger.length)) {
      const cands = this.ledger ? this.candidates() : [];
      plots.push(cands.length ? TrmPlots.hillclimbChart(cands) : h("p", { class: "muted" }, "No candidate has finished yet."));
    }
    const byStage = new Map();
    const evals = new Map();
    for (const m of this.metrics) {
      if (typeof m.step !== "number") continue;
      if (typeof m.loss === "number") {
        if (!byStage.has(m.stage)) byStage.set(m.stage, []);
        byStage.get(m.stage).push([m.step, m.loss]);
      }
      for (const [k, v] of Object.entries(m)) {
        if (typeof v === "number" && EVAL_KEY.test(k) && !/loss/i.test(k)) {
          if (!evals.has(k)) evals.set(k, []);
          evals.get(k).push([m.step, v]);
        }
      }
    }
    if (byStage.size) plots.push(TrmPlots.lineChart({ title: "training loss", xLabel: "step", yLabel: "loss", series: [...byStage].map(([stage, points]) => ({ name: `loss (${stage})`, points })) }));
    if (evals.size) plots.push(TrmPlots.lineChart({ title: "eval accuracy", xLabel: "step", yLabel: "accuracy", yDomain: [0, 1], series: [...evals].map(([name, points]) => ({ name, points })) }));
    const sc = this.scorecard;
    // An external bench's figure is its data set's metric (APGR runs past 1), not a share of
    // anchors: its curves below say what the per-family chart would.
    if (sc && sc.baseline && sc.router && typeof sc.baseline === "object" && !sc.external) {
      const [base, router] = [families(sc.baseline), families(sc.router)];
      const rows = [{ family: "anchor (all)", baseline: score(sc.baseline, "anchor_score"), router: score(sc.router, "anchor_score") }];
      for (const f of new Set([...Object.keys(base), ...Object.keys(router)])) {
        rows.push({ family: f, baseline: (base[f] || {}).anchor_score, router: (router[f] || {}).anchor_score });
      }
      plots.push(TrmPlots.benchChart(rows));
    }
    for (const chart of this.curveCharts()) plots.push(chart);
    if (!plots.length) plots.push(h("p", { class: "muted" }, "No metrics yet."));
    box.replaceChildren(...plots);
  },
};
