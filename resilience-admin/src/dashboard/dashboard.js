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
  mean: "#0f766e",
  max: "#b91c1c",
};
// One color per downgrade reason (the runtime's `Reason` names).
const REASON_COLORS = {
  visits: "#dc2626",
  token_bucket: "#d97706",
  concurrency: "#7c3aed",
  queue_full: "#a21caf",
  queue_timeout: "#c2410c",
  timeouts: "#0891b2",
  exceptions: "#be185d",
  exception_rate: "#4d7c0f",
  delay: "#475569",
  breaker_open: "#000000",
  hot_key: "#0284c7",
};
const EXTRA_COLORS = ["#9333ea", "#0d9488", "#b45309", "#1d4ed8"];
// How the lines of a chart are drawn, by their order: the first wide and solid, each
// later one thinner and dashed over those before it, so that lines that coincide
// (passes equal to visits, two series at zero) are both seen: the wider one shows
// beside and between the dashes of the other. The legend's swatches show the same.
const LINE_STYLES = [
  { width: 4.5, dash: "" },
  { width: 2.5, dash: "8 5" },
  { width: 2, dash: "2 3" },
  { width: 2, dash: "10 3 2 3" },
];

function lineStyle(i) {
  return LINE_STYLES[Math.min(i, LINE_STYLES.length - 1)];
}

// The legend key of a line: its swatch drawn like the line, and its text.
function legendKey(series, i, text) {
  const swatch = el("span", { class: "swatch line-" + Math.min(i, LINE_STYLES.length - 1), color: series.color });
  return el("span", { class: "key", "data-series": series.name }, [swatch, text]);
}

// The line drawn before `i` whose values are all equal to line `i`'s, if any.
function sameAs(series, i) {
  const v = series[i].values;
  for (let j = 0; j < i; j++) {
    if (series[j].values.every((x, k) => x === v[k])) return series[j];
  }
  return null;
}

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

// ---- tables that fit their box ----
//
// No table scrolls sideways. Cells wrap first (dashboard.css: names, keys and
// messages anywhere, other text at spaces, figures never); a table still wider than
// its box then folds its least important columns away, the highest `data-priority`
// of their header first (a header without one is never folded), until it fits. A
// row with folded cells gets a button in its first cell that shows them in a row
// below it, each under its column's name: every figure stays one click away. The
// folds are undone and made again whenever the table is drawn or its box changes
// width, so a wider window shows the columns again.

const fitView = {
  open: new Map(), // table key -> keys of the rows whose folded cells are shown
  widths: new WeakMap(), // panel -> its width when its tables were last fitted
};

// Refits a panel's tables when its width changes (the window's, or a scroll bar's).
function watchPanels() {
  const observer = new ResizeObserver((entries) => {
    for (const e of entries) {
      if (fitView.widths.get(e.target) === e.target.clientWidth) continue;
      fitView.widths.set(e.target, e.target.clientWidth);
      for (const t of e.target.querySelectorAll("table.fit")) fitTable(t);
    }
  });
  for (const panel of document.querySelectorAll(".panel")) observer.observe(panel);
}

function tableKey(table) {
  return table.id || "hot-keys:" + table.dataset.point;
}

// A row's key among the redraws: the point, instance, key or version it shows.
function rowKey(row) {
  const d = row.dataset;
  return d.point ?? d.instance ?? d.key ?? d.version ?? null;
}

// A name that may wrap after its separators (`order.create` -> `order.` `create`).
function breakable(text) {
  const parts = [];
  for (const piece of String(text).split(/(?<=[./_:-])/)) {
    if (parts.length) parts.push(el("wbr"));
    parts.push(piece);
  }
  return parts;
}

// The columns each cell of a row covers: [cell, first, end]. The colspan a cell was
// drawn with is kept in `data-span`, as folding changes its `colSpan`.
function columnsOf(row) {
  let col = 0;
  return [...row.cells].map((cell) => {
    if (cell.dataset.span === undefined) cell.dataset.span = String(cell.colSpan);
    const span = Number(cell.dataset.span);
    col += span;
    return [cell, col - span, col];
  });
}

function tooWide(table, box) {
  return box.scrollWidth > box.clientWidth || table.offsetWidth > box.clientWidth;
}

// Fits `table` (a `table.fit`) into its parent, as above.
function fitTable(table) {
  const box = table.parentElement;
  if (!box || !table.tHead) return;
  for (const r of table.querySelectorAll("tr.fold-details")) r.remove();
  const heads = [...table.tHead.rows[0].cells];
  const rows = [...table.tBodies].flatMap((b) => [...b.rows]).map((row) => [row, columnsOf(row)]);
  // A cell of one column wraps as its header says.
  for (const [, cells] of rows) {
    for (const [cell, first, end] of cells) {
      const head = heads[first];
      cell.classList.toggle("num", end - first === 1 && !!head && head.hasAttribute("data-num"));
      cell.classList.toggle("any", end - first === 1 && !!head && head.hasAttribute("data-any"));
    }
  }
  const order = heads
    .map((h, i) => [Number(h.dataset.priority || 0), i])
    .filter(([p]) => p > 0)
    .sort((a, b) => b[0] - a[0] || b[1] - a[1])
    .map(([, i]) => i);
  const folded = new Set();
  const open = fitView.open.get(tableKey(table)) || new Set();
  fitView.open.set(tableKey(table), open);
  const names = (first, end) => heads.slice(first, end).map((h) => h.textContent).join(", ");
  const apply = () => {
    heads.forEach((h, i) => h.toggleAttribute("data-folded", folded.has(i)));
    for (const [row, cells] of rows) {
      const hidden = [];
      for (const [cell, first, end] of cells) {
        let shown = 0;
        for (let i = first; i < end; i++) if (!folded.has(i)) shown++;
        cell.toggleAttribute("data-folded", shown === 0);
        if (shown > 0) cell.colSpan = shown;
        else hidden.push(names(first, end));
      }
      foldButton(table, row, hidden, open);
    }
  };
  apply();
  while (folded.size < order.length && tooWide(table, box)) {
    folded.add(order[folded.size]);
    apply();
  }
  for (const [row, cells] of rows) {
    const key = rowKey(row);
    if (key !== null && open.has(key) && cells.some(([cell]) => cell.hasAttribute("data-folded"))) {
      row.after(foldDetails(table, row, cells, heads, names, heads.length - folded.size));
    }
  }
  table.dataset.folded = [...folded].sort((a, b) => a - b).map((i) => heads[i].textContent).join(",");
}

// The button of a row with folded cells (`hidden`: their columns' names), in its
// first cell; none for a row without.
function foldButton(table, row, hidden, open) {
  const key = rowKey(row);
  let button = row.cells[0] && row.cells[0].querySelector(":scope > button.fold");
  if (hidden.length === 0 || key === null) {
    if (button) button.remove();
    return;
  }
  if (!button) {
    button = el("button", { type: "button", class: "fold" });
    button.addEventListener("click", (e) => {
      // Showing a row's figures does not select its point.
      e.stopPropagation();
      if (!open.delete(key)) open.add(key);
      fitTable(table);
    });
    row.cells[0].prepend(button);
  }
  const shown = open.has(key);
  button.setAttribute("aria-expanded", String(shown));
  const label = (shown ? "hide " : "show ") + hidden.join(", ");
  button.setAttribute("aria-label", label);
  button.title = label;
}

// The row below `row` that shows its folded cells: each under its column's name, as
// drawn (a copy; its buttons click the cell's own).
function foldDetails(table, row, cells, heads, names, span) {
  const list = el("dl", { class: "folded" });
  for (const [cell, first, end] of cells) {
    if (!cell.hasAttribute("data-folded")) continue;
    const name = el("dt", { text: names(first, end) });
    if (heads[first].title) name.title = heads[first].title;
    const value = el("dd", { class: cell.className });
    for (const [k, v] of Object.entries(cell.dataset)) if (k !== "span" && k !== "folded") value.dataset[k] = v;
    value.dataset.col = heads[first].textContent;
    value.append(...[...cell.childNodes].map((n) => n.cloneNode(true)));
    const own = cell.querySelectorAll("button");
    value.querySelectorAll("button").forEach((b, i) => {
      b.addEventListener("click", (e) => {
        e.stopPropagation();
        own[i].click();
        fitTable(table);
      });
    });
    list.append(el("div", { class: "folded-cell" }, [name, value]));
  }
  return el("tr", { class: "fold-details", "data-of": rowKey(row) }, [el("td", { colspan: String(span) }, [list])]);
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
    // "group/name", or with a "/" in either, both quoted ("a/b" / "c"), so that two
    // apps never share a label.
    const label = (a.group + a.name).includes("/")
      ? JSON.stringify(a.group) + " / " + JSON.stringify(a.name)
      : a.group + "/" + a.name;
    select.append(el("option", { value: appKeyOf(a.group, a.name), text: label + " (v" + a.policy_version + ")" }));
  }
  const keys = r.data.apps.map((a) => appKeyOf(a.group, a.name));
  select.value = keys.includes(current) ? current : keys[0] || "";
  selectApp(select.value);
}

// The key of an app: its group and name kept apart (a JSON pair), as either may
// contain "/" ("a/b" + "c" is not "a" + "b/c").
function appKeyOf(group, name) {
  return JSON.stringify([group, name]);
}

function selectApp(key) {
  if (!key) {
    state.app = null;
    document.body.dataset.state = "ready";
    return;
  }
  const [group, name] = JSON.parse(key);
  const app = { group, name };
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
    await Promise.all([loadPoints(), loadInstances(), loadStats(), loadPolicy(), loadHistory(), loadEnforcement()]);
    setStatus("updated " + time(Date.now()), false);
    document.body.dataset.state = "ready";
  } catch (e) {
    setStatus("cannot reach the server: " + e.message, true);
  }
}

async function loadPoints() {
  const r = await api("GET", appPath("/points"));
  if (!r.ok) throw new Error(errorText(r));
  $("#points-asof").textContent = "latest closed cycle " + time(r.data.cycle_start_ms) + " (server time " + time(r.data.now_ms) + ").";
  const body = $("#points tbody");
  body.textContent = "";
  const all = el("tr", { "data-point": "", class: state.point === null ? "selected" : "" }, [
    el("td", { text: "(all points)", colspan: "11" }),
  ]);
  all.addEventListener("click", () => selectPoint(null));
  body.append(all);
  for (const p of r.data.points) {
    const row = pointRow(p, r.data.policy_version);
    row.addEventListener("click", () => selectPoint(p.name));
    body.append(row);
  }
  fitTable($("#points"));
  drawRetries(r.data.points);
  drawQueues(r.data.points);
  drawHotKeys(r.data.points);
}

// The retry counters, as the API names them, with the class of their cell.
const RETRY_COUNTERS = ["calls", "attempts", "retries", "exhausted", "refused_by_budget", "hedges", "cancelled"];

function hasRetries(c) {
  return !!(c && c.retry && RETRY_COUNTERS.some((k) => c.retry[k] > 0));
}

// The retries table: a row per point whose latest cycle (not idle) had retrying
// calls; clicking it selects the point.
function drawRetries(points) {
  const body = $("#retries tbody");
  body.textContent = "";
  const shown = points.filter((p) => !p.idle && hasRetries(p.last_cycle));
  for (const p of shown) {
    const c = p.last_cycle;
    const cells = [el("td", {}, breakable(p.name))];
    for (const k of RETRY_COUNTERS) cells.push(el("td", { class: "r-" + k, text: String(c.retry[k] || 0) }));
    cells.push(el("td", { class: "asof", "data-cycle-start-ms": String(c.cycle_start_ms), text: time(c.cycle_start_ms) }));
    const row = el("tr", { "data-point": p.name, class: state.point === p.name ? "selected" : "" }, cells);
    row.addEventListener("click", () => selectPoint(p.name));
    body.append(row);
  }
  $("#retries-none").hidden = shown.length > 0;
  fitTable($("#retries"));
}

// The queue's figures, as the API names them, each its cell's class (`q-` + name).
const QUEUE_COUNTERS = ["waiting", "peak_waiting", "admitted", "timed_out", "cancelled", "refused", "full", "evicted"];

// A wait in ns, as ms.
function waitText(ns) {
  return formatMs(ns / 1e6) + " ms";
}

// The queues table: a row per point whose latest cycle (not idle) had queue figures
// (from any instance); the mean wait is that of the waits that ended in the cycle
// (admitted, timed out, cancelled, refused or evicted), the max the longest of them.
// Clicking a row selects the point.
function drawQueues(points) {
  const body = $("#queues tbody");
  body.textContent = "";
  const shown = points.filter((p) => !p.idle && p.last_cycle && p.last_cycle.queue);
  for (const p of shown) {
    const c = p.last_cycle;
    const q = c.queue;
    const cells = [el("td", {}, breakable(p.name))];
    for (const k of QUEUE_COUNTERS) cells.push(el("td", { class: "q-" + k, text: String(q[k] || 0) }));
    const ended = (q.admitted || 0) + (q.timed_out || 0) + (q.cancelled || 0) + (q.refused || 0) + (q.evicted || 0);
    const mean = ended > 0 ? Math.floor((q.wait_ns || 0) / ended) : null;
    cells.push(el("td", { class: "q-mean_wait", "data-ns": mean === null ? "" : String(mean), text: mean === null ? "-" : waitText(mean) }));
    const max = q.max_wait_ns || 0;
    cells.push(el("td", { class: "q-max_wait", "data-ns": String(max), text: ended > 0 || max > 0 ? waitText(max) : "-" }));
    cells.push(el("td", { class: "asof", "data-cycle-start-ms": String(c.cycle_start_ms), text: time(c.cycle_start_ms) }));
    const row = el("tr", { "data-point": p.name, class: state.point === p.name ? "selected" : "" }, cells);
    row.addEventListener("click", () => selectPoint(p.name));
    body.append(row);
  }
  $("#queues-none").hidden = shown.length > 0;
  fitTable($("#queues"));
}

// The key table's totals, as the API names them, with what the line says of each.
const KEY_TABLE_FIGURES = [
  ["tracked", "tracked"],
  ["untracked_passes", "untracked passes"],
  ["untracked_refused", "untracked refused"],
  ["evictions", "evictions"],
];

// The hot keys: a table per point whose live instances reported hot keys (their
// latest reports, summed by key), the hottest first, with the calls each key's rule
// admitted and refused since the instances track it; below it, the key table's
// totals. Clicking a table selects its point.
function drawHotKeys(points) {
  const box = $("#hot-keys");
  box.textContent = "";
  const shown = points.filter((p) => (p.hot_keys && p.hot_keys.length > 0) || p.key_table);
  for (const p of shown) {
    const rows = (p.hot_keys || []).map((k) =>
      el("tr", { "data-key": k.key, class: k.overridden ? "overridden" : "" }, [
        el("td", { class: "k-key" }, breakable(k.key)),
        el("td", { class: "k-passes", text: String(k.passes) }),
        el("td", { class: "k-refused", text: String(k.refused) }),
        el("td", { class: "k-overridden", text: k.overridden ? "yes" : "" }),
      ]),
    );
    if (rows.length === 0) rows.push(el("tr", { class: "no-keys" }, [el("td", { colspan: "4", text: "no key tracked" })]));
    const table = el("table", { class: "hot-keys fit", "data-point": p.name }, [
      el("caption", {}, [
        el("span", { class: "point" }, breakable(p.name)),
        el("span", { class: "asof hint", "data-cycle-start-ms": String(p.hot_keys_cycle_start_ms || ""), text: " as of " + time(p.hot_keys_cycle_start_ms) + (p.hot_keys_instances > 1 ? ", " + plural(p.hot_keys_instances, "instance") : "") }),
      ]),
      el("thead", {}, [
        el("tr", {}, [
          el("th", { "data-any": "", text: "key" }),
          el("th", { "data-num": "", "data-priority": "1", text: "passes" }),
          el("th", { "data-num": "", "data-priority": "2", text: "refused" }),
          el("th", { "data-priority": "3", text: "override" }),
        ]),
      ]),
      el("tbody", {}, rows),
    ]);
    const wrap = el("div", { class: "hot-keys-point table-scroll", "data-point": p.name, tabindex: "0" }, [table]);
    if (p.key_table) {
      const t = p.key_table;
      const line = el("p", { class: "hint key-table", text: "Key table: " + KEY_TABLE_FIGURES.map(([k, words]) => (t[k] || 0) + " " + words).join(", ") + "." });
      for (const [k] of KEY_TABLE_FIGURES) line.dataset[k.replace(/_(.)/g, (m, c) => c.toUpperCase())] = String(t[k] || 0);
      wrap.append(line);
    }
    wrap.classList.toggle("selected", state.point === p.name);
    wrap.addEventListener("click", () => selectPoint(p.name));
    box.append(wrap);
    fitTable(table);
  }
  $("#hot-keys-none").hidden = shown.length > 0;
}

async function loadInstances() {
  const r = await api("GET", appPath("/instances"));
  if (!r.ok) throw new Error(errorText(r));
  const body = $("#instances tbody");
  body.textContent = "";
  for (const i of r.data.instances) {
    body.append(
      el("tr", { "data-instance": i.instance, class: i.live ? "" : "silent" }, [
        el("td", {}, breakable(i.instance)),
        el("td", {}, breakable(i.host)),
        el("td", { text: i.protocol }),
        el("td", { class: "hb-age", title: time(i.last_heartbeat_ms), text: ago(i.last_heartbeat_ms, r.data.now_ms) }),
        el("td", { class: "instance-version", text: i.policy_version === null ? "-" : "v" + i.policy_version }),
        ...healthCells(i.client),
      ]),
    );
  }
  fitTable($("#instances"));
}

function selectPoint(name) {
  state.point = name;
  state.formDirty = false;
  for (const row of document.querySelectorAll("#points tbody tr[data-point], #retries tbody tr[data-point], #queues tbody tr[data-point], #hot-keys .hot-keys-point")) {
    row.classList.toggle("selected", (row.dataset.point || null) === name);
  }
  $("#chart-subject").textContent = name === null ? "all points" : name;
  fillForm();
  loadStats();
  loadEnforcement();
}

// ---- enforcement: what the instances enforce, drift, breakers, idle points ----
// (the points table's policy, drift, breaker and idle cells, the instances table's
// heartbeat health, and the per-instance table of the selected point)

const enforcementView = {
  point: null, // the point the per-instance table shows
  revealed: new Set(), // instances whose local settings are shown
  texts: new Map(), // instance -> local settings text last fetched
};

function plural(n, word) {
  return n + " " + word + (n === 1 ? "" : "s");
}

// Where the point's policy comes from: `console v3`, `file (2 instances)`, ... Never
// "no policy" for a point an instance enforces something for.
function policySource(p, consoleVersion) {
  const by = p.enforced_by;
  const parts = [];
  const consoleVersions = by.sources.filter((s) => s.kind === "console").flatMap((s) => s.versions);
  if (consoleVersions.length) parts.push("console v" + consoleVersions.join("/"));
  else if (p.has_policy) parts.push("console v" + consoleVersion);
  for (const kind of ["file", "code"]) {
    const n = by.by_kind[kind] || 0;
    if (n) parts.push(kind + " (" + plural(n, "instance") + ")");
  }
  return parts.length ? parts.join(" + ") : "-";
}

function breakerWord(state) {
  return state === "half_open" ? "half-open" : state;
}

function breakerText(b) {
  if (!b) return "-";
  let text = breakerWord(b.state);
  const since = b.state === "closed" ? b.closed_since_ms : b.since_ms;
  if (since !== null && since !== undefined) text += " since " + time(since);
  if (b.instances > 1) {
    const counts = [];
    for (const s of ["open", "half_open", "closed"]) if (b[s]) counts.push(b[s] + " " + breakerWord(s));
    text += " (" + counts.join(", ") + ")";
  }
  return text;
}

// The classic breakers across the fleet, as the last pulls reported them: "open on
// 2 of 3 instances", plus those a quorum opened (they do not count towards it).
function fleetLine(f) {
  const parts = ["open on " + f.open + " of " + plural(f.instances, "instance")];
  if (f.half_open) parts.push(f.half_open + " half-open");
  if (f.by_quorum) parts.push(f.by_quorum + " by quorum");
  const line = el("span", { class: "fleet", text: parts.join(", ") });
  line.dataset.open = String(f.open);
  line.dataset.halfOpen = String(f.half_open);
  line.dataset.byQuorum = String(f.by_quorum);
  line.dataset.instances = String(f.instances);
  return line;
}

function pointRow(p, consoleVersion) {
  const c = p.last_cycle;
  const name = el("td", {}, breakable(p.name));
  if (p.declared) name.append(el("span", { class: "badge", text: "declared" }));
  const drift = p.drift
    ? el("td", { class: "drift", "data-drift": "true" }, [el("span", { class: "badge alert", text: "drift" }), " " + plural(p.drift_instances, "instance")])
    : el("td", { class: "drift", "data-drift": "false", text: "-" });
  const breaker = el("td", { class: "breaker" + (p.breaker ? " breaker-" + p.breaker.state : ""), text: breakerText(p.breaker) });
  if (p.breaker) {
    breaker.dataset.state = p.breaker.state;
    if (p.breaker.since_ms !== null) breaker.dataset.sinceMs = String(p.breaker.since_ms);
  }
  if (p.fleet) breaker.append(fleetLine(p.fleet));
  const cells = [name, el("td", { class: "policy-source", text: policySource(p, consoleVersion) }), drift, breaker];
  if (c && !p.idle) {
    // `cancelled` is 0 from older servers' answers and clients that do not say.
    for (const k of ["visits", "passes", "downgrades", "exceptions", "timeouts", "cancelled"]) cells.push(el("td", { class: "n-" + k, text: String(c[k] || 0) }));
    cells.push(el("td", { class: "asof", "data-cycle-start-ms": String(c.cycle_start_ms), text: time(c.cycle_start_ms) }));
  } else {
    // No old numbers for a point without recent traffic.
    const idle = el("td", { class: "idle", colspan: "6", text: c ? "idle since " + time(p.idle_since_ms) : "no traffic" });
    if (c) idle.dataset.idleSinceMs = String(p.idle_since_ms);
    cells.push(idle, el("td", { class: "asof", text: "-" }));
  }
  return el("tr", { "data-point": p.name, "data-idle": String(p.idle), class: state.point === p.name ? "selected" : "" }, cells);
}

// The heartbeat health cells of an instance: its client's last errors and whether
// its console policies come from its cache file ("-": the client does not say).
function healthCells(h) {
  if (!h) return [el("td", { class: "hb-error", text: "-" }), el("td", { class: "hb-cache", text: "-" })];
  const errors = [];
  if (h.last_upload_error) errors.push("upload: " + h.last_upload_error);
  if (h.last_pull_error) errors.push("pull: " + h.last_pull_error);
  const counts = [];
  if (h.uploads_dropped) counts.push(plural(h.uploads_dropped, "upload") + " dropped");
  if (h.pull_failures) counts.push(plural(h.pull_failures, "pull") + " failed");
  if (h.policies_rejected) counts.push(plural(h.policies_rejected, "version") + " rejected");
  const error = el("td", { class: "hb-error" + (errors.length ? " alert-text" : ""), text: errors.length ? errors.join("; ") : "none" });
  if (counts.length) error.append(el("div", { class: "hint", text: counts.join(", ") }));
  return [error, el("td", { class: "hb-cache", text: h.from_cache ? "yes" : "no" })];
}

async function loadEnforcement() {
  const name = state.point;
  if (name !== enforcementView.point) {
    enforcementView.point = name;
    enforcementView.revealed.clear();
    enforcementView.texts.clear();
  }
  const body = $("#enforcement tbody");
  if (name === null) {
    body.textContent = "";
    $("#enforcement-subject").textContent = "";
    $("#enforcement-hint").textContent = "Select a point to see what each instance enforces for it.";
    fitTable($("#enforcement"));
    return;
  }
  const r = await api("GET", appPath("/points/" + encodeURIComponent(name) + "/instances"));
  if (!r.ok) throw new Error(errorText(r));
  if (state.point !== name) return; // another point was selected meanwhile
  const d = r.data;
  $("#enforcement-subject").textContent = "for " + name;
  $("#enforcement-hint").textContent =
    (d.has_policy ? "The console's v" + d.policy_version + " has settings for this point." : "The console's v" + d.policy_version + " has no settings for this point.") +
    " Each section comes from the highest source that sets it (runtime default: console over file over code)." +
    (d.instances.length ? "" : " No instance reports settings or a breaker for it.");
  body.textContent = "";
  for (const i of d.instances) body.append(...enforcementRows(name, i));
  fitTable($("#enforcement"));
}

// The instance's row, and below it a full-width row for its local settings text.
function enforcementRows(point, i) {
  const who = el("td", {}, breakable(i.instance));
  if (!i.live) who.append(el("span", { class: "badge quiet", text: "silent" }));
  let version = i.console_version === null ? "-" : "v" + i.console_version;
  if (i.policy_version !== null && i.policy_version !== i.console_version) version += " (holds v" + i.policy_version + ")";
  const origins = el("ul", { class: "origins" });
  for (const [section, o] of Object.entries(i.origins)) {
    origins.append(el("li", { "data-section": section, "data-source": o.source, text: section + ": " + o.source + " v" + o.version }));
  }
  const drift = i.drift
    ? el("td", { class: "drift", "data-drift": "true" }, [el("span", { class: "badge alert", text: "drift" }), " " + i.drift_reasons.join(", ").replace(/_/g, " ")])
    : el("td", { class: "drift", "data-drift": "false", text: "no" });
  const b = i.breaker;
  const breaker = el("td", { class: "breaker" + (b ? " breaker-" + b.state : ""), text: b ? breakerWord(b.state) + " since " + time(b.since_ms) + " (" + b.kind + ")" : "-" });
  if (b) breaker.dataset.state = b.state;
  const local = el("td", { class: "local" });
  const localRow = el("tr", { class: "local-row", "data-instance": i.instance });
  localRow.hidden = true;
  if (i.has_local) {
    const text = el("pre", { class: "local-text" });
    localRow.append(el("td", { colspan: "6" }, [text]));
    const button = el("button", { type: "button", class: "reveal-local", "data-instance": i.instance });
    const shown = enforcementView.revealed.has(i.instance);
    button.textContent = shown ? "Hide" : "Show " + i.local_sections.join(", ");
    text.hidden = !shown;
    localRow.hidden = !shown;
    if (shown) {
      text.textContent = enforcementView.texts.get(i.instance) || "";
      showLocal(point, i.instance, text);
    }
    button.addEventListener("click", () => {
      if (enforcementView.revealed.delete(i.instance)) {
        text.hidden = true;
        localRow.hidden = true;
        button.textContent = "Show " + i.local_sections.join(", ");
      } else {
        enforcementView.revealed.add(i.instance);
        text.hidden = false;
        localRow.hidden = false;
        button.textContent = "Hide";
        showLocal(point, i.instance, text);
      }
    });
    local.append(button);
  } else {
    local.textContent = "-";
  }
  const row = el("tr", { class: "instance-row", "data-instance": i.instance }, [who, el("td", { class: "console-version", text: version }), el("td", {}, [origins]), drift, breaker, local]);
  return [row, localRow];
}

// Fetches the local settings the instance sent, as it sent them (JSON).
async function showLocal(point, instance, slot) {
  const r = await api("GET", appPath("/points/" + encodeURIComponent(point) + "/instances/" + encodeURIComponent(instance) + "/local"));
  const text = r.ok ? r.data.text || "(none)" : errorText(r);
  if (r.ok) enforcementView.texts.set(instance, text);
  slot.textContent = text;
  slot.dataset.loaded = "true";
  fitTable($("#enforcement"));
}

// ---- charts ----

// Ranges up to this long are drawn from the 1-second buckets (the server keeps them
// 20 minutes by default), longer ones from the 10-second cycles.
const FINE_RANGE_MS = 15 * 60 * 1000;
// A cycle's heartbeats arrive 5 s after it ends; the charts reload 6 s after each
// cycle ends, so the newest second shown is 6 to 16 s old.
const UPLOAD_DELAY_MS = 6000;

const chartView = {
  seq: 0, // the latest request: older answers arriving late are dropped
  timer: null, // the reload after the next cycle's heartbeats
};

// The statistics of the selected range: 1-second buckets for short ranges, 10-second
// cycles for long ones (and for short ones whose seconds are incomplete: older
// clients and SDS's own send only cycles). One point, or the sum over all points
// (summed by the server). The range ends where the heartbeats are in, by the
// server's clock.
async function loadStats() {
  if (!state.app) return;
  const seq = ++chartView.seq;
  const range = Number($("#range").value);
  const point = state.point;
  let q = "/stats?range=" + range + (point === null ? "&sum=points" : "&point=" + encodeURIComponent(point));
  let d = null;
  let note = "";
  if (range <= FINE_RANGE_MS) {
    const r = await api("GET", appPath(q + "&resolution=1s"));
    if (!r.ok) throw new Error(errorText(r));
    d = r.data;
    if (d.incomplete_cycles.length) {
      note = "10-s cycles: some instances send no per-second figures (older clients, SDS's own) in " + plural(d.incomplete_cycles.length, "cycle") + " of this range.";
      d = null;
    } else if (d.retained_from_ms > d.from_ms) {
      note = "10-s cycles: the server keeps per-second figures for " + Math.round(d.seconds_retention_ms / 60000) + " min only.";
      d = null;
    }
  }
  if (d === null) {
    const r = await api("GET", appPath(q));
    if (!r.ok) throw new Error(errorText(r));
    d = r.data;
  }
  if (seq !== chartView.seq) return; // another range or point was chosen meanwhile
  if (d.truncated) note = (note ? note + " " : "") + "Too many rows: the charts show part of the range.";
  drawStats(d, note);
  // Reload just after the next cycle's heartbeats are in.
  clearTimeout(chartView.timer);
  const wait = d.to_ms + CYCLE_MS + UPLOAD_DELAY_MS - d.now_ms;
  chartView.timer = setTimeout(() => loadStats().catch((e) => setStatus(e.message, true)), Math.min(Math.max(wait, 500), CYCLE_MS + UPLOAD_DELAY_MS));
}

// Draws the charts of a stats answer: one bucket per step of the range, zero where
// nothing was stored; per second also the call durations.
function drawStats(d, note) {
  const step = d.step_ms;
  const buckets = new Map();
  for (let t = d.from_ms; t < d.to_ms; t += step) {
    buckets.set(t, { visits: 0, passes: 0, exceptions: 0, timeouts: 0, reasons: {}, measured: 0, sum_us: 0, max_us: 0 });
  }
  const reasons = new Set();
  for (const row of d.rows) {
    const c = buckets.get(d.resolution === "1s" ? row.second_start_ms : row.cycle_start_ms);
    if (!c) continue;
    c.visits += row.visits;
    c.passes += row.passes;
    c.exceptions += row.exceptions;
    c.timeouts += row.timeouts;
    // Per second only (and 0 from older servers): rows of one bucket add up.
    if (row.measured) {
      c.measured += row.measured;
      c.sum_us += row.sum_us;
      c.max_us = Math.max(c.max_us, row.max_us);
    }
    for (const [reason, n] of Object.entries(row.downgrades_by_reason)) {
      c.reasons[reason] = (c.reasons[reason] || 0) + n;
      reasons.add(reason);
    }
  }
  const xs = [...buckets.keys()];
  const values = [...buckets.values()];
  const series = (key) => values.map((c) => c[key]);
  const per = d.resolution === "1s" ? "per second" : "per 10-s cycle";
  $("#chart-resolution").textContent = per;
  $("#charts-panel").dataset.resolution = d.resolution;
  $("#chart-note").textContent = note;
  const meta = { resolution: d.resolution, step, per };
  drawChart("traffic", xs, [
    { name: "visits", color: COLORS.visits, values: series("visits") },
    { name: "passes", color: COLORS.passes, values: series("passes") },
  ], meta);
  let extra = 0;
  drawChart(
    "downgrades",
    xs,
    [...reasons].sort().map((reason) => ({
      name: reason,
      color: REASON_COLORS[reason] || EXTRA_COLORS[extra++ % EXTRA_COLORS.length],
      values: values.map((c) => c.reasons[reason] || 0),
    })),
    meta,
  );
  drawChart("errors", xs, [
    { name: "exceptions", color: COLORS.exceptions, values: series("exceptions") },
    { name: "timeouts", color: COLORS.timeouts, values: series("timeouts") },
  ], meta);
  // Durations are sent per second only: the 10-s view has no such chart.
  $("#durations").hidden = d.resolution !== "1s";
  if (d.resolution === "1s") drawDurations(xs, values, meta);
}

// The mean and max call duration of each second, in ms: a gap (no point) where no
// call was measured. Each second with a value has a dot with its figures in
// data attributes and a tooltip; each line has its values in `data-values` (empty
// for a gap).
function drawDurations(xs, values, meta) {
  const W = 640, H = 180, L = 44, R = 8, T = 8, B = 22;
  const chart = $("#chart-durations");
  chart.textContent = "";
  const legend = $("#legend-durations");
  legend.textContent = "";
  const ms = (us) => us / 1000;
  const series = [
    { name: "mean", color: COLORS.mean, values: values.map((c) => (c.measured ? ms(c.sum_us / c.measured) : null)) },
    { name: "max", color: COLORS.max, values: values.map((c) => (c.measured ? ms(c.max_us) : null)) },
  ];
  let max = 0;
  for (const s of series) for (const v of s.values) if (v !== null) max = Math.max(max, v);
  const top = niceDuration(max);
  const x = (i) => L + (xs.length < 2 ? 0 : (i * (W - L - R)) / (xs.length - 1));
  const y = (v) => T + (H - T - B) * (1 - v / top);
  axes(chart, xs, x, y, top, formatMs, { W, H, L, R });
  const measured = values.reduce((n, c) => n + c.measured, 0);
  if (measured === 0) {
    const none = svg("text", { x: W / 2, y: H / 2, class: "axis", "text-anchor": "middle" });
    none.textContent = "no measured call in this range";
    chart.append(none);
  }
  series.forEach((s, n) => {
    const style = lineStyle(n);
    // One segment per run of seconds with a value.
    let path = "";
    let open = false;
    s.values.forEach((v, i) => {
      if (v === null) {
        open = false;
        return;
      }
      path += (open ? " L" : " M") + x(i).toFixed(1) + "," + y(v).toFixed(1);
      open = true;
    });
    const line = svg("path", { d: path.trim(), fill: "none", stroke: s.color, "stroke-width": String(style.width - 1), "stroke-linejoin": "round", "data-series": s.name, "data-values": s.values.map((v) => (v === null ? "" : String(v))).join(",") });
    if (style.dash) line.setAttribute("stroke-dasharray", style.dash);
    const same = measured ? sameAs(series, n) : null;
    if (same) line.dataset.sameAs = same.name;
    chart.append(line);
    s.values.forEach((v, i) => {
      if (v === null) return;
      const c = values[i];
      // A later series' dots are smaller: a max equal to its mean sits inside it.
      const dot = svg("circle", { cx: x(i).toFixed(1), cy: y(v).toFixed(1), r: n === 0 ? "3.5" : "2", fill: s.color, class: "duration", "data-series": s.name, "data-second-ms": String(xs[i]), "data-value": String(v), "data-measured": String(c.measured) });
      const tip = svg("title");
      tip.textContent = time(xs[i]) + ": " + s.name + " " + formatMs(v) + " ms of " + plural(c.measured, "call");
      dot.append(tip);
      chart.append(dot);
    });
  });
  const sumUs = values.reduce((n, c) => n + c.sum_us, 0);
  const longest = values.reduce((n, c) => (c.measured ? Math.max(n, c.max_us) : n), 0);
  const summary = {
    mean: measured ? "overall " + formatMs(ms(sumUs / measured)) + " ms" : "none",
    max: measured ? "longest " + formatMs(ms(longest)) + " ms" : "none",
  };
  series.forEach((s, n) => {
    const same = measured ? sameAs(series, n) : null;
    const key = legendKey(s, n, s.name + " (" + summary[s.name] + ")" + (same ? ", the same line as " + same.name : ""));
    if (same) key.dataset.sameAs = same.name;
    legend.append(key);
  });
  chart.dataset.top = String(top);
  chart.dataset.unit = "ms";
  chart.dataset.resolution = meta.resolution;
  chart.dataset.stepMs = String(meta.step);
  chart.dataset.fromMs = xs.length ? String(xs[0]) : "";
  chart.dataset.buckets = String(xs.length);
  chart.dataset.measured = String(measured);
  chart.setAttribute("aria-label", chart.dataset.subject + " " + meta.per);
}

// Grid lines with their labels, and the time axis.
function axes(chart, xs, x, y, top, format, { W, H, L, R }) {
  for (let k = 0; k <= 4; k++) {
    const v = (top * k) / 4;
    chart.append(svg("line", { x1: L, x2: W - R, y1: y(v), y2: y(v), class: "grid" }));
    const label = svg("text", { x: L - 4, y: y(v) + 4, class: "axis", "text-anchor": "end" });
    label.textContent = format(v);
    chart.append(label);
  }
  // Seconds on the time axis when the range is short.
  const span = xs.length ? xs[xs.length - 1] - xs[0] : 0;
  const tick = (t) => (span <= 10 * 60 * 1000 ? time(t) : time(t).slice(0, 5));
  const ticks = Math.min(6, xs.length);
  for (let k = 0; k < ticks; k++) {
    const i = Math.round((k * (xs.length - 1)) / Math.max(1, ticks - 1));
    // The first and last labels stay inside the chart.
    const anchor = ticks > 1 && k === 0 ? "start" : ticks > 1 && k === ticks - 1 ? "end" : "middle";
    const label = svg("text", { x: x(i), y: H - 6, class: "axis", "text-anchor": anchor });
    label.textContent = tick(xs[i]);
    chart.append(label);
  }
}

// A line chart: x = bucket start, y = count per bucket. The legend is HTML beside the
// SVG, so the SVG holds only axes, grid and data. The data drawn are also in data
// attributes: on the SVG its resolution, first bucket, step, bucket count and y
// scale; on each line its values, one per bucket.
function drawChart(id, xs, series, meta) {
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
  axes(chart, xs, x, y, top, formatCount, { W, H, L, R });
  if (series.length === 0) {
    const none = svg("text", { x: W / 2, y: H / 2, class: "axis", "text-anchor": "middle" });
    none.textContent = "none in this range";
    chart.append(none);
  }
  series.forEach((s, n) => {
    const points = s.values.map((v, i) => x(i).toFixed(1) + "," + y(v).toFixed(1)).join(" ");
    const style = lineStyle(n);
    const line = svg("polyline", { points, fill: "none", stroke: s.color, "stroke-width": String(style.width), "stroke-linejoin": "round", "data-series": s.name, "data-values": s.values.join(",") });
    if (style.dash) line.setAttribute("stroke-dasharray", style.dash);
    chart.append(line);
    const total = s.values.reduce((a, b) => a + b, 0);
    const same = sameAs(series, n);
    const key = legendKey(s, n, s.name + " (" + formatCount(total) + ")" + (same ? ", the same line as " + same.name : ""));
    if (same) {
      line.dataset.sameAs = same.name;
      key.dataset.sameAs = same.name;
    }
    legend.append(key);
  });
  chart.dataset.max = String(max);
  chart.dataset.top = String(top);
  chart.dataset.resolution = meta.resolution;
  chart.dataset.stepMs = String(meta.step);
  chart.dataset.fromMs = xs.length ? String(xs[0]) : "";
  chart.dataset.buckets = String(xs.length);
  chart.setAttribute("aria-label", chart.dataset.subject + " " + meta.per);
}

function niceMax(max) {
  if (max <= 4) return 4;
  const p = Math.pow(10, Math.floor(Math.log10(max)));
  for (const m of [1, 2, 2.5, 5, 10]) if (m * p >= max) return m * p;
  return 10 * p;
}

// The top of a duration axis (ms): 1, 2, 2.5 or 5 times a power of ten, durations
// below a millisecond included.
function niceDuration(max) {
  if (!(max > 0)) return 1;
  const p = Math.pow(10, Math.floor(Math.log10(max)));
  for (const m of [1, 2, 2.5, 5, 10]) if (m * p >= max) return m * p;
  return 10 * p;
}

// A duration in ms, to three significant digits (whole ms from 1000 on).
function formatMs(v) {
  if (v >= 1000) return String(Math.round(v));
  return String(Number(v.toPrecision(3)));
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
      ? "No console policy yet: instances enforce only their own files and code (the points table says what each enforces)."
      : "by " + p.author + " at " + time(p.created_ms) + (p.comment ? ": " + p.comment : "");
  policyLoaded(changed);
}

// The point form, the raw editors and their saving are in editor.js.

function message(text, isError) {
  const m = $("#form-message");
  m.textContent = text;
  m.className = isError ? "error" : "ok";
}

function errorText(r) {
  if (r.data && r.data.error) return r.data.error.message;
  return "HTTP " + r.status;
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
  fitTable($("#history"));
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
  watchPanels();
  startEditor();
  fillForm();
  loadApps();
  // New apps and instances show up without a reload.
  state.timer = setInterval(loadApps, REFRESH_MS);
}

start();
