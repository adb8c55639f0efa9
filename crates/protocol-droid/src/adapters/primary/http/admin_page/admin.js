// The gateway's admin page. Every piece of data is put on the page as text
// (textContent), never as markup: tool definitions are written by upstreams.
"use strict";

const POLL_MS = 2000;
const SAMPLES = 60;
const history = { requests: [], inFlight: [], sessions: [], upstreamCalls: [] };
let last = null;

function token() {
  return sessionStorage.getItem("droid-admin-token");
}

async function api(path, init = {}) {
  const headers = Object.assign({}, init.headers || {});
  const held = token();
  if (held) headers.Authorization = "Bearer " + held;
  const response = await fetch(path, Object.assign({}, init, { headers, cache: "no-store" }));
  if (response.status === 401) {
    document.getElementById("login").hidden = false;
    throw new Error("a token is needed");
  }
  if (response.status === 403) {
    document.getElementById("login").hidden = false;
    throw new Error("this token may not use the admin page (it lacks the admin scope)");
  }
  if (!response.ok && response.status !== 409) {
    throw new Error(`the gateway answered ${response.status}`);
  }
  return response;
}

// The only attributes the page sets: never one that takes markup or code.
const ATTRIBUTES = new Set(["class", "type", "title"]);

function el(tag, attrs = {}, ...children) {
  const node = document.createElement(tag);
  for (const [key, value] of Object.entries(attrs)) {
    if (key.startsWith("data-") || ATTRIBUTES.has(key)) node.setAttribute(key, value);
    else throw new Error(`the page sets no attribute ${key}`);
  }
  for (const child of children) {
    if (child === null || child === undefined) continue;
    node.append(child instanceof Node ? child : document.createTextNode(String(child)));
  }
  return node;
}

function short(digest) {
  return digest ? digest.slice(0, 12) + "…" : "—";
}

// Prometheus text: series name with labels -> value.
function parseMetrics(text) {
  const series = new Map();
  for (const line of text.split("\n")) {
    if (!line || line.startsWith("#")) continue;
    const space = line.lastIndexOf(" ");
    series.set(line.slice(0, space), Number(line.slice(space + 1)));
  }
  return series;
}

function sum(series, prefix) {
  let total = 0;
  for (const [name, value] of series) {
    if (name === prefix || name.startsWith(prefix + "{")) total += value;
  }
  return total;
}

// A label's value as the text format escapes it (\\, \" and \n).
function label(name, key) {
  const match = name.match(new RegExp("[{,]" + key + '="((?:[^"\\\\]|\\\\.)*)"'));
  return match ? match[1].replace(/\\(.)/g, (_, c) => (c === "n" ? "\n" : c)) : null;
}

function push(list, value) {
  list.push(value);
  if (list.length > SAMPLES) list.shift();
}

function chart(title, values, unit) {
  const width = 200, height = 48;
  const max = Math.max(1, ...values);
  const step = values.length > 1 ? width / (SAMPLES - 1) : 0;
  const points = values
    .map((v, i) => `${(i * step).toFixed(1)},${(height - 2 - (v / max) * (height - 4)).toFixed(1)}`)
    .join(" ");
  const svg = document.createElementNS("http://www.w3.org/2000/svg", "svg");
  svg.setAttribute("viewBox", `0 0 ${width} ${height}`);
  svg.setAttribute("preserveAspectRatio", "none");
  const line = document.createElementNS("http://www.w3.org/2000/svg", "polyline");
  line.setAttribute("points", points);
  svg.append(line);
  const now = values.length ? values[values.length - 1] : 0;
  return el("div", { class: "chart", "data-chart": title, "data-samples": String(values.length) },
    el("div", { class: "muted" }, title),
    el("div", { class: "value" }, `${Number.isInteger(now) ? now : now.toFixed(1)}${unit}`),
    svg);
}

function latencies(series) {
  const byUpstream = new Map();
  for (const [name, value] of series) {
    const upstream = label(name, "upstream");
    if (!upstream) continue;
    const entry = byUpstream.get(upstream) || { sum: 0, count: 0 };
    if (name.startsWith("droid_upstream_call_duration_seconds_sum")) entry.sum += value;
    if (name.startsWith("droid_upstream_call_duration_seconds_count")) entry.count += value;
    byUpstream.set(upstream, entry);
  }
  return byUpstream;
}

function renderCharts(series) {
  const requests = sum(series, "droid_requests_total");
  const calls = sum(series, "droid_upstream_calls_total");
  const now = Date.now();
  if (last) {
    const seconds = Math.max(0.001, (now - last.at) / 1000);
    push(history.requests, Math.max(0, (requests - last.requests) / seconds));
    push(history.upstreamCalls, Math.max(0, (calls - last.calls) / seconds));
  }
  last = { at: now, requests, calls };
  push(history.inFlight, sum(series, "droid_requests_in_flight"));
  push(history.sessions, sum(series, "droid_sessions"));
  document.getElementById("charts").replaceChildren(
    chart("requests per second", history.requests, "/s"),
    chart("upstream calls per second", history.upstreamCalls, "/s"),
    chart("requests in flight", history.inFlight, ""),
    chart("sessions", history.sessions, ""),
  );
}

function renderUpstreams(status, series) {
  const timing = latencies(series);
  const rows = status.upstreams.map((u) => {
    const t = timing.get(u.name);
    const mean = t && t.count ? `${((t.sum / t.count) * 1000).toFixed(2)} ms` : "—";
    return el("tr", { "data-upstream": u.name },
      el("td", {}, u.name),
      el("td", { class: u.state }, u.state),
      el("td", {}, u.tools),
      el("td", {}, t ? t.count : 0),
      el("td", {}, mean),
      el("td", { class: "muted" }, u.health));
  });
  document.querySelector("#upstreams tbody").replaceChildren(...rows);
}

// Each upstream's prompts, resources and templates, asked for seldom:
// listing them costs every upstream a request.
const PRIMITIVES_EVERY_MS = 30000;
let primitives = new Map();
let primitivesAt = 0;

// In the background: a slow upstream must not hold up the rest of the page,
// which draws the lists at its next refresh once they are in.
function refreshPrimitives() {
  if (Date.now() - primitivesAt < PRIMITIVES_EVERY_MS) return;
  primitivesAt = Date.now();
  api("/api/primitives")
    .then((r) => r.json())
    .then((listed) => {
      primitives = new Map(listed.upstreams.map((u) => [u.upstream, u]));
    })
    .catch(() => {
      primitivesAt = 0;
    });
}

function offered(upstream) {
  const listed = primitives.get(upstream);
  if (!listed) return null;
  const line = (what, names) =>
    el("div", { class: "offered", "data-kind": what },
      el("span", { class: "muted" }, `${what}: `),
      ...(names.length ? names.map((n) => el("span", { class: "tag" }, n)) : [el("span", { class: "muted" }, "none")]));
  return el("div", {},
    line("prompts", listed.prompts),
    line("resources", listed.resources),
    line("templates", listed.templates),
    listed.unlisted ? el("div", { class: "muted" }, `not listed: ${listed.unlisted}`) : null);
}

function renderCatalog(catalog) {
  const groups = new Map();
  for (const tool of catalog) {
    if (!groups.has(tool.upstream)) groups.set(tool.upstream, []);
    groups.get(tool.upstream).push(tool);
  }
  for (const upstream of primitives.keys()) {
    if (!groups.has(upstream)) groups.set(upstream, []);
  }
  const blocks = [...groups.entries()].map(([upstream, tools]) =>
    el("div", { class: "upstream-group", "data-upstream": upstream || "gateway" },
      el("h3", {}, upstream || "the gateway's own"),
      upstream ? offered(upstream) : null,
      el("table", {},
        el("thead", {}, el("tr", {}, el("th", {}, "tool"), el("th", {}, "digest"), el("th", {}, "provenance"))),
        el("tbody", {}, ...tools.map((t) =>
          el("tr", { "data-tool": t.id },
            el("td", {}, el("code", {}, t.id)),
            el("td", { title: t.digest }, el("code", {}, short(t.digest))),
            el("td", { class: t.verified ? "" : "unverified" }, t.provenance)))))));
  document.getElementById("catalog").replaceChildren(...blocks);
}

// Characters that change what a text means or says without showing:
// invisible formatting, direction overrides and isolates, variation
// selectors and the Unicode tags, which can spell a whole sentence no one
// sees (and a model reads). Shown as their code points, marked, so two
// definitions that look alike on the page do not differ unseen.
const HIDDEN = /[\u0080-\u009F\u00AD\u034F\u061C\u115F\u1160\u17B4\u17B5\u180B-\u180F\u200B-\u200F\u202A-\u202E\u2028\u2029\u2060-\u206F\u2800\u3164\uFE00-\uFE0F\uFEFF\uFFA0\uFFF0-\uFFFB]|[\u{1D173}-\u{1D17A}]|[\u{E0000}-\u{E0FFF}]/u;

function revealed(text) {
  const parts = [];
  let plain = "";
  for (const ch of text) {
    if (!HIDDEN.test(ch)) {
      plain += ch;
      continue;
    }
    if (plain) parts.push(plain);
    plain = "";
    parts.push(el("mark", { class: "hidden-char", title: "a character that does not show" },
      `\\u{${ch.codePointAt(0).toString(16)}}`));
  }
  if (plain) parts.push(plain);
  return parts;
}

function definition(value) {
  return el("pre", {}, ...(value ? revealed(JSON.stringify(value, null, 2)) : ["(not kept)"]));
}

async function approveTool(id, digest, button) {
  button.disabled = true;
  try {
    const response = await api("/api/approve", {
      method: "POST",
      headers: { "Content-Type": "application/json" },
      body: JSON.stringify({ ids: [`${id}@${digest}`] }),
    });
    const reply = await response.json();
    button.textContent = reply.ok ? "Approved" : `Refused: ${reply.error}`;
    if (!reply.ok) button.disabled = false;
  } catch (error) {
    button.disabled = false;
    button.textContent = "Approve";
  }
  refresh();
}

// The definition `id` had at `digest`, from any report that kept it.
function keptDefinition(drift, id, digest) {
  for (const d of drift) {
    if (d.id !== id) continue;
    if (d.new === digest && d.newDefinition) return d.newDefinition;
    if (d.old === digest && d.oldDefinition) return d.oldDefinition;
  }
  return null;
}

function renderDrift(drift, unverified) {
  const waiting = new Map(unverified.map((u) => [u.id, u]));
  const entries = drift.slice().reverse().map((d) => {
    const pending = waiting.get(d.id);
    const awaiting = Boolean(d.new) && pending?.digest === d.new;
    // Only what is shown in full is approved here.
    const shown = awaiting && d.newDefinition;
    // A change awaiting approval is weighed against what was last trusted,
    // not against an unapproved change before it: approving the latest of
    // several approves them all.
    const sinceTrusted = awaiting && pending.trusted && pending.trusted !== d.old;
    const trusted = sinceTrusted ? keptDefinition(drift, d.id, pending.trusted) : null;
    // The trusted definition no longer kept (past the reports kept): the
    // one before, said to be unapproved too.
    const before = !sinceTrusted
      ? { digest: d.old, definition: d.oldDefinition, title: "before" }
      : trusted
        ? { digest: pending.trusted, definition: trusted, title: "last trusted" }
        : { digest: d.old, definition: d.oldDefinition, title: "before (not approved either; the last trusted is no longer kept)" };
    const button = shown
      ? el("button", { type: "button", "data-approve": d.id }, "Approve")
      : el("span", { class: "muted" },
        awaiting ? "too large to show: approve with droid gateway approve"
          : !d.new ? "removed"
            : d.new === d.trusted ? "approved or pinned"
              : "superseded by a later change");
    if (shown) button.addEventListener("click", () => approveTool(d.id, d.new, button));
    return el("div", { class: "drift", "data-drift": d.id },
      el("div", { class: "drift-head" },
        el("code", {}, d.id),
        el("span", { class: "muted" }, `${short(before.digest)} → ${short(d.new)}`),
        el("span", { class: "muted" }, `${d.droppedActivations} activation(s) dropped`),
        button),
      el("div", { class: "sides" },
        el("div", {}, el("h3", {}, before.title), definition(before.definition)),
        el("div", {}, el("h3", {}, "now"), definition(d.newDefinition))));
  });
  document.getElementById("drift-empty").hidden = entries.length > 0;
  document.getElementById("drift").replaceChildren(...entries);
}

function tags(ids) {
  return ids.length ? ids.map((id) => el("span", { class: "tag" }, id)) : [el("span", { class: "muted" }, "none")];
}

function renderSessions(sessions) {
  const rows = sessions.map((s) =>
    el("tr", { "data-session": s.session },
      el("td", {}, el("code", {}, s.session)),
      el("td", {}, ...tags(s.core)),
      el("td", { "data-activated": "" }, ...tags(s.activated))));
  document.getElementById("sessions-empty").hidden = rows.length > 0;
  document.getElementById("sessions").hidden = rows.length === 0;
  document.querySelector("#sessions tbody").replaceChildren(...rows);
}

function renderReports(reports) {
  const rows = reports.slice(-50).reverse().map((r) =>
    el("tr", {},
      el("td", {}, r.upstream),
      el("td", {}, el("code", {}, r.method)),
      el("td", {}, r.revision),
      el("td", {}, ...r.downgrades.map((d) => el("div", {}, `${d.feature}: ${d.detail}`)))));
  document.getElementById("reports-empty").hidden = rows.length > 0;
  document.getElementById("reports").hidden = rows.length === 0;
  document.querySelector("#reports tbody").replaceChildren(...rows);
}

async function refresh() {
  try {
    refreshPrimitives();
    const [overview, metrics] = await Promise.all([
      api("/api/overview").then((r) => r.json()),
      api("/metrics").then((r) => r.text()),
    ]);
    const series = parseMetrics(metrics);
    renderCharts(series);
    renderUpstreams(overview.status, series);
    renderDrift(overview.status.drift, overview.status.unverified);
    renderCatalog(overview.catalog);
    renderSessions(overview.sessions);
    renderReports(overview.reports);
    document.getElementById("state").textContent = `updated ${new Date().toLocaleTimeString()}`;
    document.body.dataset.loaded = "true";
  } catch (error) {
    document.getElementById("state").textContent = String(error.message || error);
  }
}

document.getElementById("login").addEventListener("submit", (event) => {
  event.preventDefault();
  sessionStorage.setItem("droid-admin-token", document.getElementById("token").value);
  document.getElementById("login").hidden = true;
  refresh();
});

refresh();
setInterval(refresh, POLL_MS);
