// The policy editors of the dashboard: the form of the selected point, which covers
// every section of the runtime's policy-file format, and raw TOML / JSON editors for
// the point and for the whole app. Every check is the server's (the runtime's own
// parser); nothing here judges a value.
//
// An edit changes exactly what the operator changed: the form starts from the stored
// settings of the point and applies only the fields whose input was edited (an input
// emptied removes its field); every other field, including fields the form has no
// input for, is sent back as it was.
//
// Loaded before dashboard.js, whose helpers ($, el, api, appPath, state, message,
// errorText, refresh, loadPolicy, loadHistory) it calls at run time.
"use strict";

// ---- the form's fields ----

// Sections of plain fields: [path, kind, shown default]. Kinds: int, num (numbers,
// sent as numbers when they parse), dur (a duration with a unit), str, bool3 (not
// set / true / false). `groups` are nested tables of the section, each a fieldset
// of its own inside the section's.
const FORM_SECTIONS = [
  {
    legend: "Rules",
    hint: "SDS's rules; a table with any of them sets the point's rules",
    fields: [
      ["max_visits", "int"],
      ["max_concurrency", "int"],
      ["max_exceptions", "int"],
      ["downgrade_percentage", "int", "100"],
      ["call_timeout", "dur"],
    ],
  },
  {
    legend: "queue",
    hint: "with max_concurrency or an adaptive limit: a call that finds every slot taken (or the adaptive limit reached) waits for one; at most max_waiting wait (beyond: queue_full), each for at most max_wait (then: queue_timeout); order oldest_first (first in first out) or newest_first (the last come is served first, and a full queue refuses its oldest waiter to make room)",
    fields: [
      ["queue.max_waiting", "int"],
      ["queue.max_wait", "dur"],
      ["queue.order", "str", "oldest_first"],
    ],
  },
  { legend: "shadow", hint: "dry run: rules are counted, calls never downgraded", fields: [["shadow", "bool3"]] },
  { legend: "exception_rate", fields: [["exception_rate.rate", "num"], ["exception_rate.min_visits", "int", "0"]] },
  { legend: "timeouts", fields: [["timeouts.threshold", "dur"], ["timeouts.max_count", "int"]] },
  {
    legend: "token_bucket",
    hint: "rate tokens a second, at most capacity saved up; with max_wait a call finding no token waits for the next one if it is due within max_wait (capacity = 1: pacing, calls spaced 1/rate apart)",
    fields: [
      ["token_bucket.rate", "num"],
      ["token_bucket.capacity", "int"],
      ["token_bucket.max_wait", "dur"],
    ],
  },
  {
    legend: "warm_up",
    hint: "with token_bucket: a cold point admits rate / cold_factor calls a second at first, climbing to rate over about period of sustained traffic",
    fields: [
      ["warm_up.period", "dur"],
      ["warm_up.cold_factor", "num", "3"],
    ],
  },
  { legend: "delay", fields: [["delay.duration", "dur"], ["delay.retry_interval", "dur"]] },
  { legend: "window", fields: [["window.buckets", "int", "10"], ["window.bucket_width", "dur", "1s"]] },
  {
    legend: "keys",
    hint: "per-key limits (hot keys): each value of a call's key (key = ... of the macros, Point::enter_key) makes at most limit calls per period, burst at once after a quiet time, and max_concurrency in flight; refused calls are downgraded as hot_key. max_keys keys are tracked exactly, the others share a sketch that never admits beyond their limit",
    fields: [
      ["keys.limit", "int"],
      ["keys.period", "dur", "1s"],
      ["keys.burst", "int", "limit"],
      ["keys.max_concurrency", "int"],
      ["keys.max_wait", "dur"],
      ["keys.max_keys", "int", "4096"],
    ],
  },
  {
    legend: "retry",
    hint: "retrying calls: attempts in all (1 never retries); the wait starts at base and grows by multiplier up to max, jitter removes a random fraction of it",
    fields: [
      ["retry.attempts", "int"],
      ["retry.base", "dur", "50ms"],
      ["retry.multiplier", "num", "2"],
      ["retry.max", "dur", "max(2s, base)"],
      ["retry.jitter", "num", "1"],
    ],
    groups: [
      {
        legend: "budget",
        hint: "optional, the point's own: retries allowed per 100 calls of the window, and at least min_per_second",
        fields: [
          ["retry.budget.percent", "num", "20"],
          ["retry.budget.min_per_second", "int", "10"],
          ["retry.budget.window", "dur", "10s"],
        ],
      },
    ],
  },
];

// The defaults of the retry section, for its summary (the runtime's).
const RETRY_DEFAULTS = { base: "50ms", multiplier: 2, max: "2s", jitter: 1 };
const BUDGET_DEFAULTS = { percent: 20, min_per_second: 10, window: "10s" };

// Sections that choose an algorithm: each algorithm's fields [name, kind, default],
// named within the section. `off` sections can also be "off" (set to none over the
// instance's other sources).
const ALGORITHM_SECTIONS = [
  {
    section: "breaker",
    off: false,
    algorithms: {
      sre: [
        ["k", "num", "1.5"],
        ["protection", "int", "5"],
        ["window", "dur", "10s"],
        ["buckets", "int", "40"],
        ["force_pass_interval", "dur", "1s"],
        ["slow_call", "dur"],
        ["cancellations_are_failures", "bool3", "false"],
      ],
      classic: [
        ["failure_rate", "num", "0.5"],
        ["slow_call_rate", "num"],
        ["slow_call_duration", "dur", "1s"],
        ["minimum_calls", "int", "10"],
        ["consecutive_failures", "int"],
        ["window", "dur", "10s"],
        ["buckets", "int", "10"],
        ["half_open_probes", "int", "3"],
        ["open_wait.base", "dur", "5s"],
        ["open_wait.multiplier", "num", "1"],
        ["open_wait.max", "dur", "max(5s, base)"],
        ["open_wait.jitter", "num", "0"],
        ["cancellations_are_failures", "bool3", "false"],
        // Breakers that know their peers: `open_at` >= 2 instances, then `action`.
        ["quorum.open_at", "int"],
        ["quorum.action", "str", "open"],
      ],
      disabled: [],
    },
  },
  {
    section: "adaptive",
    off: true,
    algorithms: {
      gradient: [
        ["initial_limit", "int", "20"],
        ["min_limit", "int", "1"],
        ["max_limit", "int", "1000"],
        ["smoothing", "num", "0.2"],
        ["rtt_tolerance", "num", "1.25"],
        ["queue_size", "num", "4"],
        ["long_window", "int", "600"],
        ["sample_window", "dur", "100ms"],
        ["min_samples", "int", "10"],
        ["critical_reserve", "num", "0"],
      ],
      shedder: [
        ["window", "dur", "5s"],
        ["buckets", "int", "50"],
        ["cpu_threshold", "int", "900"],
        ["cool_off", "dur", "1s"],
        ["default_min_rt", "dur", "1s"],
        ["flying_beta", "num", "0.9"],
        ["min_overload_factor", "num", "0.1"],
      ],
    },
  },
  {
    section: "cluster",
    off: true,
    algorithms: {
      visits: [
        ["url", "str"],
        ["key", "str"],
        ["period", "dur"],
        ["quota", "int"],
        ["batch", "int", "10"],
      ],
      token_bucket: [
        ["url", "str"],
        ["key", "str"],
        ["rate", "num"],
        ["burst", "int"],
        ["batch", "int", "min(10, burst)"],
      ],
    },
  },
];

const inputId = (path) => "f-" + path.replace(/\./g, "-");

// An input's row; `prefix` is left out of the name shown (the section, or the
// section and the group of a nested table).
function fieldRow(path, kind, placeholder, prefix) {
  let input;
  if (kind === "bool3") {
    input = el("select", { id: inputId(path), "data-field": path, "data-kind": kind }, [
      el("option", { value: "", text: placeholder ? "(not set: " + placeholder + ")" : "(not set)" }),
      el("option", { value: "true", text: "true" }),
      el("option", { value: "false", text: "false" }),
    ]);
  } else {
    const attrs = { id: inputId(path), "data-field": path, "data-kind": kind, autocomplete: "off", spellcheck: "false" };
    if (placeholder) attrs.placeholder = placeholder;
    input = el("input", attrs);
  }
  const name = prefix ? path.slice(prefix.length + 1) : path.slice(path.indexOf(".") + 1);
  return el("div", { class: "field", "data-row": path }, [
    el("label", {}, [el("span", { class: "name", text: name }), input]),
    el("div", { class: "field-error", "data-field": path }),
  ]);
}

// Builds the form's fieldsets (once, at start).
function buildForm() {
  const box = $("#form-fields");
  box.textContent = "";
  for (const s of FORM_SECTIONS) {
    const set = el("fieldset", { "data-section": s.legend }, [el("legend", { text: s.legend })]);
    if (s.hint) set.append(el("p", { class: "hint", text: s.hint }));
    for (const [path, kind, def] of s.fields) set.append(fieldRow(path, kind, def));
    const section = s.fields[0][0].includes(".") ? s.fields[0][0].split(".")[0] : null;
    for (const g of s.groups || []) {
      const path = section + "." + g.legend;
      const group = el("fieldset", { "data-section": path }, [el("legend", { text: g.legend })]);
      if (g.hint) group.append(el("p", { class: "hint", text: g.hint }));
      for (const [field, kind, def] of g.fields) group.append(fieldRow(field, kind, def, path));
      group.append(el("div", { class: "field-error", "data-field": path }));
      set.append(group);
    }
    if (section === "retry") set.append(el("p", { class: "hint retry-summary", id: "retry-summary" }));
    if (section === "queue") set.append(el("p", { class: "hint queue-summary", id: "queue-summary" }));
    if (section === "token_bucket") set.append(el("p", { class: "hint token-bucket-summary", id: "token-bucket-summary" }));
    if (section === "warm_up") set.append(el("p", { class: "hint warm-up-summary", id: "warm-up-summary" }));
    if (section === "keys") set.append(buildOverrides());
    if (section) set.append(el("div", { class: "field-error", "data-field": section }));
    box.append(set);
  }
  for (const s of ALGORITHM_SECTIONS) {
    const choose = el("select", { id: inputId(s.section + ".algorithm"), "data-field": s.section + ".algorithm", "data-kind": "algorithm", "data-section": s.section }, [
      el("option", { value: "", text: "(not set)" }),
    ]);
    if (s.off) choose.append(el("option", { value: "off", text: "off (none, over other sources)" }));
    for (const a of Object.keys(s.algorithms)) choose.append(el("option", { value: a, text: a }));
    choose.addEventListener("change", () => showAlgorithm(s.section));
    const set = el("fieldset", { "data-section": s.section }, [
      el("legend", { text: s.section }),
      el("div", { class: "field" }, [
        el("label", {}, [el("span", { class: "name", text: "algorithm" }), choose]),
        el("div", { class: "field-error", "data-field": s.section + ".algorithm" }),
      ]),
    ]);
    // One input per field name; fields that several algorithms share (a breaker's
    // `window`) are one input, with each algorithm's default as placeholder.
    const rows = new Map();
    for (const [algorithm, fields] of Object.entries(s.algorithms)) {
      for (const [name, kind, def] of fields) {
        const path = s.section + "." + name;
        if (!rows.has(path)) {
          const row = fieldRow(path, kind, def);
          row.querySelector("[data-kind]").dataset.section = s.section;
          rows.set(path, row);
          set.append(row);
        }
        const row = rows.get(path);
        row.dataset.algorithms = ((row.dataset.algorithms || "") + " " + algorithm).trim();
        row.querySelector("[data-kind]").dataset["default_" + algorithm] = def || "";
      }
    }
    set.append(el("div", { class: "field-error", "data-field": s.section }));
    box.append(set);
  }
}

// Shows the fields of the section's chosen algorithm only.
function showAlgorithm(section) {
  const chosen = $("#" + inputId(section + ".algorithm")).value;
  for (const row of document.querySelectorAll('#policy-form fieldset[data-section="' + section + '"] [data-algorithms]')) {
    const on = row.dataset.algorithms.split(" ").includes(chosen);
    row.hidden = !on;
    const input = row.querySelector("[data-kind]");
    if (on) input.placeholder = input.dataset["default_" + chosen] || "";
  }
}

function formInputs() {
  return document.querySelectorAll("#policy-form [data-kind]");
}

// ---- the keys section's overrides: one row per value ----
//
// A row holds a value of the key and its own limit, burst and max_concurrency (each
// optional). The list is sent back as it was unless a row was added, removed or
// edited; then each row starts from its stored override (every field of it, shown
// or not) with the edited inputs applied, and an override of the limit alone is
// written as that number, as the runtime writes it. Each input's `data-field` is the
// runtime's name of its field (`keys.overrides."vip-42".limit`), so that problems
// are shown beside it.

// The fields of an override, as the runtime names them.
const OVERRIDE_PARTS = ["limit", "burst", "max_concurrency"];

function buildOverrides() {
  const add = el("button", { type: "button", id: "keys-override-add", text: "Add override" });
  add.addEventListener("click", () => {
    const row = overrideRow("", undefined);
    overrideBox().append(row);
    syncOverrideFields();
    state.formDirty = true;
    row.querySelector('[data-part="value"]').focus();
  });
  return el("fieldset", { id: "keys-overrides", "data-section": "keys.overrides" }, [
    el("legend", { text: "overrides" }),
    // Shown while the stored section is `keys = "off"` (no per-key limits, over lower
    // layers), which the empty fields alone would not say.
    el("p", { class: "hint keys-off", id: "keys-off", hidden: true, text: 'keys = "off": no per-key limits, over the files and the code; a field typed here sets the section again' }),
    el("p", { class: "hint", text: "chosen values of the key (a string key by its text, an integer key by its decimal text), each with any of its own limit, burst and max_concurrency (the others are the section's; a limit alone has a burst of that limit); a limit of 0 blocks the value" }),
    el("div", { class: "override-rows", id: "keys-override-rows" }),
    el("div", { class: "buttons" }, [add]),
    el("div", { class: "field-error", "data-field": "keys.overrides" }),
  ]);
}

function overrideBox() {
  return $("#keys-override-rows");
}

function overrideRows() {
  return [...overrideBox().querySelectorAll(".override-row")];
}

// The text an override's input shows: `entry` is the stored override (a number, its
// limit; or a table), `undefined` for a new row.
function overridePartText(entry, part) {
  if (typeof entry === "number") return part === "limit" ? String(entry) : "";
  if (entry && typeof entry === "object" && entry[part] !== undefined && entry[part] !== null) {
    return typeof entry[part] === "object" ? JSON.stringify(entry[part]) : String(entry[part]);
  }
  return "";
}

function overrideRow(value, entry) {
  const row = el("div", { class: "override-row" });
  if (entry !== undefined) row.dataset.original = JSON.stringify({ value, entry });
  const cell = (part, text, placeholder) => {
    const input = el("input", { class: "o-" + part, "data-part": part, autocomplete: "off", spellcheck: "false", "aria-label": part, placeholder });
    input.value = text;
    input.dataset.original = entry === undefined ? "" : text;
    if (part === "value") input.addEventListener("input", syncOverrideFields);
    return el("label", { class: "o-cell" }, [el("span", { class: "name", text: part }), input, el("div", { class: "field-error", "data-part": part })]);
  };
  const remove = el("button", { type: "button", class: "o-remove", text: "Remove" });
  remove.addEventListener("click", () => {
    row.remove();
    const box = overrideBox();
    box.dataset.removed = "true";
    // The stored values removed: a save takes them out of the version it saves on.
    if (entry !== undefined) box.dataset.removedValues = JSON.stringify([...JSON.parse(box.dataset.removedValues || "[]"), value]);
    state.formDirty = true;
  });
  row.append(cell("value", value, "value"));
  for (const part of OVERRIDE_PARTS) row.append(cell(part, overridePartText(entry, part), part === "limit" ? "the section's" : part === "burst" ? "limit" : "the section's"));
  row.append(remove, el("div", { class: "field-error o-row-error" }));
  return row;
}

// `"value"` as the runtime quotes an override's value in a field name.
function overrideField(value) {
  return "keys.overrides." + JSON.stringify(value);
}

// Names each row's inputs and error slots after its value.
function syncOverrideFields() {
  for (const row of overrideRows()) {
    const base = overrideField(row.querySelector('[data-part="value"]').value);
    row.dataset.field = base;
    row.querySelector(".o-row-error").dataset.field = base;
    for (const input of row.querySelectorAll("input[data-part]")) {
      const part = input.dataset.part;
      const field = part === "value" ? base : base + "." + part;
      input.dataset.field = field;
      row.querySelector('.field-error[data-part="' + part + '"]').dataset.field = field;
    }
    // The value's own faults (empty, too long) go to the row's slot.
    row.querySelector('.field-error[data-part="value"]').dataset.field = base + ".value";
  }
}

// Fills the rows from the stored settings.
function fillOverrides(settings) {
  const box = overrideBox();
  box.textContent = "";
  delete box.dataset.removed;
  delete box.dataset.removedValues;
  const keys = settings && settings.keys;
  $("#keys-off").hidden = keys !== "off";
  const overrides = keys && typeof keys === "object" && keys.overrides && typeof keys.overrides === "object" ? keys.overrides : {};
  for (const [value, entry] of Object.entries(overrides)) box.append(overrideRow(value, entry));
  syncOverrideFields();
  const off = state.point === null;
  $("#keys-override-add").disabled = off;
  for (const i of box.querySelectorAll("input, button")) i.disabled = off;
}

function overridesEdited() {
  if (overrideBox().dataset.removed === "true") return true;
  return overrideRows().some((row) => row.dataset.original === undefined || [...row.querySelectorAll("input[data-part]")].some(edited));
}

// A value given in two rows (the second), or null.
function duplicateOverride() {
  const seen = new Set();
  for (const row of overrideRows()) {
    const v = row.querySelector('[data-part="value"]').value;
    if (seen.has(v)) return row;
    seen.add(v);
  }
  return null;
}

// The overrides of `base` (the stored version a save goes on) with exactly the
// operator's edits: rows removed are taken out, rows left alone are the base's (a
// newer version's, after a conflict), and an edited row keeps every field of its
// base entry it does not change. A null-prototype object: any value is a key.
function overridesMerged(base) {
  const out = Object.create(null);
  if (base && typeof base === "object") Object.assign(out, base);
  for (const v of JSON.parse(overrideBox().dataset.removedValues || "[]")) delete out[v];
  for (const row of overrideRows()) {
    const value = row.querySelector('[data-part="value"]').value;
    const original = row.dataset.original === undefined ? null : JSON.parse(row.dataset.original);
    const inputs = [...row.querySelectorAll("input[data-part]")];
    if (original && !inputs.some(edited)) continue;
    let stored;
    if (original) {
      stored = Object.prototype.hasOwnProperty.call(out, original.value) ? out[original.value] : original.entry;
      delete out[original.value];
    }
    let entry = {};
    if (typeof stored === "number") entry = { limit: stored };
    else if (stored && typeof stored === "object") entry = JSON.parse(JSON.stringify(stored));
    for (const input of inputs) {
      const part = input.dataset.part;
      if (part === "value" || (original && !edited(input))) continue;
      const text = input.value.trim();
      if (text === "") delete entry[part];
      else entry[part] = NUMBER.test(text) ? Number(text) : text;
    }
    // A new row left blank is no override.
    if (!original && value === "" && Object.keys(entry).length === 0) continue;
    const fields = Object.keys(entry);
    out[value] = fields.length === 1 && fields[0] === "limit" && typeof entry.limit === "number" ? entry.limit : entry;
  }
  return out;
}

// ---- filling the form and reading it back ----

function pointSettings(name) {
  return settingsIn(state.policy, name);
}

function settingsIn(answer, name) {
  const points = (answer && answer.policy && answer.policy.points) || {};
  return Object.prototype.hasOwnProperty.call(points, name) ? points[name] : null;
}

function getPath(obj, path) {
  let v = obj;
  for (const k of path.split(".")) {
    if (v === null || v === undefined || typeof v !== "object") return undefined;
    v = v[k];
  }
  return v;
}

// The text an input shows for the stored settings.
function fieldText(settings, input) {
  if (!settings) return "";
  if (input.dataset.kind === "algorithm") {
    const s = settings[input.dataset.section];
    if (s === "off") return "off";
    return s && typeof s === "object" && typeof s.algorithm === "string" ? s.algorithm : "";
  }
  const v = getPath(settings, input.dataset.field);
  if (v === undefined || v === null) return "";
  if (typeof v === "object") return JSON.stringify(v);
  return String(v);
}

// Fills the form from the current version's settings of the selected point; the
// version is remembered as the base of the next save.
function fillForm() {
  clearFieldErrors();
  const name = state.point;
  state.formBase = state.policy;
  $("#form-point").textContent = name === null ? "(select a point)" : name;
  const settings = name === null ? null : pointSettings(name);
  for (const input of formInputs()) {
    const text = fieldText(settings, input);
    input.value = text;
    input.dataset.original = text;
    input.disabled = name === null;
  }
  for (const s of ALGORITHM_SECTIONS) showAlgorithm(s.section);
  fillOverrides(settings);
  showRetrySummary(settings);
  showQueueSummary(settings);
  showTokenSummaries(settings);
  $("#form-state").textContent = name === null ? "" : settings ? "" : "This point has no policy in the console yet.";
  $("#save").disabled = name === null;
  $("#remove").disabled = name === null || !settings;
  fillRawPoint(false);
}

// What the stored retry section of the point does, defaults included ("" without a
// point). The data attributes hold the effective values.
function retrySummary(settings) {
  const r = settings && settings.retry;
  if (!r || typeof r !== "object") return { text: "Stored: no retry section (calls are not retried).", values: null };
  const v = Object.assign({}, RETRY_DEFAULTS, r);
  // A `max` left out is the default raised to `base` (the runtime's rule).
  if (r.max === undefined && r.base !== undefined) v.max = "max(2s, " + r.base + ")";
  const jitter = Number(v.jitter) === 1 ? "full jitter" : Number(v.jitter) === 0 ? "no jitter" : "jitter " + v.jitter;
  const wait = Number(v.multiplier) === 1 ? "a fixed wait of " + v.base : "waits from " + v.base + " growing \u00d7" + v.multiplier + " up to " + v.max;
  let text = "Stored: " + v.attempts + " attempt" + (Number(v.attempts) === 1 ? "" : "s") + " in all, " + wait + ", " + jitter;
  let budget = null;
  if (r.budget && typeof r.budget === "object") {
    budget = Object.assign({}, BUDGET_DEFAULTS, r.budget);
    text += "; own budget: " + budget.percent + " retries per 100 calls, at least " + budget.min_per_second + "/s, over " + budget.window;
  } else {
    text += "; the app's shared retry budget";
  }
  return { text: text + ".", values: Object.assign({}, v, { budget }) };
}

function showRetrySummary(settings) {
  const slot = $("#retry-summary");
  if (!slot) return;
  if (state.point === null) {
    slot.textContent = "";
    delete slot.dataset.retry;
    return;
  }
  const s = retrySummary(settings);
  slot.textContent = s.text;
  slot.dataset.retry = s.values === null ? "" : JSON.stringify(s.values);
}

// What the stored queue of the point does (max_waiting and max_wait are required, the
// order is oldest first unless set). The data attribute holds the stored section with
// the point's max_concurrency.
function queueSummary(settings) {
  const q = settings && settings.queue;
  const limit = settings && settings.max_concurrency;
  if (!q || typeof q !== "object") {
    const text = limit === undefined || limit === null ? "Stored: no queue." : "Stored: no queue (calls beyond max_concurrency = " + limit + " are downgraded at once).";
    return { text, values: null };
  }
  const n = Number(q.max_waiting);
  const adaptive = settings.adaptive && typeof settings.adaptive === "object";
  const unlimited = limit === undefined || limit === null;
  const waits = q.max_waiting + (n === 1 ? " call waits" : " calls wait");
  let text;
  if (unlimited && adaptive) {
    text = "Stored: when the adaptive limit is reached, up to " + waits + " for a call to end, each for at most " + q.max_wait + ".";
  } else {
    const when = unlimited ? "every slot is" : Number(limit) === 1 ? "the only slot is" : "all " + limit + " slots are";
    text = "Stored: when " + when + " taken" + (adaptive ? " or the adaptive limit reached" : "") + ", up to " + waits + " for one, each for at most " + q.max_wait + ".";
  }
  if (q.order === "newest_first") {
    text += " Newest first: the last come is served first, and a full queue refuses its oldest waiter.";
  }
  return { text, values: { max_waiting: q.max_waiting, max_wait: q.max_wait, order: q.order, max_concurrency: limit === undefined ? null : limit } };
}

function showQueueSummary(settings) {
  const slot = $("#queue-summary");
  if (!slot) return;
  if (state.point === null) {
    slot.textContent = "";
    delete slot.dataset.queue;
    return;
  }
  const s = queueSummary(settings);
  slot.textContent = s.text;
  slot.dataset.queue = s.values === null ? "" : JSON.stringify(s.values);
}

// What the stored token bucket of the point does, its wait (pacing with capacity 1)
// included. The data attribute holds the stored section.
function tokenBucketSummary(settings) {
  const b = settings && settings.token_bucket;
  if (!b || typeof b !== "object") return { text: "Stored: no token bucket.", values: null };
  let text;
  if (b.max_wait !== undefined && Number(b.capacity) === 1) {
    text = "Stored: pacing, calls spaced 1/" + b.rate + " s apart; a call waits for its turn if it is due within " + b.max_wait + ".";
  } else {
    text = "Stored: " + b.rate + " tokens a second, at most " + b.capacity + " saved up; ";
    text += b.max_wait === undefined ? "a call finding no token is downgraded at once." : "a call finding no token waits for the next one if it is due within " + b.max_wait + ".";
  }
  const values = { rate: b.rate, capacity: b.capacity, max_wait: b.max_wait === undefined ? null : b.max_wait };
  return { text, values };
}

// What the stored warm-up of the point does (cold_factor's default is the runtime's).
// The data attribute holds the effective values.
function warmUpSummary(settings) {
  const w = settings && settings.warm_up;
  if (!w || typeof w !== "object") return { text: "Stored: no warm-up.", values: null };
  const factor = w.cold_factor === undefined ? 3 : w.cold_factor;
  const b = settings.token_bucket;
  const start = b && typeof b === "object" && b.rate !== undefined ? String(Math.round((Number(b.rate) / Number(factor)) * 100) / 100) + " (rate / " + factor + ")" : "rate / " + factor;
  const text = "Stored: a cold point admits " + start + " calls a second at first, reaching the bucket's rate over about " + w.period + ".";
  return { text, values: { period: w.period, cold_factor: factor } };
}

function showTokenSummaries(settings) {
  for (const [id, summary, key] of [
    ["#token-bucket-summary", tokenBucketSummary, "tokenBucket"],
    ["#warm-up-summary", warmUpSummary, "warmUp"],
  ]) {
    const slot = $(id);
    if (!slot) continue;
    if (state.point === null) {
      slot.textContent = "";
      delete slot.dataset[key];
      continue;
    }
    const s = summary(settings);
    slot.textContent = s.text;
    slot.dataset[key] = s.values === null ? "" : JSON.stringify(s.values);
  }
}

// After a conflict: the form moves to the current version, keeping what the operator
// typed; untouched inputs show the new version's values.
function rebaseForm() {
  const name = state.point;
  state.formBase = state.policy;
  const settings = name === null ? null : pointSettings(name);
  for (const input of formInputs()) {
    const text = fieldText(settings, input);
    if (input.value === input.dataset.original) input.value = text;
    input.dataset.original = text;
  }
  for (const s of ALGORITHM_SECTIONS) showAlgorithm(s.section);
  // Rows the operator left alone show the new version's overrides.
  if (!overridesEdited()) fillOverrides(settings);
  showRetrySummary(settings);
  showQueueSummary(settings);
  showTokenSummaries(settings);
  $("#remove").disabled = name === null || !settings;
}

const NUMBER = /^[+-]?(\d+\.?\d*|\.\d+)([eE][+-]?\d+)?$/;

// An input's value as the policy holds it; `undefined` for an empty input (no field).
// Numbers that do not parse are sent as typed, for the server to judge.
function inputValue(input) {
  const kind = input.dataset.kind;
  const text = kind === "str" ? input.value : input.value.trim();
  if (text === "") return undefined;
  if (kind === "bool3") return text === "true";
  if ((kind === "int" || kind === "num") && NUMBER.test(text)) return Number(text);
  return text;
}

function edited(input) {
  return input.value !== input.dataset.original;
}

// Sets (or, for `undefined`, removes) a field given by its path; removing the last
// field of a table removes the table (not the point's own table).
function setPath(obj, path, value) {
  const keys = path.split(".");
  const chain = [obj];
  let target = obj;
  for (const k of keys.slice(0, -1)) {
    if (value === undefined && (target[k] === null || typeof target[k] !== "object")) return;
    if (target[k] === null || typeof target[k] !== "object") target[k] = {};
    target = target[k];
    chain.push(target);
  }
  const last = keys[keys.length - 1];
  if (value !== undefined) {
    target[last] = value;
    return;
  }
  delete target[last];
  for (let i = chain.length - 1; i > 0; i--) {
    if (Object.keys(chain[i]).length > 0) break;
    delete chain[i - 1][keys[i - 1]];
  }
}

// The point's settings after the operator's edits: the stored settings of the base
// version with exactly the edited fields changed.
function formSettings() {
  const base = settingsIn(state.formBase, state.point);
  const out = base ? JSON.parse(JSON.stringify(base)) : {};
  for (const input of formInputs()) {
    if (input.dataset.section || !edited(input)) continue;
    setPath(out, input.dataset.field, inputValue(input));
  }
  for (const s of ALGORITHM_SECTIONS) {
    const choose = $("#" + inputId(s.section + ".algorithm"));
    const chosen = choose.value;
    const visible = [...document.querySelectorAll('#policy-form [data-section="' + s.section + '"][data-kind]:not([data-kind="algorithm"])')].filter(
      (i) => !i.closest(".field").hidden,
    );
    if (edited(choose)) {
      // Another algorithm (or none): the section is what its inputs now show.
      if (chosen === "") delete out[s.section];
      else if (chosen === "off") out[s.section] = "off";
      else {
        const fresh = { algorithm: chosen };
        for (const i of visible) {
          const v = inputValue(i);
          if (v !== undefined) setPath(fresh, i.dataset.field.slice(s.section.length + 1), v);
        }
        out[s.section] = fresh;
      }
      continue;
    }
    if (chosen === "" || chosen === "off") continue;
    for (const i of visible) if (edited(i)) setPath(out, i.dataset.field, inputValue(i));
  }
  if (overridesEdited()) {
    const keys = out.keys && typeof out.keys === "object" ? out.keys : {};
    const overrides = overridesMerged(keys.overrides);
    if (Object.keys(overrides).length === 0) setPath(out, "keys.overrides", undefined);
    else setPath(out, "keys.overrides", overrides);
  }
  return out;
}

function clearFieldErrors() {
  for (const e of document.querySelectorAll("#policy-form .field-error")) e.textContent = "";
  for (const i of document.querySelectorAll("#policy-form .invalid")) i.classList.remove("invalid");
}

function clearErrors() {
  clearFieldErrors();
  $("#form-message").textContent = "";
  $("#form-message").className = "";
}

// Puts each problem of the selected point at its field; returns the others as text.
function showProblems(problems) {
  const general = [];
  for (const p of problems || []) {
    let slot = null;
    if (p.field && p.point === state.point) {
      // The field's own slot, else its section's (`breaker` for a breaker-wide fault).
      const parts = fieldParts(p.field);
      for (let n = parts.length; n > 0 && !slot; n--) {
        slot = document.querySelector('#policy-form .field-error[data-field="' + CSS.escape(parts.slice(0, n).join(".")) + '"]');
      }
    }
    if (slot && !slot.closest("[hidden]")) {
      slot.textContent = (slot.textContent ? slot.textContent + "; " : "") + p.message;
      const field = CSS.escape(slot.dataset.field);
      const input = document.querySelector('#policy-form [data-field="' + field + '"][data-kind], #policy-form input[data-field="' + field + '"][data-part]');
      if (input) input.classList.add("invalid");
    } else {
      general.push(problemText(p));
    }
  }
  return general;
}

// A field name's parts: split at its dots, a quoted part (an override's value,
// `keys.overrides."v.1".limit`) kept whole with its quotes.
function fieldParts(field) {
  const parts = [];
  let part = "";
  let quoted = false;
  for (let i = 0; i < field.length; i++) {
    const c = field[i];
    if (quoted && c === "\\") {
      part += c + (field[i + 1] || "");
      i++;
      continue;
    }
    if (c === '"') quoted = !quoted;
    if (c === "." && !quoted) {
      parts.push(part);
      part = "";
    } else {
      part += c;
    }
  }
  parts.push(part);
  return parts;
}

function problemText(p) {
  const where = [];
  if (p.line) where.push("line " + p.line + (p.column ? ", column " + p.column : ""));
  if (p.point) where.push("point " + p.point);
  if (p.field) where.push("field " + p.field);
  return (where.length ? where.join(", ") + ": " : "") + p.message;
}

function authorName() {
  const author = $("#author").value.trim();
  if (author) localStorage.setItem("resilience-admin-author", author);
  return author;
}

// Saves new settings of the selected point (`null`: remove its policy) on top of the
// version the form was filled from. The server replaces that point only.
async function submitPolicy(settings) {
  clearErrors();
  const author = authorName();
  if (!author) {
    message("Enter your name as the author of the change.", true);
    return;
  }
  const name = state.point;
  if (settings !== null && !settingsIn(state.formBase, name) && Object.keys(settings).length === 0) {
    // An empty table would set the point's rules to none over its files and code:
    // say that in the raw editor (`[points."name"]`) if it is what you mean.
    message("Nothing to save: no field is set.", true);
    return;
  }
  const points = {};
  if (settings !== null) points[name] = settings;
  const r = await api("PUT", appPath("/policy"), {
    base_version: state.formBase ? state.formBase.version : 0,
    author,
    comment: $("#comment").value,
    point: name,
    policy: { points },
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
        "). Your edit was not saved: the form now shows that version with your edits on top; check it and save again.",
      true,
    );
    state.formDirty = true;
    await Promise.all([loadPolicy(), loadHistory()]);
    rebaseForm();
    return;
  }
  if (r.status === 422) {
    const general = showProblems(r.data.error.problems);
    message("The policy was not saved: fix the marked fields." + (general.length ? " " + general.join("; ") : ""), true);
    return;
  }
  message(errorText(r), true);
}

// ---- raw text editors ----

// `point`: the selected point's settings as a policy file with that point only;
// `app`: the whole policy of the app.
function rawEditor(kind) {
  return {
    text: $("#raw-" + kind + "-text"),
    format: $("#raw-" + kind + "-format"),
    problems: $("#raw-" + kind + "-problems"),
    message: $("#raw-" + kind + "-message"),
    state: state.raw[kind],
  };
}

// The app the editors show (its group and name apart: either may contain "/").
function appKey() {
  return state.app ? appKeyOf(state.app.group, state.app.name) : "";
}

function rawMessage(kind, text, isError) {
  const m = rawEditor(kind).message;
  m.textContent = text;
  m.className = text ? (isError ? "error" : "ok") : "";
}

// Empties the problem list (and the message, unless a save's message must stay
// while the editor refills with the saved version).
function clearRawProblems(kind, keepMessage) {
  const e = rawEditor(kind);
  e.problems.textContent = "";
  e.text.classList.remove("invalid");
  if (!keepMessage) rawMessage(kind, "", false);
}

// Lists problems with their line; clicking one selects that line of the text.
function showRawProblems(kind, problems) {
  const e = rawEditor(kind);
  e.problems.textContent = "";
  for (const p of problems || []) {
    const item = el("li", { text: problemText(p) });
    if (p.line) item.dataset.line = String(p.line);
    if (p.column) item.dataset.column = String(p.column);
    if (p.point) item.dataset.point = p.point;
    if (p.field) item.dataset.field = p.field;
    item.dataset.kind = p.kind || "";
    if (p.line) item.addEventListener("click", () => selectLine(e.text, p.line));
    e.problems.append(item);
  }
  e.text.classList.toggle("invalid", (problems || []).length > 0);
}

function selectLine(area, line) {
  const lines = area.value.split("\n");
  let start = 0;
  for (let i = 0; i < line - 1 && i < lines.length; i++) start += lines[i].length + 1;
  const end = start + (lines[line - 1] || "").length;
  area.focus();
  area.setSelectionRange(start, end);
}

// Fills the point's raw editor from the current version (unless the operator is
// editing the same point's text). The TOML text is written by the server.
async function fillRawPoint(force) {
  const ed = state.raw.point;
  const e = rawEditor("point");
  const name = state.point;
  if (!force && ed.dirty && ed.name === name && ed.app === appKey()) return;
  const seq = ++ed.seq;
  ed.name = name;
  ed.app = appKey();
  ed.dirty = false;
  ed.base = state.policy;
  clearRawProblems("point", !force);
  $("#raw-point-name").textContent = name === null ? "(select a point)" : name;
  for (const b of [e.text, $("#raw-point-check"), $("#raw-point-save"), $("#raw-point-reload")]) b.disabled = name === null;
  if (name === null) {
    e.text.value = "";
    return;
  }
  const settings = pointSettings(name) || {};
  const doc = { points: { [name]: settings } };
  let text;
  if (e.format.value === "json") {
    text = JSON.stringify(doc, null, 2) + "\n";
  } else {
    const r = await api("POST", appPath("/policy/validate"), { policy: doc });
    if (seq !== ed.seq) return;
    if (!r.ok) {
      rawMessage("point", errorText(r), true);
      return;
    }
    text = r.data.toml;
  }
  e.text.value = text;
  e.text.dataset.version = String(ed.base ? ed.base.version : 0);
}

// Fills the app's raw editor from the current version, unless it is being edited.
function fillRawApp(force) {
  const ed = state.raw.app;
  const e = rawEditor("app");
  if (!force && ed.dirty && ed.app === appKey()) return;
  ed.dirty = false;
  ed.app = appKey();
  ed.base = state.policy;
  clearRawProblems("app", !force);
  if (!state.policy) {
    e.text.value = "";
    return;
  }
  e.text.value = e.format.value === "json" ? JSON.stringify(state.policy.policy, null, 2) + "\n" : state.policy.toml;
  e.text.dataset.version = String(state.policy.version);
}

// What the editor's text is sent as.
function rawDraft(kind) {
  const e = rawEditor(kind);
  const draft = { text: e.text.value, format: e.format.value };
  if (kind === "point") draft.point = e.state.name;
  return draft;
}

// Checks the text with the server (the runtime's parser); true if it is valid.
async function checkRaw(kind) {
  clearRawProblems(kind);
  const r = await api("POST", appPath("/policy/validate"), rawDraft(kind));
  if (r.ok) {
    rawMessage(kind, "Valid.", false);
    return r;
  }
  if (r.status === 422) {
    showRawProblems(kind, r.data.error.problems);
    rawMessage(kind, "Not valid: see the problems above.", true);
  } else {
    rawMessage(kind, errorText(r), true);
  }
  return null;
}

// Saves the text on top of the version it was filled from: for the point, only its
// settings are replaced (an empty text removes its policy); for the app, the whole
// policy.
async function saveRaw(kind) {
  clearRawProblems(kind);
  const e = rawEditor(kind);
  const author = authorName();
  if (!author) {
    rawMessage(kind, "Enter your name (Author, above) as the author of the change.", true);
    return;
  }
  if (e.state.app !== appKey()) {
    rawMessage(kind, "Another app is selected: press Reload to edit its policy.", true);
    return;
  }
  const body = rawDraft(kind);
  body.base_version = e.state.base ? e.state.base.version : 0;
  body.author = author;
  body.comment = $("#comment").value;
  const r = await api("PUT", appPath("/policy"), body);
  if (r.ok) {
    e.state.dirty = false;
    $("#comment").value = "";
    rawMessage(kind, r.data.changed ? "Saved as version " + r.data.version + "." : "Nothing changed.", false);
    await refresh();
    return;
  }
  if (r.status === 409) {
    await Promise.all([loadPolicy(), loadHistory()]);
    const current = r.data.error.current_version;
    // Saving again replaces that version with this text; Reload starts from it.
    e.state.base = state.policy;
    rawMessage(
      kind,
      "Someone else changed the policy meanwhile (now version " + current + "). Your text was not saved: press Reload to start from version " +
        current + ", or Save again to replace it with your text.",
      true,
    );
    return;
  }
  if (r.status === 422) {
    showRawProblems(kind, r.data.error.problems);
    rawMessage(kind, "The policy was not saved: see the problems above.", true);
    return;
  }
  rawMessage(kind, errorText(r), true);
}

// Another format: an untouched text is written anew; an edited one is converted by
// the server if it is valid (and stays as it is otherwise).
async function switchRawFormat(kind) {
  const e = rawEditor(kind);
  const to = e.format.value;
  if (!e.state.dirty) {
    if (kind === "point") await fillRawPoint(true);
    else fillRawApp(true);
    return;
  }
  const from = to === "json" ? "toml" : "json";
  const draft = rawDraft(kind);
  draft.format = from;
  const r = await api("POST", appPath("/policy/validate"), draft);
  if (!r.ok) {
    e.format.value = from;
    if (r.status === 422) showRawProblems(kind, r.data.error.problems);
    rawMessage(kind, "Fix the problems before switching to " + to.toUpperCase() + ".", true);
    return;
  }
  e.text.value = to === "json" ? JSON.stringify(r.data.policy, null, 2) + "\n" : r.data.toml;
  clearRawProblems(kind);
}

// Called by loadPolicy with the new answer in `state.policy`.
function policyLoaded(changed) {
  if (!changed) return;
  if (!state.formDirty) fillForm();
  else fillRawPoint(false);
  fillRawApp(false);
}

function startEditor() {
  state.formBase = null;
  state.raw = { point: { name: null, app: "", base: null, dirty: false, seq: 0 }, app: { app: "", base: null, dirty: false } };
  buildForm();
  $("#policy-form").addEventListener("input", () => (state.formDirty = true));
  $("#policy-form").addEventListener("submit", (e) => {
    e.preventDefault();
    const twice = duplicateOverride();
    if (twice) {
      clearErrors();
      syncOverrideFields();
      twice.querySelector(".o-row-error").textContent = "this value is in another row too: one row per value";
      twice.querySelector('[data-part="value"]').classList.add("invalid");
      message("The policy was not saved: fix the marked fields.", true);
      return;
    }
    syncOverrideFields();
    submitPolicy(formSettings());
  });
  $("#remove").addEventListener("click", () => submitPolicy(null));
  for (const kind of ["point", "app"]) {
    const e = rawEditor(kind);
    e.text.addEventListener("input", () => (state.raw[kind].dirty = true));
    e.format.addEventListener("change", () => switchRawFormat(kind));
    $("#raw-" + kind + "-check").addEventListener("click", () => checkRaw(kind));
    $("#raw-" + kind + "-save").addEventListener("click", () => saveRaw(kind));
    $("#raw-" + kind + "-reload").addEventListener("click", () => (kind === "point" ? fillRawPoint(true) : fillRawApp(true)));
  }
}
