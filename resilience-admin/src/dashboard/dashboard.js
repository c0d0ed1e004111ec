// The resilience-admin dashboard: plain JavaScript, no build step. It reads the JSON
// API of the server that serves it and draws its charts as inline SVG.
"use strict";

const CYCLE_MS = 10000;
const REFRESH_MS = 5000;
const COLORS = {
  visits: "#2563eb",
  passes: "#16a34a",
  exceptions: "#c026d3",
  timeouts: "#ea580c",
};
// One color per downgrade reason (the runtime's `Reason` names).
const REASON_COLORS = {
  visits: "#dc2626",
  token_bucket: "#d97706",
  concurrency: "#7c3aed",
  timeouts: "#0891b2",
  exceptions: "#be185d",
  exception_rate: "#4d7c0f",
  delay: "#475569",
  breaker_open: "#000000",
};
const EXTRA_COLORS = ["#9333ea", "#0d9488", "#b45309", "#1d4ed8"];

const state = {
  app: null, // {group, name}
  point: null, // selected point name, null = all points
  policy: null, // current policy answer
  formDirty: false,
  timer: null,
};

const $ = (sel) => document.querySelector(sel);

function token() {
  return $("#token").value.trim();
}

function setStatus(text, isError) {
  const s = $("#status");
  s.textContent = text;
  s.className = isError ? "error" : "";
}

async function api(method, path, body) {
  const headers = { Accept: "application/json" };
  if (token()) headers.Authorization = "Bearer " + token();
  if (body !== undefined) headers["Content-Type"] = "application/json";
  const res = await fetch(path, {
    method,
    headers,
    body: body === undefined ? undefined : JSON.stringify(body),
    cache: "no-store",
  });
  let data = null;
  try {
    data = await res.json();
  } catch (e) {
    data = null;
  }
  return { ok: res.ok, status: res.status, data };
}

function appPath(suffix) {
  const a = state.app;
  return "/api/v1/apps/" + encodeURIComponent(a.group) + "/" + encodeURIComponent(a.name) + suffix;
}

function el(tag, attrs, children) {
  const e = document.createElement(tag);
  for (const [k, v] of Object.entries(attrs || {})) {
    if (k === "text") e.textContent = v;
    else if (k === "class") e.className = v;
    // Through the CSSOM: the page's CSP forbids style attributes.
    else if (k === "color") e.style.backgroundColor = v;
    else e.setAttribute(k, v);
  }
  for (const c of children || []) e.append(c);
  return e;
}

function svg(tag, attrs) {
  const e = document.createElementNS("http://www.w3.org/2000/svg", tag);
  for (const [k, v] of Object.entries(attrs || {})) e.setAttribute(k, v);
  return e;
}

function time(ms) {
  if (ms === null || ms === undefined) return "never";
  const d = new Date(ms);
  return d.toLocaleTimeString([], { hour12: false });
}

function ago(ms, now) {
  if (ms === null || ms === undefined) return "never";
  const s = Math.max(0, Math.round((now - ms) / 1000));
  return s < 120 ? s + " s ago" : Math.round(s / 60) + " min ago";
}

// ---- apps ----

async function loadApps() {
  const r = await api("GET", "/api/v1/apps");
  if (!r.ok) {
    setStatus(errorText(r), true);
    document.body.dataset.state = "error";
    return;
  }
  const select = $("#app");
  const current = select.value;
  select.textContent = "";
  if (r.data.apps.length === 0) {
    select.append(el("option", { value: "", text: "(no app yet)" }));
  }
  for (const a of r.data.apps) {
    const key = a.group + "/" + a.name;
    select.append(el("option", { value: key, text: key + " (v" + a.policy_version + ")" }));
  }
  const keys = r.data.apps.map((a) => a.group + "/" + a.name);
  select.value = keys.includes(current) ? current : keys[0] || "";
  selectApp(select.value);
}

function selectApp(key) {
  if (!key) {
    state.app = null;
    document.body.dataset.state = "ready";
    return;
  }
  const i = key.indexOf("/");
  const app = { group: key.slice(0, i), name: key.slice(i + 1) };
  const changed = !state.app || state.app.group !== app.group || state.app.name !== app.name;
  state.app = app;
  if (changed) {
    state.point = null;
    state.policy = null;
    state.formDirty = false;
  }
  refresh();
}

// ---- refresh of one app ----

async function refresh() {
  if (!state.app) return;
  try {
    await Promise.all([loadPoints(), loadInstances(), loadStats(), loadPolicy(), loadHistory()]);
    setStatus("updated " + time(Date.now()), false);
    document.body.dataset.state = "ready";
  } catch (e) {
    setStatus("cannot reach the server: " + e.message, true);
  }
}

async function loadPoints() {
  const r = await api("GET", appPath("/points"));
  if (!r.ok) throw new Error(errorText(r));
  const body = $("#points tbody");
  body.textContent = "";
  const all = el("tr", { "data-point": "", class: state.point === null ? "selected" : "" }, [
    el("td", { text: "(all points)", colspan: "7" }),
  ]);
  all.addEventListener("click", () => selectPoint(null));
  body.append(all);
  for (const p of r.data.points) {
    const c = p.last_cycle;
    const n = (k) => (c ? String(c[k]) : "-");
    const name = el("td", {}, [p.name]);
    if (p.declared) name.append(el("span", { class: "badge", text: "declared" }));
    if (!c) name.append(el("span", { class: "badge quiet", text: "no traffic" }));
    const row = el(
      "tr",
      { "data-point": p.name, class: state.point === p.name ? "selected" : "" },
      [
        name,
        el("td", { text: p.has_policy ? "yes" : "-" }),
        el("td", { text: n("visits") }),
        el("td", { text: n("passes") }),
        el("td", { text: n("downgrades") }),
        el("td", { text: n("exceptions") }),
        el("td", { text: n("timeouts") }),
      ],
    );
    row.addEventListener("click", () => selectPoint(p.name));
    body.append(row);
  }
}

async function loadInstances() {
  const r = await api("GET", appPath("/instances"));
  if (!r.ok) throw new Error(errorText(r));
  const body = $("#instances tbody");
  body.textContent = "";
  for (const i of r.data.instances) {
    body.append(
      el("tr", { "data-instance": i.instance }, [
        el("td", { text: i.instance }),
        el("td", { text: i.host }),
        el("td", { text: i.protocol }),
        el("td", { text: ago(i.last_heartbeat_ms, r.data.now_ms) }),
        el("td", { class: "instance-version", text: i.policy_version === null ? "-" : "v" + i.policy_version }),
      ]),
    );
  }
}

function selectPoint(name) {
  state.point = name;
  state.formDirty = false;
  for (const row of document.querySelectorAll("#points tbody tr")) {
    row.classList.toggle("selected", (row.dataset.point || null) === name);
  }
  $("#chart-subject").textContent = name === null ? "all points" : name;
  fillForm();
  loadStats();
}

// ---- charts ----

async function loadStats() {
  const range = Number($("#range").value);
  const now = Date.now();
  // Cycles whose reports are in: instances upload a cycle 5 s after it ends, so
  // stop at the last cycle that ended at least 6 s ago.
  const to = now - 6000 - ((now - 6000) % CYCLE_MS);
  const from = to - range;
  let q = "?from=" + from + "&to=" + to;
  if (state.point !== null) q += "&point=" + encodeURIComponent(state.point);
  const r = await api("GET", appPath("/stats" + q));
  if (!r.ok) throw new Error(errorText(r));
  // Sum over points per cycle (one point: its own rows), zero where nothing came.
  const cycles = new Map();
  for (let t = from; t < to; t += CYCLE_MS) cycles.set(t, { visits: 0, passes: 0, exceptions: 0, timeouts: 0, reasons: {} });
  const reasons = new Set();
  for (const row of r.data.rows) {
    const c = cycles.get(row.cycle_start_ms);
    if (!c) continue;
    c.visits += row.visits;
    c.passes += row.passes;
    c.exceptions += row.exceptions;
    c.timeouts += row.timeouts;
    for (const [reason, n] of Object.entries(row.downgrades_by_reason)) {
      c.reasons[reason] = (c.reasons[reason] || 0) + n;
      reasons.add(reason);
    }
  }
  const xs = [...cycles.keys()];
  const values = [...cycles.values()];
  const series = (key) => values.map((c) => c[key]);
  drawChart("traffic", xs, [
    { name: "visits", color: COLORS.visits, values: series("visits") },
    { name: "passes", color: COLORS.passes, values: series("passes") },
  ]);
  let extra = 0;
  drawChart(
    "downgrades",
    xs,
    [...reasons].sort().map((reason) => ({
      name: reason,
      color: REASON_COLORS[reason] || EXTRA_COLORS[extra++ % EXTRA_COLORS.length],
      values: values.map((c) => c.reasons[reason] || 0),
    })),
  );
  drawChart("errors", xs, [
    { name: "exceptions", color: COLORS.exceptions, values: series("exceptions") },
    { name: "timeouts", color: COLORS.timeouts, values: series("timeouts") },
  ]);
}

// A line chart: x = cycle start, y = count per cycle. The legend is HTML beside the
// SVG, so the SVG holds only axes, grid and data.
function drawChart(id, xs, series) {
  const W = 640, H = 180, L = 44, R = 8, T = 8, B = 22;
  const chart = document.getElementById("chart-" + id);
  chart.textContent = "";
  const legend = document.getElementById("legend-" + id);
  legend.textContent = "";
  let max = 0;
  for (const s of series) for (const v of s.values) max = Math.max(max, v);
  const top = niceMax(max);
  const x = (i) => L + (xs.length < 2 ? 0 : (i * (W - L - R)) / (xs.length - 1));
  const y = (v) => T + (H - T - B) * (1 - v / top);
  for (let k = 0; k <= 4; k++) {
    const v = (top * k) / 4;
    chart.append(svg("line", { x1: L, x2: W - R, y1: y(v), y2: y(v), class: "grid" }));
    const label = svg("text", { x: L - 4, y: y(v) + 4, class: "axis", "text-anchor": "end" });
    label.textContent = formatCount(v);
    chart.append(label);
  }
  const ticks = Math.min(6, xs.length);
  for (let k = 0; k < ticks; k++) {
    const i = Math.round((k * (xs.length - 1)) / Math.max(1, ticks - 1));
    const label = svg("text", { x: x(i), y: H - 6, class: "axis", "text-anchor": "middle" });
    label.textContent = time(xs[i]).slice(0, 5);
    chart.append(label);
  }
  if (series.length === 0) {
    const none = svg("text", { x: W / 2, y: H / 2, class: "axis", "text-anchor": "middle" });
    none.textContent = "none in this range";
    chart.append(none);
  }
  for (const s of series) {
    const points = s.values.map((v, i) => x(i).toFixed(1) + "," + y(v).toFixed(1)).join(" ");
    chart.append(svg("polyline", { points, fill: "none", stroke: s.color, "stroke-width": "2.5", "data-series": s.name }));
    const total = s.values.reduce((a, b) => a + b, 0);
    legend.append(
      el("span", { class: "key" }, [
        el("span", { class: "swatch", color: s.color }),
        s.name + " (" + formatCount(total) + ")",
      ]),
    );
  }
  chart.dataset.max = String(max);
}

function niceMax(max) {
  if (max <= 4) return 4;
  const p = Math.pow(10, Math.floor(Math.log10(max)));
  for (const m of [1, 2, 2.5, 5, 10]) if (m * p >= max) return m * p;
  return 10 * p;
}

function formatCount(v) {
  if (v >= 1e6) return (v / 1e6).toFixed(1) + "M";
  if (v >= 1e4) return (v / 1e3).toFixed(0) + "k";
  return String(Math.round(v * 10) / 10);
}

// ---- policy ----

async function loadPolicy() {
  const r = await api("GET", appPath("/policy"));
  if (!r.ok) throw new Error(errorText(r));
  const changed = !state.policy || state.policy.version !== r.data.version;
  state.policy = r.data;
  const p = r.data;
  $("#policy-version").textContent = "v" + p.version;
  $("#policy-version").dataset.version = String(p.version);
  $("#policy-meta").textContent =
    p.version === 0
      ? "No policy yet: every call passes."
      : "by " + p.author + " at " + time(p.created_ms) + (p.comment ? ": " + p.comment : "");
  $("#policy-toml").textContent = p.toml || "(empty)";
  if (changed && !state.formDirty) fillForm();
}

function pointSettings(name) {
  const points = (state.policy && state.policy.policy.points) || {};
  return points[name] || null;
}

function getPath(obj, path) {
  let v = obj;
  for (const k of path.split(".")) {
    if (v === null || v === undefined) return undefined;
    v = v[k];
  }
  return v;
}

function fillForm() {
  clearFieldErrors();
  const name = state.point;
  $("#form-point").textContent = name === null ? "(select a point)" : name;
  const settings = name === null ? null : pointSettings(name);
  for (const input of document.querySelectorAll("#policy-form [data-kind]")) {
    const v = settings ? getPath(settings, input.dataset.field) : undefined;
    if (input.dataset.kind === "bool") input.checked = v === true;
    else input.value = v === undefined || v === null ? "" : String(v);
    input.disabled = name === null;
  }
  $("#save").disabled = name === null;
  $("#remove").disabled = name === null || !settings;
}

// The point's settings from the form: empty inputs are left out; numbers that parse
// are sent as numbers, anything else as typed, for the server to judge.
function formSettings() {
  const out = {};
  for (const input of document.querySelectorAll("#policy-form [data-kind]")) {
    let value;
    if (input.dataset.kind === "bool") {
      if (!input.checked) continue;
      value = true;
    } else {
      const text = input.value.trim();
      if (text === "") continue;
      value = input.dataset.kind === "number" && text !== "" && !isNaN(Number(text)) ? Number(text) : text;
    }
    const path = input.dataset.field.split(".");
    let target = out;
    for (const k of path.slice(0, -1)) target = target[k] = target[k] || {};
    target[path[path.length - 1]] = value;
  }
  return out;
}

function clearFieldErrors() {
  for (const e of document.querySelectorAll(".field-error")) e.textContent = "";
  for (const i of document.querySelectorAll("#policy-form .invalid")) i.classList.remove("invalid");
}

function clearErrors() {
  clearFieldErrors();
  $("#form-message").textContent = "";
  $("#form-message").className = "";
}

function showProblems(problems) {
  const general = [];
  for (const p of problems || []) {
    const slot = p.field && p.point === state.point && document.querySelector('.field-error[data-field="' + CSS.escape(p.field) + '"]');
    if (slot) {
      slot.textContent = p.message;
      const input = document.querySelector('#policy-form [data-field="' + CSS.escape(p.field) + '"][data-kind]');
      if (input) input.classList.add("invalid");
    } else {
      general.push((p.point ? p.point + (p.field ? "." + p.field : "") + ": " : p.field ? p.field + ": " : "") + p.message);
    }
  }
  return general;
}

function message(text, isError) {
  const m = $("#form-message");
  m.textContent = text;
  m.className = isError ? "error" : "ok";
}

function errorText(r) {
  if (r.data && r.data.error) return r.data.error.message;
  return "HTTP " + r.status;
}

async function submitPolicy(settings) {
  clearErrors();
  const author = $("#author").value.trim();
  if (!author) {
    message("Enter your name as the author of the change.", true);
    return;
  }
  localStorage.setItem("resilience-admin-author", author);
  const doc = JSON.parse(JSON.stringify(state.policy.policy));
  doc.points = doc.points || {};
  if (settings === null) delete doc.points[state.point];
  else doc.points[state.point] = settings;
  const r = await api("PUT", appPath("/policy"), {
    base_version: state.policy.version,
    author,
    comment: $("#comment").value,
    policy: doc,
  });
  if (r.ok) {
    state.formDirty = false;
    $("#comment").value = "";
    message(r.data.changed ? "Saved as version " + r.data.version + "." : "Nothing changed.", false);
    await refresh();
    return;
  }
  if (r.status === 409) {
    message(
      "Someone else changed the policy meanwhile (now version " +
        r.data.error.current_version +
        "). Your edit was not saved: check the new version, then apply your change again.",
      true,
    );
    state.formDirty = true;
    await Promise.all([loadPolicy(), loadHistory()]);
    return;
  }
  if (r.status === 422) {
    const general = showProblems(r.data.error.problems);
    message("The policy was not saved: fix the marked fields." + (general.length ? " " + general.join("; ") : ""), true);
    return;
  }
  message(errorText(r), true);
}

// ---- history ----

async function loadHistory() {
  const r = await api("GET", appPath("/policy/versions"));
  if (!r.ok) throw new Error(errorText(r));
  const body = $("#history tbody");
  body.textContent = "";
  const current = r.data.versions.length ? r.data.versions[0].version : 0;
  for (const v of r.data.versions) {
    const changes = el("ul", { class: "diff" });
    for (const d of v.diff) changes.append(el("li", { text: describeChange(d) }));
    if (v.restored_from !== null) changes.append(el("li", { class: "hint", text: "restores v" + v.restored_from }));
    const cell = el("td");
    if (v.version !== current) {
      const button = el("button", { type: "button", class: "restore", "data-version": String(v.version), text: "Restore" });
      button.addEventListener("click", () => restore(v.version));
      cell.append(button);
    } else {
      cell.append(el("span", { class: "badge", text: "current" }));
    }
    body.append(
      el("tr", { "data-version": String(v.version) }, [
        el("td", { text: "v" + v.version }),
        el("td", { text: v.author }),
        el("td", { text: time(v.created_ms) }),
        el("td", {}, [v.comment ? el("div", { class: "hint", text: v.comment }) : "", changes]),
        cell,
      ]),
    );
  }
}

function describeChange(d) {
  const show = (v) => (v === null || v === undefined ? "unset" : JSON.stringify(v));
  const where = (d.point || "") + (d.point && d.field ? "." : "") + (d.field || "");
  if (d.field === null && d.old === null) return where + ": added " + show(d.new);
  if (d.field === null && d.new === null) return where + ": removed";
  return where + ": " + show(d.old) + " -> " + show(d.new);
}

async function restore(version) {
  const author = $("#author").value.trim();
  if (!author) {
    message("Enter your name as the author of the restore.", true);
    return;
  }
  const r = await api("POST", appPath("/policy/versions/" + version + "/restore"), {
    base_version: state.policy.version,
    author,
  });
  if (r.ok) {
    state.formDirty = false;
    message("Version " + version + " restored as version " + r.data.version + ".", false);
    await refresh();
  } else {
    message(errorText(r), true);
    await Promise.all([loadPolicy(), loadHistory()]);
  }
}

// ---- start ----

function start() {
  // A token in the URL fragment (`/#token=...`) is taken once and removed from the
  // address bar; it never travels to the server in a URL.
  const m = /(?:^#|&)token=([^&]+)/.exec(location.hash);
  if (m) {
    sessionStorage.setItem("resilience-admin-token", decodeURIComponent(m[1]));
    history.replaceState(null, "", location.pathname);
  }
  $("#token").value = sessionStorage.getItem("resilience-admin-token") || "";
  $("#author").value = localStorage.getItem("resilience-admin-author") || "";
  $("#token").addEventListener("change", () => {
    sessionStorage.setItem("resilience-admin-token", token());
    loadApps();
  });
  $("#app").addEventListener("change", (e) => selectApp(e.target.value));
  $("#range").addEventListener("change", () => loadStats());
  $("#policy-form").addEventListener("input", () => (state.formDirty = true));
  $("#policy-form").addEventListener("submit", (e) => {
    e.preventDefault();
    submitPolicy(formSettings());
  });
  $("#remove").addEventListener("click", () => submitPolicy(null));
  fillForm();
  loadApps();
  // New apps and instances show up without a reload.
  state.timer = setInterval(loadApps, REFRESH_MS);
}

start();
