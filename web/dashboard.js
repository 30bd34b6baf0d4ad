/*
 * dashboard.js — the kvtier dashboard: polls the control plane's JSON
 * endpoints every second, keeps two minutes of history, draws its own
 * charts on canvas (no library: two line charts do not need one) and
 * changes the policy with PUT /v1/policy. Uses only documented endpoints.
 */
"use strict";

const REFRESH_MS = 1000;
const HISTORY = 120;
const history = [];          // {hits: {tier: ratio}, load, store}: per refresh
let hitTiers = ["l1"];      // the tiers configured, in order: the hit chart's series
let last = null;             // the previous /v1/stats answer and when it came
let policyShown = false;     // the form is filled once, then left to the operator

const $ = (id) => document.getElementById(id);

function fmtBytes(n) {
  const units = ["B", "KiB", "MiB", "GiB", "TiB"];
  let i = 0;
  while (n >= 1024 && i < units.length - 1) { n /= 1024; i++; }
  return (i ? n.toFixed(1) : String(n)) + " " + units[i];
}
const fmtInt = (n) => Number(n).toLocaleString("en-US");

function fmtSeconds(s) {
  if (s === null) return "–";
  if (s < 1e-3) return (s * 1e6).toFixed(0) + " µs";
  if (s < 1) return (s * 1e3).toFixed(1) + " ms";
  return s.toFixed(2) + " s";
}

async function getJSON(path) {
  const r = await fetch(path, { cache: "no-store" });
  if (!r.ok) throw new Error(path + ": " + r.status);
  return r.json();
}

/* --- charts --- */

function drawChart(canvas, series, maxFixed) {
  const dpr = window.devicePixelRatio || 1;
  const w = canvas.clientWidth, h = canvas.clientHeight;
  if (canvas.width !== Math.round(w * dpr)) {
    canvas.width = Math.round(w * dpr);
    canvas.height = Math.round(h * dpr);
  }
  const g = canvas.getContext("2d");
  g.setTransform(dpr, 0, 0, dpr, 0, 0);
  g.clearRect(0, 0, w, h);
  let max = maxFixed || 0;
  if (!maxFixed) for (const s of series) for (const v of s.values) max = Math.max(max, v);
  if (!max) max = 1;
  const pad = 26;
  g.strokeStyle = "#e3e6ea";
  g.fillStyle = "#667085";
  g.font = "11px system-ui, sans-serif";
  for (let i = 0; i <= 2; i++) {
    const y = 4 + (h - 12) * (1 - i / 2);
    g.beginPath(); g.moveTo(pad, y); g.lineTo(w, y); g.stroke();
    const label = maxFixed ? (max * i / 2 * 100).toFixed(0) + "%" : (max * i / 2).toFixed(max < 1 ? 2 : 1);
    g.fillText(label, 0, y + 4);
  }
  for (const s of series) {
    g.strokeStyle = s.color;
    g.lineWidth = 2;
    g.beginPath();
    s.values.forEach((v, i) => {
      const x = pad + (w - pad) * (i + HISTORY - s.values.length) / (HISTORY - 1);
      const y = 4 + (h - 12) * (1 - v / max);
      if (i) g.lineTo(x, y); else g.moveTo(x, y);
    });
    g.stroke();
  }
}

function drawCharts() {
  const css = getComputedStyle(document.documentElement);
  const col = (n) => css.getPropertyValue(n).trim();
  /* A series per configured tier only: an absent one is not drawn as 0%. */
  drawChart($("chart-hits"), hitTiers.map((name) => (
    { color: col("--" + name), values: history.map((h) => h.hits[name] || 0) })), 1);
  drawChart($("chart-bytes"), [
    { color: col("--load"), values: history.map((h) => h.load) },
    { color: col("--store"), values: history.map((h) => h.store) },
  ]);
}

/* --- numbers --- */

function record(stats, now) {
  if (last) {
    const dt = (now - last.t) / 1000;
    /* Keys each tier answered (L1's own count; below it the tier stack's lookup_hits). */
    const found = {};
    for (const name of hitTiers)
      found[name] = (stats[name].lookup_hits || 0) - ((last.stats[name] || {}).lookup_hits || 0);
    const keys = Object.values(found).reduce((n, v) => n + v, 0) +
      (stats.l1.lookup_misses - last.stats.l1.lookup_misses);
    const hits = {};
    for (const name of hitTiers) hits[name] = keys ? found[name] / keys : 0;
    const d = stats.dataplane, p = last.stats.dataplane;
    history.push({
      hits,
      load: dt > 0 ? (d.bytes_loaded - p.bytes_loaded) / dt / 1e9 : 0,
      store: dt > 0 ? (d.bytes_stored - p.bytes_stored) / dt / 1e9 : 0,
    });
    if (history.length > HISTORY) history.shift();
  }
}

/* The q-quantile of a histogram of counts (upper bounds in seconds). */
function quantile(counts, bounds, q) {
  const total = counts.reduce((x, y) => x + y, 0);
  if (!total) return null;
  let seen = 0;
  for (let i = 0; i < counts.length; i++) {
    seen += counts[i];
    if (seen >= q * total) return i < bounds.length ? bounds[i] : bounds[bounds.length - 1];
  }
  return bounds[bounds.length - 1];
}

function renderLatency(stats) {
  const body = $("latency").tBodies[0];
  const bounds = stats.dataplane.latency_bounds_seconds;
  const rows = [];
  for (const [op, o] of Object.entries(stats.dataplane.ops)) {
    const prev = last && last.stats.dataplane.ops[op];
    const counts = o.buckets.map((c, i) => c - (prev ? prev.buckets[i] : 0));
    rows.push([op, fmtInt(o.requests), fmtSeconds(quantile(counts, bounds, 0.5)),
      fmtSeconds(quantile(counts, bounds, 0.99))]);
  }
  fillRows(body, rows);
}

function fillRows(body, rows) {
  while (body.rows.length > rows.length) body.deleteRow(-1);
  rows.forEach((cells, r) => {
    const tr = body.rows[r] || body.insertRow();
    cells.forEach((text, c) => {
      const td = tr.cells[c] || tr.insertCell();
      if (td.textContent !== text) td.textContent = text;
    });
  });
}

function tierBlock(t, policy) {
  const div = document.createElement("div");
  div.className = "tier";
  div.id = "tier-" + t.name;
  const used = t.capacity_bytes ? t.used_bytes / t.capacity_bytes : 0;
  /* L3 may have no cap: its use, with no share of nothing. */
  const usedText = t.capacity_bytes ? `${fmtBytes(t.used_bytes)} of ${fmtBytes(t.capacity_bytes)}`
    : `${fmtBytes(t.used_bytes)} (no cap)`;
  const color = `var(--${t.name})`;
  let marks = "";
  if (t.name === "l1" && policy && policy.tiers) {
    const w = policy.tiers.l1;
    marks = `<div class="mark" style="left:${w.high_watermark * 100}%" title="high watermark"></div>` +
      `<div class="mark low" style="left:${w.low_watermark * 100}%" title="low watermark"></div>`;
  }
  div.innerHTML =
    `<div class="name"><strong>${t.name.toUpperCase()}</strong>` +
    `<span>${t.state ? t.state : ""}${t.reason ? " (" + t.reason + ")" : ""}</span></div>` +
    `<div class="bar"><div class="fill" style="width:${(used * 100).toFixed(2)}%;background:${color}"></div>${marks}</div>` +
    `<table class="kv">` +
    `<tr><th>used</th><td data-field="used">${usedText}</td></tr>` +
    `<tr><th>items</th><td data-field="items">${fmtInt(t.items)}</td></tr>` +
    `<tr><th>lookup hits</th><td data-field="hits">${fmtInt(t.hits)}</td></tr></table>`;
  return div;
}

function renderTiers(tiers, policy) {
  const box = $("tiers");
  box.replaceChildren(...tiers.tiers.map((t) => tierBlock(t, policy)));
  $("no-l2").hidden = tiers.tiers.some((t) => t.name === "l2");
  const names = tiers.tiers.map((t) => t.name);
  if (names.join() !== hitTiers.join()) {
    hitTiers = names;
    $("hits-legend").replaceChildren(...names.map((n) => {
      const k = document.createElement("span");
      k.className = "k " + n;
      k.textContent = n.toUpperCase();
      return k;
    }));
  }
}

function renderEvictions(stats) {
  const l1 = stats.l1, l2 = stats.l2;
  const rows = [
    ["L1 watermark", l1.evictions_watermark], ["L1 capacity", l1.evictions_capacity],
    ["L1 admin", l1.evictions_admin],
  ];
  if (l2) {
    rows.push(["L1 victims written to L2", l2.victims_written],
      ["L1 victims dropped (L2 behind)", l2.victims_dropped_behind],
      ["L2 region reclaim", l2.items_reclaimed], ["L2 admin", l2.items_dropped_admin],
      ["L2 checksum failures", l2.checksum_failures], ["L2 I/O errors", l2.io_errors]);
  }
  const l3 = stats.l3;
  if (l3) {
    rows.push(["L3 files removed for the cap", l3.files_removed],
      ["L3 checksum failures (quarantined)", l3.checksum_failures],
      ["L3 publishes failed", l3.publish_failed], ["L3 publishes skipped", l3.publish_skipped],
      ["L3 I/O errors", l3.io_errors], ["L3 operations timed out", l3.op_timeouts],
      ["L3 reads abandoned (cancel refused)", l3.reads_abandoned],
      ["L3 abandoned reads still held", l3.reads_held]);
  }
  const t = $("evictions");
  fillRows(t.tBodies[0] || t.createTBody(), rows.map(([k, v]) => [k, fmtInt(v)]));
}

/* L1's dirty share and the writer's rate (evict mode's write-behind to L2). */
function renderWriteBehind(stats, now) {
  const l1 = stats.l1, d = stats.dataplane;
  $("no-writebehind").hidden = !!stats.l2;
  $("writebehind").hidden = !stats.l2;
  if (!stats.l2) return;
  const dt = last ? (now - last.t) / 1000 : 0;
  const rate = dt > 0 ? (l1.written_behind_bytes - last.stats.l1.written_behind_bytes) / dt : 0;
  const share = l1.used_bytes ? (100 * l1.dirty_bytes / l1.used_bytes).toFixed(1) + "% of L1 in use" : "";
  const rows = [
    ["dirty (not yet on L2's disk)", `${fmtBytes(l1.dirty_bytes)} ${share}`],
    ["writer", `${fmtBytes(rate)}/s`],
    ["written behind", fmtInt(l1.written_behind)],
    ["victims clean / dirty", `${fmtInt(l1.evictions_clean)} / ${fmtInt(l1.evictions_dirty)}`],
    ["STORE blocks that waited", `${fmtInt(d.store_waits)} (${fmtInt(d.store_wait_timeouts)} past the bound)`],
    ["waiting now", fmtInt(d.store_waiting)],
  ];
  const t = $("writebehind");
  fillRows(t.tBodies[0] || t.createTBody(), rows);
}

function renderClients(stats) {
  const d = stats.dataplane;
  $("clients").textContent = fmtInt(d.clients_active);
  $("lanes").textContent = fmtInt(d.connections_active);
  $("blocks-stored").textContent = fmtInt(d.blocks_stored);
  $("blocks-loaded").textContent = fmtInt(d.blocks_loaded);
  $("blocks-missing").textContent = fmtInt(d.blocks_load_missing);
  $("no-clients").hidden = d.clients_active > 0;
}

// A quota cell: "none", or the quota with how much of it is used.
function fmtQuota(quota, used) {
  return quota ? `${fmtBytes(quota)} (${Math.round((100 * used) / quota)}%)` : "none";
}

function renderNamespaces(list) {
  const rows = list.namespaces.map((n) => [String(n.id), n.model, n.salted ? "yes" : "no",
    fmtBytes(n.block_bytes), String(n.tp_size), fmtInt(n.l1_items), fmtBytes(n.l1_bytes),
    fmtQuota(n.l1_quota_bytes, n.l1_bytes), fmtBytes(n.l2_bytes || 0),
    fmtQuota(n.l2_quota_bytes || 0, n.l2_bytes || 0)]);
  fillRows($("namespaces").tBodies[0], rows);
  $("no-namespaces").hidden = rows.length > 0;
}

function renderBuffers(list) {
  const rows = list.buffers.map((b) => [String(b.index), b.kind, b.owner, String(b.pid),
    fmtBytes(b.size_bytes)]);
  fillRows($("buffers").tBodies[0], rows);
  $("no-buffers").hidden = rows.length > 0;
}

function renderPolicy(policy) {
  if (policyShown) return;
  policyShown = true;
  $("p-mode").value = policy.mode;
  $("p-high").value = policy.tiers.l1.high_watermark;
  $("p-low").value = policy.tiers.l1.low_watermark;
}

async function refresh() {
  try {
    const [stats, tiers, namespaces, buffers, policy] = await Promise.all([
      getJSON("/v1/stats"), getJSON("/v1/tiers"), getJSON("/v1/namespaces"),
      getJSON("/v1/buffers"), getJSON("/v1/policy"),
    ]);
    const now = Date.now();
    record(stats, now);
    renderLatency(stats);
    renderTiers(tiers, policy);
    renderEvictions(stats);
    renderWriteBehind(stats, now);
    renderClients(stats);
    renderNamespaces(namespaces);
    renderBuffers(buffers);
    renderPolicy(policy);
    drawCharts();
    last = { stats, t: now };
    $("down").hidden = true;
    $("updated").textContent = "updated " + new Date(now).toLocaleTimeString();
    document.body.dataset.refreshes = String(Number(document.body.dataset.refreshes || 0) + 1);
  } catch (e) {
    if ($("down").hidden) $("down-since").textContent = "since " + new Date().toLocaleTimeString();
    $("down").hidden = false;
  }
}

/* --- the policy form --- */

function showErrors(message) {
  for (const el of document.querySelectorAll(".field-error")) el.textContent = "";
  if (!message) return;
  // The API names the field first: "tiers.l1.low_watermark: must be ...".
  let shown = false;
  for (const el of document.querySelectorAll(".field-error")) {
    if (message.startsWith(el.dataset.for + ":") || message.startsWith(el.dataset.for + " ")) {
      el.textContent = message;
      shown = true;
    }
  }
  if (!shown) $("p-status").textContent = message;
}

async function applyPolicy(ev) {
  ev.preventDefault();
  $("p-status").textContent = "";
  showErrors(null);
  const num = (v) => (v.trim() !== "" && !isNaN(Number(v)) ? Number(v) : v);
  const body = {
    mode: $("p-mode").value,
    tiers: { l1: { high_watermark: num($("p-high").value), low_watermark: num($("p-low").value) } },
  };
  const token = $("p-token").value.trim();
  const headers = { "Content-Type": "application/json" };
  if (token) headers.Authorization = "Bearer " + token;
  try {
    const r = await fetch("/v1/policy", { method: "PUT", headers, body: JSON.stringify(body) });
    const answer = await r.json();
    if (r.ok) {
      $("p-status").textContent = "applied";
      policyShown = false;
      renderPolicy(answer);
    } else if (r.status === 401) {
      showErrors("token: " + answer.error.message);
    } else {
      showErrors(answer.error.message);
    }
  } catch (e) {
    $("p-status").textContent = "kvtierd did not answer";
  }
}

$("policy").addEventListener("submit", applyPolicy);
refresh();
setInterval(refresh, REFRESH_MS);
window.addEventListener("resize", drawCharts);
