"use strict";
// The genbot dashboard: plain JS over /api/v1, served as is (no build step).
// Text from the server goes into the page through textContent only, never as HTML.
// The server decides what each person may do; buttons here only mirror its answer.

const API = "/api/v1";
const ROW = 34;        // px per row of the job list (fixed, so the list can be virtual)
const SWIPE = 60;      // px a finger travels for a swipe in the lightbox (less: a tap)
const COMPARE_MOST = 4; // images side by side (a fifth picked drops the first)
const TILE = 190, TILE_HEIGHT = 250;  // px of a gallery card (fixed, so the grid can be virtual)
const PAGE = 100;      // jobs fetched per page of the list
const REFRESH_MS = 400; // at most this often after queue events

const DELIVERY_PAGE = 50; // webhook deliveries fetched per page

// Every word on the page, the job states, priorities and the languages offered come from
// GET /vocabulary (bot/web/vocabulary.py, from the server's gettext catalogs), fetched at
// start and again when the language changes: this file keeps no catalog of its own.
let lang = localStorage.getItem("genbot.lang");  // null: the server's pick (Accept-Language)
let vocabulary = null;         // GET /vocabulary?lang=…
let me = null;                 // {user, role, csrf, may, priorities} once signed in
let seq = 0;                   // the last event seen, to resume the stream from
let socket = null;
let view = null;               // the view on screen: {refresh()}
let refreshTimer = null;
const steps = new Map();       // job id -> {node, step, total}, from progress events
const previews = new Map();    // job id -> its latest picture forming (a data: URL)

// --- small helpers -------------------------------------------------------------------
function rowName(j) {  // "BTL-001 · Row 2": the row as its sheet names it (the key column)
  return j.key ? `${j.key} · ${t("row")} ${j.row}` : `${t("row")} ${j.row}`;
}

function axisLabel(k, v) { return k === "variant" ? String(v) : `${k}=${Array.isArray(v) ? v.join("x") : v}`; }

function distinction(j) {  // what tells a card from its row's others: "steps=30 · B", "✨ Vary"
  const axes = Object.entries(j.axes || {}).map(([k, v]) => axisLabel(k, v));
  if (j.action) axes.push(verb(j.action));
  return axes.join(" · ");
}

async function loadVocabulary() {
  const r = await call("GET", `${API}/vocabulary${lang ? `?lang=${encodeURIComponent(lang)}` : ""}`);
  if (!r.ok) { if (!vocabulary) throw new Error(`GET /vocabulary: ${r.status}`); return; }
  vocabulary = r.data;
  lang = vocabulary.language;  // (a language no longer offered: the server's choice)
  await fontFor(JSON.stringify(vocabulary));
}

async function fontFor(text) {
  // Where no font of this machine has Chinese, the page's own ("genbot CJK", app.css) is
  // fetched before the words are shown: the faces their characters need, no others.
  // Waiting matters: Chromium leaves text that asked for a web font before it arrived
  // in the font it fell back to — boxes.
  const chinese = text.match(/[\u3000-\u303f\u4e00-\u9fff\uff00-\uffef]/gu);
  if (!chinese) return;
  const probe = document.createElement("canvas").getContext("2d");
  probe.font = "14px sans-serif";
  if (probe.measureText(chinese[0]).width !== probe.measureText("\ue000").width) return;
  await document.fonts.load('14px "genbot CJK"', [...new Set(chinese)].join("")).catch(() => {});
}

function states() { return vocabulary.states.map((s) => s.name); }  // in a job's order
// What a state means (storage/states.py): working (its steps show), produced (its images).
function stateIs(name, what) { return (vocabulary.states.find((s) => s.name === name) || {})[what] === true; }
function ended() { return vocabulary.states.filter((s) => s.terminal).map((s) => s.name); }
function isActive(status) { return vocabulary.states.some((s) => s.name === status && s.active); }

// A batch's progress, each ended state its own coloured segment (made, failed, canceled)
// and what is still to come left empty: a canceled batch never reads as a full bar.
function outcomeBar(counts, total, attrs = {}) {
  const done = ended().reduce((a, s) => a + (counts[s] || 0), 0);
  return h("span", {class: "bar", role: "progressbar", "aria-valuemin": 0, "aria-valuemax": total,
    "aria-valuenow": done, "aria-label": `${t("progress")} ${done}/${total}`, ...attrs},
    ...ended().filter((s) => counts[s]).map((s) => {
      const segment = h("span", {class: `segment ${s}`, "data-state": s, title: `${named("states", s)} ${counts[s]}`});
      segment.style.width = `${(100 * counts[s]) / (total || 1)}%`;  // (CSSOM: the CSP allows no style attribute)
      return segment;
    }));
}

// An estimate, or what the queue waits for (paused, no executor): no time it cannot keep.
function estimate(held, seconds, unknown) {
  if (held) return t(`eta_${held}`);
  return seconds ? t("eta", {t: span(seconds)}) : unknown;
}

function named(kind, name, vars = {}) {  // a state, priority … in the reader's words
  const found = vocabulary[kind].find((x) => x.name === name);
  return fill(found ? found.label : name, vars);
}

function verb(action) {  // an image action's word, from the server's table
  const found = vocabulary.actions.find((a) => a.name === action);
  return found ? found.verb : action;
}

function oneClick(action) {  // offered as a button here: needs nothing typed (no values)
  const found = vocabulary.actions.find((a) => a.name === action);
  return Boolean(found && found.button && !found.takes.includes("values"));
}

function fill(text, vars) {
  return text.replace(/\{(\w+)\}/g, (_, k) => String(vars[k] ?? ""));
}

function t(key, vars = {}) {  // one of the dashboard's labels (the catalog's dash_KEY)
  const forms = vocabulary.plurals[key];  // words that follow a number: by its category
  if (!forms) return fill(vocabulary.words[key] ?? key, vars);
  const count = Number(vars.count);
  const form = forms[new Intl.PluralRules(vocabulary.language).select(count)] ?? forms.other;
  return fill(form, {...vars, count: count.toLocaleString()});
}

function h(tag, attrs = {}, ...kids) {
  const el = document.createElement(tag);
  for (const [k, v] of Object.entries(attrs)) {
    if (v === null || v === undefined || v === false) continue;
    if (k.startsWith("on")) el.addEventListener(k.slice(2), v);
    else if (k === "text") el.textContent = v;
    else el.setAttribute(k, v === true ? "" : String(v));
  }
  for (const kid of kids.flat()) {
    if (kid !== null && kid !== undefined && kid !== false) {
      el.append(kid instanceof Node ? kid : String(kid));
    }
  }
  return el;
}

async function call(method, path, body) {
  const headers = {};
  if (method !== "GET" && me) headers["X-CSRF-Token"] = me.csrf;
  let payload = body;
  if (body && !(body instanceof FormData)) {
    headers["Content-Type"] = "application/json";
    payload = JSON.stringify(body);
  }
  let response;
  try {
    response = await fetch(path, {method, headers, body: payload, credentials: "same-origin"});
  } catch (e) {
    return {ok: false, status: 0, data: {error: {code: "network", message: String(e)}}};
  }
  let data = {};
  try { data = await response.json(); } catch (e) { /* a file, or an empty body */ }
  if (response.status === 401 && path !== "/dashboard/session") signedOut();
  return {ok: response.ok, status: response.status, data};
}

function toast(message, kind = "error") {
  const box = document.getElementById("toast") || document.body.appendChild(
    h("div", {id: "toast", role: "alert"}));
  box.className = kind;
  box.textContent = message;
  clearTimeout(box.timer);
  box.timer = setTimeout(() => { box.textContent = ""; box.className = ""; }, 6000);
}

function failure(r, where = null) {  // (where: a box of its own, in a dialog above the page)
  const said = `${r.status === 403 ? t("refused") + ": " : ""}${r.data.error ? r.data.error.message : r.status}`;
  if (where) where.textContent = said; else toast(said);
}

function dateLocale() {  // dates as the language writes them (English: day before month)
  return lang === "en" ? "en-GB" : lang;
}

function when(seconds) {
  return seconds ? new Date(seconds * 1000).toLocaleString(dateLocale()) : "";
}

function at(iso) {  // an ISO 8601 time from the API, as when() shows epoch seconds
  return iso ? new Date(iso).toLocaleString(dateLocale()) : "";
}

function span(seconds) {
  if (seconds === null || seconds === undefined) return "";
  const s = Math.round(seconds);
  if (seconds < 10) return `${seconds.toFixed(1)} s`;
  if (s < 90) return `${s} s`;
  if (s < 5400) return `${Math.round(s / 60)} min`;
  return `${(s / 3600).toFixed(1)} h`;
}

function bytes(n) {
  return n >= 2 ** 30 ? `${(n / 2 ** 30).toFixed(1)} GiB` : `${Math.round(n / 2 ** 20)} MiB`;
}

function badge(status, kind = "states") {  // a state of that kind (workers, deliveries), else a label
  const known = vocabulary[kind].find((x) => x.name === status);
  const text = known ? known.label : t(status);
  return h("span", {class: `badge ${status}`, "data-status": status, text});
}

function mayTouch(command, owner) {
  return me.may.includes(command) && (me.role === "admin" || owner === me.user);
}

function randomKey() {
  const bytes = crypto.getRandomValues(new Uint8Array(16));
  return Array.from(bytes, (b) => b.toString(16).padStart(2, "0")).join("");
}

function progressBar(jobId, onOpen) {
  const s = steps.get(jobId);
  return h("div", {class: "step", "data-progress": jobId},
    h("img", {class: "preview", "data-preview": jobId, alt: t("forming"), src: previews.get(jobId) || null,
      hidden: !previews.has(jobId), onclick: onOpen || null}),
    h("progress", {max: s ? s.total : 1, value: s ? s.step : 0}),
    h("span", {class: "muted", text: s ? `${t("step", s)} ${s.node || ""}` : ""}));
}

function paintPreview(jobId, picture) {  // (the lightbox's image too, while it shows a running job)
  previews.set(jobId, picture);
  for (const img of document.querySelectorAll(`img[data-preview="${jobId}"]`)) {
    img.src = picture;
    img.hidden = false;
  }
}

function paintProgress(jobId) {
  const s = steps.get(jobId);
  for (const el of document.querySelectorAll(`[data-progress="${jobId}"]`)) {
    el.querySelector("progress").max = s.total;
    el.querySelector("progress").value = s.step;
    el.querySelector("span").textContent = `${t("step", s)} ${s.node || ""}`;
  }
}

// --- live events ---------------------------------------------------------------------
function connect() {
  const scheme = location.protocol === "https:" ? "wss" : "ws";
  const ws = new WebSocket(`${scheme}://${location.host}${API}/events?after=${seq}&previews=1`);
  socket = ws;
  ws.onopen = () => setLive(true);
  ws.onmessage = (m) => {
    const event = JSON.parse(m.data);
    if (event.seq === 0) {  // a picture of a running job forming: not in the log
      paintPreview(event.job_id, event.data.picture);
      return;
    }
    seq = Math.max(seq, event.seq);
    if (event.kind === "progress") {
      steps.set(event.job_id, event.data);
      paintProgress(event.job_id);
      return;
    }
    if (event.job_id && !stateIs(event.kind, "working")) {
      steps.delete(event.job_id);
      previews.delete(event.job_id);
    }
    soon();
  };
  ws.onclose = () => {
    setLive(false);
    if (me && socket === ws) setTimeout(() => { if (me && socket === ws) connect(); }, 1000);
  };
}

function setLive(on) {
  const el = document.getElementById("live");
  el.hidden = false;
  el.className = on ? "live on" : "live";
  el.textContent = on ? t("live") : t("offline");
}

function soon() {
  if (refreshTimer) return;
  refreshTimer = setTimeout(async () => {
    refreshTimer = null;
    if (view) await view.refresh();
  }, REFRESH_MS);
}

// --- views ---------------------------------------------------------------------------
async function overview(main) {
  const box = h("div", {class: "overview"});
  main.replaceChildren(box);
  async function refresh() {
    const [q, b, p] = await Promise.all([call("GET", `${API}/queue`), call("GET", `${API}/batches?limit=15`),
      call("GET", `${API}/platforms`)]);
    if (!q.ok || !b.ok || !p.ok) return failure([q, b, p].find((r) => !r.ok));
    const paused = q.data.paused;
    const admin = me.may.includes("pause");
    const action = paused ? "resume" : "pause";
    const button = h("button", {
      id: "pause-toggle", "data-action": action, disabled: !admin, title: admin ? null : t("admins_only"),
      onclick: async () => {
        const r = await call("POST", `${API}/queue/${action}`);
        if (!r.ok) return failure(r);
        refresh();
      }}, t(action));
    const running = q.data.jobs.filter((j) => j.state !== "next");  // (its executor is on it)
    const next = q.data.jobs.filter((j) => j.state === "next");
    const totals = Object.fromEntries(states().map((s) => [s,
      Object.values(q.data.counts[s] || {}).reduce((a, n) => a + n, 0)]));
    box.replaceChildren(
      h("section", {class: "card state"},
        h("h2", {text: t("queue")}),
        h("p", {}, h("strong", {id: "queue-state", "data-paused": String(paused),
          text: paused ? t("paused_state") : t("running_state")}),
          paused && q.data.changed_by ? h("span", {class: "muted", text: ` · ${t("paused_by", {by: q.data.changed_by})}`}) : null),
        button,
        h("p", {class: "muted", id: "eta", text: q.data.queued ? estimate(q.data.held, q.data.eta_seconds, t("eta_unknown")) : ""})),
      h("section", {class: "card counts"},
        ...states().map((s) => h("a", {class: "count", href: `#/jobs?status=${s}`, "data-count": s},
          h("b", {text: String(totals[s])}), badge(s))),
        next.length ? h("span", {class: "count", "data-count": "next"},  // (held, not started on)
          h("b", {text: String(next.length)}), h("span", {class: "badge", text: t("next")})) : null),
      h("section", {class: "card"},
        h("h2", {text: t("now_running")}),
        running.length ? h("ul", {class: "now-running"}, ...running.map((j) => h("li", {"data-job": j.id},
          h("a", {href: `#/batches/${j.batch}`, text: `${t("batch", {id: j.batch})} · ${rowName(j)}`}),
          h("span", {class: "muted", text: ` ${j.template} · ${j.submitter}`}), progressBar(j.id))))
          : h("p", {class: "muted", text: t("nothing_running")}),
        next.length ? h("h3", {text: t("up_next")}) : null,
        next.length ? h("ul", {class: "up-next muted"}, ...next.map((j) => h("li", {"data-next": j.id},
          h("a", {href: `#/batches/${j.batch}`, text: `${t("batch", {id: j.batch})} · ${rowName(j)}`}),
          h("span", {text: ` ${j.template} · ${j.executor || ""}`})))) : null),
      h("section", {class: "card workers"},
        h("h2", {text: t("workers")}),
        q.data.workers.some((w) => w.state === "idle" || w.state === "busy") ? null
          : h("p", {class: "error", id: "no-workers", text: t("no_workers")}),
        q.data.workers.length ? h("table", {}, ...q.data.workers.map((w) => h("tr", {"data-worker": w.id},
          h("td", {}, h("strong", {text: w.id})), h("td", {class: "muted", text: `${w.device} · v${w.version}`}),
          h("td", {}, badge(w.state, "workers"), w.job ? h("span", {text: ` #${w.job}`}) : null,
            w.doing ? h("span", {class: w.doing.what === "server_down" ? "error doing" : "muted doing", text: ` · ${named("doings", w.doing.what, {models: w.doing.models.join(", ")})}`}) : null),
          h("td", {class: "muted", text: w.memory_used ? bytes(w.memory_used) + (w.memory_total ? ` / ${bytes(w.memory_total)}` : "") : ""}),
          h("td", {class: "muted", text: w.models.join(", ") +
            (w.allow ? ` · ${t("takes")} ${w.allow.join(", ") || "-"}` : "")}),
          h("td", {class: "muted", text: t("seen", {t: span(Date.now() / 1000 - w.seen_at)})})))) : null),
      platformCard(p.data.platforms),
      h("section", {class: "card"},
        h("h2", {text: t("recent")}),
        b.data.batches.length ? batchTable(b.data.batches) : h("p", {class: "muted", text: t("no_batches")})));
  }
  await refresh();
  return {refresh};
}

// The chat platforms the service runs (GET /platforms): how messages arrive, signed in or
// why not, the connection it keeps (— where it keeps none), and what it owes.
function platformCard(platforms) {
  const connection = (c) => c === null ? h("td", {class: "muted", text: t("connection_none")})
    : h("td", {class: c ? "ok" : "error", "data-connected": String(c), text: t(c ? "connection_up" : "connection_down")});
  return h("section", {class: "card platforms", "aria-labelledby": "platforms-title"},
    h("h2", {id: "platforms-title", text: t("platforms")}),
    platforms.length ? h("table", {}, ...platforms.map((x) => h("tr", {"data-platform": x.name, "data-up": String(x.up)},
      h("td", {}, h("strong", {text: x.name})),
      h("td", {class: "muted", text: t("arrives", {how: x.inbound})}),
      x.signed_in === null ? h("td", {class: "muted", "data-signed-in": "", text: t("sign_in_unknown")})
        : h("td", {class: x.signed_in ? "ok" : "error", "data-signed-in": String(x.signed_in),
          text: x.signed_in ? t("signed_in") : t("not_signed_in", {why: x.problem})}),
      connection(x.connected),
      h("td", {"data-owed": x.messages.pending, text: t("owed", {n: x.messages.pending})}),
      h("td", {class: x.messages.failed ? "error" : "muted", "data-failed": x.messages.failed,
        text: t("failed_messages", {n: x.messages.failed})}))))
      : h("p", {class: "muted", id: "no-platforms", text: t("no_platforms")}));
}

function batchTable(batches) {
  return h("table", {class: "batches"},
    h("tr", {}, ...["batch", "template", "submitter", "progress", "created"].map((k) => h("th", {text: t(k, {id: ""})}))),
    ...batches.map((b) => {
      const done = ended().reduce((a, s) => a + (b.counts[s] || 0), 0);
      return h("tr", {"data-batch": b.id},
        h("td", {}, h("a", {href: `#/batches/${b.id}`, text: `#${b.id}`})),
        h("td", {text: b.template}), h("td", {text: b.submitter}),
        h("td", {}, outcomeBar(b.counts, b.total),
          h("span", {class: "muted", text: ` ${done}/${b.total}`}),
          ...states().filter((s) => b.counts[s] && !stateIs(s, "produced")).map((s) => badge(s))),
        h("td", {class: "muted", text: when(b.created_at)}));
    }));
}

async function jobList(main, params) {
  // A virtual list: the scroller is as tall as every row, but only the rows in view exist,
  // fetched a page at a time by offset; 20,000 jobs cost what 40 rows do.
  const status = params.get("status") || "";
  const filter = h("select", {id: "status-filter", "aria-label": t("status"), onchange: () => {
    location.hash = filter.value ? `#/jobs?status=${filter.value}` : "#/jobs";
  }}, h("option", {value: "", text: t("all")}),
  ...states().map((s) => h("option", {value: s, selected: s === status, text: named("states", s)})));
  const count = h("span", {class: "muted", id: "job-count", text: t("loading")});
  const scroller = h("div", {class: "scroller", id: "job-list", tabindex: 0});
  const spacer = h("div", {class: "spacer-y"});
  scroller.append(spacer);
  main.replaceChildren(h("div", {class: "toolbar"}, filter, count),
    h("div", {class: "jobrow head"}, ...["job", "batch", "row", "status", "submitter", "enqueued", "took", "error"]
      .map((k) => h("span", {text: t(k, {id: ""})})), h("span")),
    scroller);
  let total = 0;
  let pages = new Map();
  const loading = new Set();
  const query = (p) => `${API}/jobs?offset=${p * PAGE}&limit=${PAGE}${status ? `&status=${status}` : ""}`;

  async function load(p) {
    if (pages.has(p) || loading.has(p)) return;
    loading.add(p);
    const r = await call("GET", query(p));
    loading.delete(p);
    if (!r.ok) return failure(r);
    pages.set(p, r.data.jobs);
    total = r.data.total;
    paint();
  }
  function visiblePages() {
    const first = Math.floor(scroller.scrollTop / ROW / PAGE);
    const last = Math.floor((scroller.scrollTop + scroller.clientHeight) / ROW / PAGE);
    return first === last ? [first] : [first, last];
  }
  let painting = false;
  function paint() {
    painting = false;
    spacer.style.height = `${total * ROW}px`;
    count.textContent = t("n_jobs", {count: total});
    const first = Math.max(0, Math.floor(scroller.scrollTop / ROW) - 5);
    const last = Math.min(total, Math.ceil((scroller.scrollTop + scroller.clientHeight) / ROW) + 5);
    const rows = [];
    for (let i = first; i < last; i++) {
      const p = Math.floor(i / PAGE);
      const page = pages.get(p);
      if (!page) { load(p); rows.push(placed(h("div", {class: "jobrow pending", text: t("loading")}), i)); continue; }
      const job = page[i - p * PAGE];
      if (job) rows.push(placed(jobRow(job), i));
    }
    scroller.replaceChildren(spacer, ...rows);
  }
  function placed(row, i) {
    row.style.top = `${i * ROW}px`;
    row.dataset.index = i;
    return row;
  }
  scroller.addEventListener("scroll", () => {
    if (!painting) { painting = true; requestAnimationFrame(paint); }
  });
  async function refresh() {  // fetch the pages in view afresh, then swap them in at once
    const fresh = new Map();
    await Promise.all(visiblePages().map(async (p) => {
      const r = await call("GET", query(p));
      if (r.ok) { fresh.set(p, r.data.jobs); total = r.data.total; }
    }));
    pages = fresh;
    paint();
  }
  await load(0);
  return {refresh};
}

async function gallery(main, params) {
  // Every finished image across batches, newest first — or the jobs of another state (the
  // running ones forming live) — filtered (template and its version,
  // person, model, review, stars, the sheet's row, a swept value or A/B side), in a
  // virtual grid: rows of cards exist only in view, fetched a page at a time by offset.
  // P / X / U and 1-5 review the focused card; Enter opens its batch.
  const r = await call("GET", `${API}/templates`);
  const names = r.ok ? r.data.templates.map((tp) => tp.name) : [];
  const asked = Object.fromEntries(["status", "template", "version", "submitter", "model", "rating", "stars", "row", "axis"]
    .map((k) => [k, params.get(k) || ""]));
  const made = states().find((st) => stateIs(st, "produced"));  // (the state with images: the default)
  const go = () => {
    const q = new URLSearchParams();
    for (const [k, el] of Object.entries(inputs)) if (el.value && !(k === "status" && el.value === made)) q.set(k, el.value);
    location.hash = q.toString() ? `#/gallery?${q}` : "#/gallery";
  };
  const label = (name) => t({rating: "review", stars: "stars_at_least"}[name] || name);
  const only = (more) => {  // these filters and `more`, as the gallery's address
    const q = new URLSearchParams(Object.entries({...asked, ...more}).filter(([, v]) => v));
    return `#/gallery?${q}`;
  };
  const select = (name, options) => h("select", {name, id: `gallery-${name}`, onchange: go,
    "aria-label": label(name)},
    h("option", {value: "", text: `${label(name)}: ${t("all")}`}),
    ...options.map(([value, label]) => h("option", {value, selected: value === asked[name], text: label})));
  const inputs = {
    status: h("select", {name: "status", id: "gallery-status", onchange: go, "aria-label": t("status")},
      ...states().map((st) => h("option", {value: st, selected: st === (asked.status || made), text: named("states", st)}))),
    template: select("template", names.map((n) => [n, n])),
    rating: select("rating", vocabulary.reviews.map((x) => [x.name, x.label])),
    stars: select("stars", [1, 2, 3, 4, 5].map((n) => [String(n), "★".repeat(n) + "+"])),
    submitter: h("input", {type: "text", name: "submitter", id: "gallery-submitter", value: asked.submitter,
      placeholder: t("submitter"), "aria-label": t("submitter"), onchange: go}),
    model: h("input", {type: "text", name: "model", id: "gallery-model", value: asked.model,
      placeholder: t("model"), "aria-label": t("model"), onchange: go}),
    version: h("input", {type: "number", min: 1, name: "version", id: "gallery-version", value: asked.version,
      placeholder: t("version"), "aria-label": t("version"), class: "narrow", onchange: go}),
    row: h("input", {type: "number", min: 1, name: "row", id: "gallery-row", value: asked.row,
      placeholder: t("row"), "aria-label": t("row"), class: "narrow", onchange: go}),
    axis: h("input", {type: "text", name: "axis", id: "gallery-axis", value: asked.axis,
      placeholder: t("axis"), "aria-label": t("axis"), onchange: go}),
  };
  const count = h("span", {class: "muted", id: "gallery-count", text: t("loading")});
  const scroller = h("div", {class: "scroller gallery", id: "gallery", tabindex: -1});
  const spacer = h("div", {class: "spacer-y"});
  scroller.append(spacer);
  main.replaceChildren(h("div", {class: "toolbar"}, ...Object.values(inputs), count), scroller);
  const filter = Object.entries({...asked, status: asked.status || made}).filter(([, v]) => v)
    .map(([k, v]) => `&${k}=${encodeURIComponent(v)}`).join("");
  const query = (p) => `${API}/jobs?offset=${p * PAGE}&limit=${PAGE}${filter}`;
  let total = 0, pages = new Map(), focused = null;
  const loading = new Map();  // page -> its fetch, awaited by whoever needs it
  const columns = () => Math.max(1, Math.floor((scroller.clientWidth - 12) / (TILE + 12)));
  function load(p) {
    if (pages.has(p)) return Promise.resolve();
    if (!loading.has(p)) loading.set(p, (async () => {
      const res = await call("GET", query(p));
      loading.delete(p);
      if (!res.ok) return failure(res);
      pages.set(p, res.data.jobs);
      total = res.data.total;
      paint();
    })());
    return loading.get(p);
  }
  function at(i) { const page = pages.get(Math.floor(i / PAGE)); return page ? page[i % PAGE] : undefined; }
  let painting = false;
  function paint() {
    painting = false;
    const cols = columns();
    spacer.style.height = `${Math.ceil(total / cols) * (TILE_HEIGHT + 12)}px`;
    count.textContent = t((asked.status || made) === made ? "n_images" : "n_jobs", {count: total});
    const firstRow = Math.max(0, Math.floor(scroller.scrollTop / (TILE_HEIGHT + 12)) - 2);
    const lastRow = Math.ceil((scroller.scrollTop + scroller.clientHeight) / (TILE_HEIGHT + 12)) + 2;
    const tiles = [];
    for (let i = firstRow * cols; i < Math.min(total, lastRow * cols); i++) {
      const job = at(i);
      if (!job) { load(Math.floor(i / PAGE)); continue; }
      tiles.push(tile(job, i, cols));
    }
    const keep = document.activeElement && scroller.contains(document.activeElement) ? focused : null;
    // Cards still in view are the same elements, moved (no new image to decode): a frame
    // of scrolling builds only the cards that come into view.
    const now = new Set(tiles);
    scroller.replaceChildren(spacer, ...tiles);  // (in the grid's order, for Tab)
    for (const [k, el] of built) if (!now.has(el)) built.delete(k);
    if (keep !== null) { const el = scroller.querySelector(`[data-job="${keep}"]`); if (el && document.activeElement !== el) el.focus({preventScroll: true}); }
  }
  const built = new Map();  // "id review stars" -> its card, while it is in view
  function tile(j, i, cols) {
    const k = `${j.id} ${j.review} ${j.stars}`;
    const el = built.get(k) || card(j, i);
    built.set(k, el);
    el.dataset.index = i;
    el.style.left = `${6 + (i % cols) * (TILE + 12)}px`;
    el.style.top = `${Math.floor(i / cols) * (TILE_HEIGHT + 12)}px`;
    return el;
  }
  function card(j, i) {
    return h("figure", {class: `thumb tile review-${j.review}`, "data-job": j.id, "data-index": i,
      "data-review": j.review, tabindex: 0, onfocus: () => { focused = j.id; },
      onkeydown: (e) => key(e, j, Number(e.currentTarget.dataset.index))},
      j.outputs.length ? h("img", {src: `${j.outputs[0]}?size=256`, loading: "lazy", alt: rowName(j)})
        : h("div", {class: "empty"}, badge(j.status), stateIs(j.status, "working") ? progressBar(j.id) : null),
      h("figcaption", {}, h("a", {href: `#/batches/${j.batch}`, text: `#${j.batch}`}), ` ${rowName(j)} `,
        ...Object.entries(j.axes || {}).map(([k, v]) => Array.isArray(v)  // a swept value: a click shows its like
          ? h("span", {class: "distinct", text: `${axisLabel(k, v)} `})
          : h("a", {class: "distinct", "data-axis": `${k}=${v}`, href: only({axis: `${k}=${v}`}), text: `${axisLabel(k, v)} `})),
        j.action ? h("span", {class: "distinct", text: `${verb(j.action)} `}) : null,
        j.review !== "unreviewed" ? badge(j.review, "reviews") : null,
        j.stars ? h("span", {class: "stars", text: " " + "★".repeat(j.stars)}) : null));
  }
  async function key(e, j, i) {
    const k = e.key.toLowerCase();
    const cols = columns();
    const move = {arrowright: 1, arrowleft: -1, arrowdown: cols, arrowup: -cols}[k];
    if (move) { e.preventDefault(); step(i + move); return; }
    if (k === "enter") { location.hash = `#/batches/${j.batch}`; return; }
    if (!me.may.includes("keep") || e.ctrlKey || e.metaKey || !j.outputs.length) return;  // (no image: nothing to review)
    const state = {p: "approved", x: "rejected", u: "unreviewed"}[k];
    if (state) {
      e.preventDefault();
      if (state !== "unreviewed") step(i + 1);
      const res = await call("PUT", `${API}/jobs/${j.id}/review`, {state});
      if (!res.ok) return failure(res);
      replace(i, res.data.job);
    } else if (/^[0-5]$/.test(k)) {
      e.preventDefault();
      const res = await call("PUT", `${API}/jobs/${j.id}/stars`, {stars: Number(k) || null});
      if (!res.ok) return failure(res);
      replace(i, res.data);
    }
  }
  function replace(i, job) {
    const page = pages.get(Math.floor(i / PAGE));
    if (page) page[i % PAGE] = job;
    paint();
  }
  async function step(i) {
    if (i < 0 || i >= total) return;
    if (!at(i)) await load(Math.floor(i / PAGE));  // (the next image may be on the next page)
    const job = at(i);
    if (!job) return;
    focused = job.id;
    const top = Math.floor(i / columns()) * (TILE_HEIGHT + 12);
    if (top < scroller.scrollTop || top + TILE_HEIGHT > scroller.scrollTop + scroller.clientHeight)
      scroller.scrollTop = top - (scroller.clientHeight - TILE_HEIGHT) / 2;
    paint();
    const el = scroller.querySelector(`[data-job="${job.id}"]`);
    if (el) el.focus({preventScroll: true});
  }
  scroller.addEventListener("scroll", () => {
    if (!painting) { painting = true; requestAnimationFrame(paint); }
  });
  window.addEventListener("resize", () => { if (document.body.contains(scroller)) paint(); });
  async function refresh() {
    const fresh = new Map();
    const rowsAt = Math.floor(scroller.scrollTop / (TILE_HEIGHT + 12)) * columns();
    await Promise.all([Math.floor(rowsAt / PAGE)].map(async (p) => {
      const res = await call("GET", query(p));
      if (res.ok) { fresh.set(p, res.data.jobs); total = res.data.total; }
    }));
    pages = new Map([...pages, ...fresh]);
    paint();
  }
  await load(0);
  return {refresh};
}

function jobRow(j) {
  const active = isActive(j.status);
  return h("div", {class: `jobrow ${j.status}`, "data-job": j.id},
    h("span", {text: `#${j.id}`}),
    h("span", {}, h("a", {href: `#/batches/${j.batch}`, text: `#${j.batch}`})),
    h("span", {text: String(j.row)}), h("span", {}, badge(j.status)),
    h("span", {text: j.submitter}), h("span", {class: "muted", text: when(j.enqueued_at)}),
    h("span", {class: "muted", text: j.started_at && j.finished_at ? span(j.finished_at - j.started_at) : ""}),
    h("span", {class: "error", title: j.error || null, text: j.error || ""}),
    h("span", {}, active && mayTouch("cancel", j.submitter)
      ? h("button", {class: "small", "data-cancel-job": j.id, onclick: () => cancel(`${API}/jobs/${j.id}/cancel`)}, t("cancel"))
      : null));
}

async function cancel(path) {
  const r = await call("POST", path);
  if (!r.ok) return failure(r);
  const ended = t("canceled_n", {n: r.data.ended.length});
  toast(r.data.asked.length ? `${ended} · ${t("asked_n", {n: r.data.asked.length})}` : ended, "ok");
  soon();
}

const INK = "#00e5ff";  // the painted region, over the image at half opacity: cyan reads on most

function painter(j, action) {
  // The image with a layer to paint on, at the image's own pixels: a brush, an eraser and
  // rectangles, by mouse, pen or touch (pointer events; the layer takes no page scroll).
  // Sent as the mask genbot reads: white where painted, black elsewhere, a PNG.
  const img = h("img", {src: j.outputs[0], alt: rowName(j), draggable: "false"});
  const layer = h("canvas", {class: "mask-layer", "data-mask-layer": j.id});
  const size = h("input", {type: "range", min: 2, max: 200, value: 40, name: "brush",
    "aria-label": t("brush_size")});
  let tool = "brush";
  const tools = ["brush", "eraser", "rectangle"].map((name) => h("button", {
    type: "button", class: `small${name === tool ? " on" : ""}`, "data-tool": name,
    "aria-pressed": String(name === tool), onclick: (e) => {
      tool = name;
      for (const b of tools) {
        b.classList.toggle("on", b === e.currentTarget);
        b.setAttribute("aria-pressed", String(b === e.currentTarget));
      }
    }}, t(name)));
  // Where a segmentation model is configured, the region may be named in words instead.
  const where = me.segmentation_model ? h("input", {type: "text", name: "region",
    maxlength: 200, "data-region": j.id, placeholder: t("region_words"),
    "aria-label": t("region_words")}) : null;
  const said = actionDialog(j, action, {
    cls: "painter", title: t("paint_title"), send: {"data-send-mask": j.id},
    says: {"data-painter-says": j.id},
    parts: [h("div", {class: "canvas-box"}, img, layer),
      h("div", {class: "tools"}, ...tools, h("label", {}, t("brush_size"), " ", size),
        h("button", {type: "button", class: "small link", onclick: () => {
          layer.getContext("2d").clearRect(0, 0, layer.width, layer.height); }}, t("clear"))),
      ...(where ? [h("div", {class: "tools"}, where)] : [])],
    ask: async () => {  // the mask painted and/or the region named
      const mask = maskPng();
      const region = where ? where.value.trim() : "";
      if (!mask && !region) return t("paint_nothing");
      return {...(mask ? {mask: await mask} : {}), ...(region ? {region} : {})};
    }});
  img.addEventListener("load", () => {  // the layer at the image's pixels; shown large enough to paint on
    const [w, h_] = [img.naturalWidth, img.naturalHeight];
    layer.width = w; layer.height = h_;
    const fit = Math.min(Math.min(820, innerWidth * 0.85) / w, innerHeight * 0.6 / h_);
    img.style.width = `${Math.round(w * fit)}px`;
  });

  const ink = layer.getContext("2d");
  let from = null, start = null, before = null;
  const at = (e) => {  // where the pointer is, in the image's own pixels
    const box = layer.getBoundingClientRect();
    return [(e.clientX - box.left) * layer.width / box.width,
            (e.clientY - box.top) * layer.height / box.height];
  };
  const scale = () => layer.width / layer.getBoundingClientRect().width;
  layer.addEventListener("pointerdown", (e) => {
    layer.setPointerCapture(e.pointerId);
    said.textContent = "";
    from = start = at(e);
    before = tool === "rectangle" ? ink.getImageData(0, 0, layer.width, layer.height) : null;
    stroke(from, from);
  });
  layer.addEventListener("pointermove", (e) => {
    if (!from) return;
    const to = at(e);
    if (tool === "rectangle") {
      ink.putImageData(before, 0, 0);
      ink.fillStyle = INK;
      ink.fillRect(Math.min(start[0], to[0]), Math.min(start[1], to[1]),
                   Math.abs(to[0] - start[0]), Math.abs(to[1] - start[1]));
    } else {
      stroke(from, to);
    }
    from = to;
  });
  const lift = () => { from = start = before = null; };
  layer.addEventListener("pointerup", lift);
  layer.addEventListener("pointercancel", lift);
  function stroke(a, b) {
    if (tool === "rectangle") return;
    ink.globalCompositeOperation = tool === "eraser" ? "destination-out" : "source-over";
    ink.strokeStyle = INK;
    ink.lineWidth = Number(size.value) * scale();
    ink.lineCap = ink.lineJoin = "round";
    ink.beginPath(); ink.moveTo(...a); ink.lineTo(...b); ink.stroke();
    ink.globalCompositeOperation = "source-over";
  }
  function maskPng() {  // white where painted, black elsewhere; null when nothing is
    const {data} = ink.getImageData(0, 0, layer.width, layer.height);
    const out = document.createElement("canvas");
    out.width = layer.width; out.height = layer.height;
    const ctx = out.getContext("2d");
    const pixels = ctx.createImageData(layer.width, layer.height);
    let any = false;
    for (let i = 3; i < data.length; i += 4) {
      const v = data[i] >= 128 ? 255 : 0;
      any ||= v > 0;
      pixels.data[i - 3] = pixels.data[i - 2] = pixels.data[i - 1] = v;
      pixels.data[i] = 255;
    }
    if (!any) return null;
    ctx.putImageData(pixels, 0, 0);
    return new Promise((done) => out.toBlob((blob) => {
      const reader = new FileReader();
      reader.onload = () => done(String(reader.result).split(",", 2)[1]);
      reader.readAsDataURL(blob);
    }, "image/png"));
  }
}

const SHAPES = ["9:16", "3:4", "4:5", "1:1", "16:9", "2:1"];

function grower(j, action) {
  // The image in a frame the size of the new canvas: a handle on each side drags that
  // side's margin out (mouse, pen or touch), a shape button sets the margins that reach it
  // (split evenly, as the server would), the sizes said as they change. Sent as px per side.
  const m = {left: 0, right: 0, top: 0, bottom: 0};
  const img = h("img", {src: j.outputs[0], alt: rowName(j), draggable: "false"});
  const frame = h("div", {class: "grow-frame", "data-grow-frame": j.id}, img);
  const size = h("p", {class: "muted", "data-grow-size": j.id});
  let scale = 1;  // screen px per image px
  const sides = ["left", "right", "top", "bottom"];
  const handles = sides.map((side) => h("span", {class: `handle ${side}`, "data-handle": side,
    role: "slider", "aria-label": side, tabindex: 0}));
  frame.append(...handles);
  function draw() {
    const [w, h_] = [img.naturalWidth, img.naturalHeight];
    const [W, H] = [w + m.left + m.right, h_ + m.top + m.bottom];
    scale = Math.min(Math.min(760, innerWidth * 0.8) / W, innerHeight * 0.55 / H);
    Object.assign(frame.style, {width: `${W * scale}px`, height: `${H * scale}px`});
    Object.assign(img.style, {width: `${w * scale}px`, left: `${m.left * scale}px`, top: `${m.top * scale}px`});
    size.textContent = `${w}×${h_} → ${W}×${H}`;
    if (W > w || H > h_) said.textContent = "";  // (grown now: the hint is answered)
    for (const handle of handles) handle.setAttribute("aria-valuenow", m[handle.dataset.handle]);
  }
  for (const handle of handles) {
    const side = handle.dataset.handle;
    const sign = side === "left" || side === "top" ? -1 : 1;
    const along = side === "left" || side === "right" ? "clientX" : "clientY";
    let from = null, start = 0, at = 1;  // (the scale the drag began at: the frame refits as it grows)
    handle.addEventListener("pointerdown", (e) => {
      handle.setPointerCapture(e.pointerId);
      from = e[along]; start = m[side]; at = scale;
    });
    handle.addEventListener("pointermove", (e) => {
      if (from === null) return;
      m[side] = Math.max(0, Math.round(start + sign * (e[along] - from) / at));
      draw();
    });
    const lift = () => { from = null; };
    handle.addEventListener("pointerup", lift);
    handle.addEventListener("pointercancel", lift);
  }
  function toShape(shape) {  // the margins that grow the image to it, split evenly
    const [a, b] = shape.split(":").map(Number);
    const [w, h_] = [img.naturalWidth, img.naturalHeight];
    Object.assign(m, {left: 0, right: 0, top: 0, bottom: 0});
    if (w * b < h_ * a) { const extra = Math.round(h_ * a / b) - w; m.left = Math.floor(extra / 2); m.right = extra - m.left; }
    else { const extra = Math.round(w * b / a) - h_; m.top = Math.floor(extra / 2); m.bottom = extra - m.top; }
    draw();
  }
  const said = actionDialog(j, action, {
    cls: "painter grower", title: t("extend_to"), send: {"data-send-grow": j.id},
    parts: [h("div", {class: "tools"}, ...SHAPES.map((shape) => h("button", {type: "button",
      class: "small", "data-shape": shape, onclick: () => toShape(shape)}, shape))),
      frame, size],
    ask: () => sides.some((side) => m[side] > 0) ? {...m} : t("grow_nothing")});
  img.addEventListener("load", draw);
}

function actionDialog(j, action, {cls, title, send: sendData, says = {}, parts, ask}) {
  // What the painter and the grower share: their title and own parts, a box for what to
  // paint, the send button (the action's verb), Cancel, and errors said in the dialog.
  // `ask()` gives the action's fields, or the words saying what is missing yet. Returns
  // where errors are said.
  const words = h("input", {type: "text", name: "paint", maxlength: 2000,
    placeholder: t("paint_what"), "aria-label": t("paint_what")});
  const send = h("button", {type: "submit", ...sendData}, verb(action));
  const said = h("p", {class: "error", role: "alert", ...says});
  const close = () => { dialog.close(); dialog.remove(); };
  const dialog = h("dialog", {class: cls, "aria-label": title},
    h("form", {method: "dialog", onsubmit: async (e) => {
      e.preventDefault();
      const fields = await ask();
      if (typeof fields === "string") { said.textContent = fields; return; }
      said.textContent = "";
      if (words.value.trim()) fields.instruction = words.value;
      send.disabled = true;
      const ok = await actWith(j, {action, ...fields}, said);
      send.disabled = false;
      if (ok) close();
    }},
    h("h2", {text: title}), ...parts,
    h("div", {class: "tools"}, words, send,
      h("button", {type: "button", class: "link", onclick: close}, t("cancel"))), said));
  document.body.appendChild(dialog);
  dialog.showModal();
  return said;
}

async function actWith(j, body, where = null) {  // an action on j's image; then its batch
  const r = await call("POST", `${API}/jobs/${j.id}/actions`, body);
  if (!r.ok) { failure(r, where); return false; }
  toast(t("acted", {id: r.data.batch, count: r.data.jobs.length}), "ok");
  location.hash = `#/batches/${r.data.batch}`;
  return true;
}

async function batchPage(main, id, params) {
  const keptOnly = params.get("kept") === "1";  // the picks: kept images of it and all made from it
  const gridView = params.get("grid") === "1";  // a sweep as its labelled grids (bot/app/grids.py)
  let sweep = null;                              // the batch's sweep: {axes, grid, seeds}
  const head = h("div", {class: "card batch-head"});
  const grid = h("div", {class: "grid", id: "thumbs"});
  const more = h("button", {class: "link", hidden: true, text: t("load_more")});
  main.replaceChildren(head, grid, more);
  const cards = new Map();   // job id -> [state, card]: a card is rebuilt only when it changes
  let shown = 0;             // rows 1..shown are on the page
  let signedOff = false;     // reviews are final once the batch is signed off
  let focused = null;        // the card a reviewer is on (kept across rebuilds)
  const undo = [];           // jobs as they were before each review here: Ctrl+Z takes one back
  const latest = new Map();  // job id -> the job as last read (what the lightbox shows)
  let files = new Map();     // job id -> its files for the batch's sales channels (renditions)
  const lightbox = lightboxOf();
  const compare = compareOf();

  function card(j) {
    const mine = files.get(j.id) || [];
    const state = `${j.status} ${j.review} ${j.stars} ${j.review_note} ${signedOff} ${compare.has(j.id)} ${mine.map((f) => f.state)}`;
    latest.set(j.id, j);
    const known = cards.get(j.id);
    if (known && known[0] === state && !stateIs(j.status, "working")) return known[1];
    const lineage = h("div", {class: "lineage"});
    const made = h("figure", {class: `thumb ${j.status} review-${j.review}${compare.has(j.id) ? " compared" : ""}`, "data-job": j.id,
      "data-rating": j.rating || "", "data-review": j.review, tabindex: reviewing(j) ? 0 : -1,
      onkeydown: (e) => reviewKey(e, j), onfocus: () => { focused = j.id; }},
      j.outputs.length
        ? h("a", {href: j.outputs[0], "data-open": j.id, onclick: (e) => { e.preventDefault(); lightbox.show(j.id); }},
            h("img", {src: `${j.outputs[0]}?size=256`, loading: "lazy", alt: rowName(j)}))
        : h("div", {class: "empty"}, badge(j.status)),
      h("figcaption", {}, `${rowName(j)} `,
        distinction(j) ? h("span", {class: "distinct", "data-distinct": j.id}, `${distinction(j)} `) : null,
        badge(j.status), reviewed(j) ? badge(j.review, "reviews") : null,
        j.stars ? h("span", {class: "stars", "data-stars": j.id, "aria-label": t("stars", {count: j.stars}),
          text: " " + "★".repeat(j.stars)}) : null),
      j.review_note ? h("p", {class: "review-note", "data-note": j.id, text: j.review_note}) : null,
      stateIs(j.status, "working") ? progressBar(j.id, () => lightbox.show(j.id)) : null,
      j.error ? h("p", {class: "error", title: j.error, text: j.error}) : null,
      mine.length ? renditionList(j, mine) : null,
      imageActions(j, lineage), lineage);
    cards.set(j.id, [state, made]);
    return made;
  }
  // The row's files for its sales channels: each one's name (it opens the file), ✓ where it
  // ships, ⚠ and why where it needs review (its checks' findings) or waits for approval.
  function renditionList(j, mine) {
    return h("ul", {class: "renditions", "data-renditions": j.id}, ...mine.map((f) =>
      h("li", {"data-file": f.name, "data-state": f.state},
        h("a", {href: f.url, target: "_blank", text: f.name}),
        f.state === "ships"
          ? h("span", {class: "ships", title: t("ships"), text: " ✓"})
          : h("span", {class: "held", text: ` ⚠ ${f.findings.map((x) => x.message).join("; ") || t("held")}`}))));
  }
  async function loadFiles() {
    const r = await call("GET", `${API}/batches/${id}/renditions?lang=${encodeURIComponent(vocabulary.language)}`);
    const found = new Map();
    for (const f of r.ok ? r.data.renditions : []) {
      if (!found.has(f.job)) found.set(f.job, []);
      found.get(f.job).push(f);
    }
    files = found;
  }
  function imageActions(j, lineage) {
    const finished = stateIs(j.status, "produced") && j.outputs.length;
    const keep = j.rating === "kept";
    const review = reviewing(j);
    return h("div", {class: "image-actions"},
      finished && me.may.includes("keep") && !signedOff ? h("button", {class: `small${keep ? " on" : ""}`, "data-keep": j.id,
        onclick: () => review_(j, keep ? "unreviewed" : "approved")}, t(keep ? "unkeep" : "keep")) : null,
      review ? h("button", {class: `small${j.review === "rejected" ? " on" : ""}`, "data-reject": j.id,
        onclick: () => askReason(j)}, t("reject")) : null,
      review ? h("button", {class: `small${j.review === "changes_requested" ? " on" : ""}`,
        "data-changes": j.id, onclick: () => askChanges(j)}, t("request_changes")) : null,
      ...(finished ? j.actions : []).filter((a) => oneClick(a) && mayTouch(a, j.submitter)).map((a) =>
        h("button", {class: "small", "data-act": a, onclick: (e) => act(j, a, e.currentTarget)}, verb(a))),
      finished ? instructionBox(j) : null,
      finished ? regionButton(j) : null,
      finished ? shapeButton(j) : null,
      j.parent_job_id || finished ? h("button", {class: "link small", "data-lineage": j.id,
        text: j.parent_job_id ? t("made_from", {action: verb(j.action), id: j.parent_job_id}) : t("lineage"),
        onclick: () => showLineage(j, lineage)}) : null);
  }
  function instructionBox(j) {  // the image itself changed by a sentence, on the edit model
    const takes = vocabulary.actions.filter((a) => a.takes.includes("instruction"));
    const action = takes.map((a) => a.name).find((a) => mayTouch(a, j.submitter));
    if (!me.edit_model || !action) return null;
    const input = h("input", {type: "text", name: "instruction", maxlength: 2000,
      placeholder: t("instruction"), "aria-label": t("instruction")});
    return h("form", {class: "instruction", "data-instruct": j.id, onsubmit: async (e) => {
      e.preventDefault();
      if (!input.value.trim()) return;
      const button = e.currentTarget.querySelector("button");
      button.disabled = true;
      await actWith(j, {action, instruction: input.value});
      button.disabled = false;
    }}, input, h("button", {class: "small", type: "submit"}, verb(action)));
  }
  function taking(parameter, j) {  // the first action that takes it that this person may ask
    return vocabulary.actions.filter((a) => a.takes.includes(parameter))
      .map((a) => a.name).find((a) => mayTouch(a, j.submitter));
  }
  function regionButton(j) {  // repaint: a region painted on the image
    const action = taking("mask", j);
    if (!action) return null;
    return h("button", {class: "small", "data-paint": j.id,
      onclick: () => painter(j, action)}, verb(action));
  }
  function shapeButton(j) {  // the canvas grown around the image (the action that takes margins)
    const action = taking("margins", j);
    if (!action) return null;
    return h("button", {class: "small", "data-grow": j.id, onclick: () => grower(j, action)},
      verb(action));
  }
  // --- review: buttons, and keys on the focused card (P X U R 1-5, arrows, Ctrl+Z) ------
  function reviewing(j) {  // may this person review j now?
    return !signedOff && me.may.includes("keep") && stateIs(j.status, "produced") && j.outputs.length > 0;
  }
  function reviewed(j) {
    const known = vocabulary.reviews.find((r) => r.name === j.review);
    return known && known.reviewed;
  }
  async function review_(j, state, note = "", {undoable = true, where = null} = {}) {
    const r = await call("PUT", `${API}/jobs/${j.id}/review`, {state, note});
    if (!r.ok) { failure(r, where); return false; }
    if (undoable) undo.push(j);  // (as it was before)
    if (r.data.change) toast(t("acted", {id: r.data.change.batch, count: r.data.change.jobs.length}), "ok");
    await refresh();
    lightbox.again();
    return true;
  }
  async function grade(j, stars, undoable = true) {
    const r = await call("PUT", `${API}/jobs/${j.id}/stars`, {stars});
    if (!r.ok) return failure(r);
    if (undoable) undo.push(j);
    await refresh();
    lightbox.again();
  }
  async function undoLast() {
    const was = undo.pop();
    if (!was) return;
    const state = was.review === "changes_requested" ? "unreviewed" : was.review;  // (a queued change stays queued)
    await review_(was, state, was.review_note || "", {undoable: false});
    await grade(was, was.stars, false);
    focused = was.id;
    toast(t("undone"), "ok");
    refocus();
  }
  function words(title, {presets = [], required = false, send: label, data}) {
    // A small dialog asking for words (a reason, the changes): presets to pick, or typed.
    return new Promise((resolve) => {
      const input = h("input", {type: "text", name: "note", maxlength: 500, "aria-label": title,
        required, placeholder: title});
      const close = (value) => { dialog.close(); dialog.remove(); resolve(value); refocus(); };
      const dialog = h("dialog", {class: "words", "aria-label": title, ...data},
        h("form", {method: "dialog", onsubmit: (e) => { e.preventDefault(); close(input.value.trim()); }},
          h("h2", {text: title}),
          presets.length ? h("div", {class: "tools presets"}, ...presets.map((p) =>
            h("button", {type: "button", class: "small", "data-preset": p, onclick: () => close(p)}, p))) : null,
          h("div", {class: "tools"}, input, h("button", {type: "submit"}, label),
            h("button", {type: "button", class: "link", onclick: () => close(null)}, t("cancel")))));
      dialog.addEventListener("cancel", () => close(null));
      document.body.appendChild(dialog);
      dialog.showModal();
      input.focus();
    });
  }
  async function askReason(j) {
    const reason = await words(t("reject_why"), {presets: vocabulary.reasons, send: t("reject"),
      data: {"data-reason-for": j.id}});
    if (reason !== null) await review_(j, "rejected", reason);
  }
  async function askChanges(j) {
    const note = await words(t("changes_what"), {required: true, send: t("request_changes"),
      data: {"data-changes-for": j.id}});
    if (note) await review_(j, "changes_requested", note);
  }
  function reviewKey(e, j) {
    if (e.target !== e.currentTarget || e.altKey || e.metaKey) return;  // (typing in a box on the card)
    if (e.key === "Enter" || e.key === " ") { e.preventDefault(); if (j.outputs.length) lightbox.show(j.id); return; }
    const key = e.key.toLowerCase();
    if ((e.ctrlKey && key === "z") || key === "backspace") { e.preventDefault(); undoLast(); return; }
    if (e.ctrlKey) return;
    const move = {arrowright: 1, arrowleft: -1, arrowdown: columns(), arrowup: -columns()}[key];
    if (move) { e.preventDefault(); step(j, move); return; }
    if (key === "c" && j.outputs.length) { e.preventDefault(); if (e.shiftKey) compare.open(); else compare.toggle(j); return; }
    if (!reviewing(j)) return;
    const next = () => { step(j, 1); };  // (at once: the next key is for the next image)
    if (key === "p") { e.preventDefault(); next(); review_(j, "approved"); }
    else if (key === "x" && e.shiftKey) { e.preventDefault(); askReason(j); }
    else if (key === "x") { e.preventDefault(); next(); review_(j, "rejected"); }
    else if (key === "u") { e.preventDefault(); review_(j, "unreviewed"); }
    else if (key === "r") { e.preventDefault(); askChanges(j); }
    else if (/^[0-5]$/.test(key)) { e.preventDefault(); grade(j, Number(key) || null); }
  }
  function columns() {  // cards per row in the grid as laid out now
    const tops = [...grid.children].slice(0, 12).map((c) => c.offsetTop);
    return Math.max(1, tops.filter((top) => top === tops[0]).length);
  }
  function step(j, by, now = true) {  // focus the card `by` places on (now, or once refreshed)
    const all = [...grid.querySelectorAll("figure.thumb")];
    const at = all.findIndex((c) => Number(c.dataset.job) === j.id);
    const to = all[Math.min(all.length - 1, Math.max(0, at + by))];
    if (!to) return;
    focused = Number(to.dataset.job);
    if (now) to.focus();
  }
  function refocus() {  // cards are rebuilt when they change: give the reviewer's place back
    const now = document.activeElement;
    if (focused === null || (now && now !== document.body && !grid.contains(now))) return;
    const card = grid.querySelector(`figure.thumb[data-job="${focused}"]`);
    if (card && !document.querySelector("dialog[open]")) card.focus({preventScroll: false});
  }
  // --- the lightbox: one image large, its recipe beside it; arrows, Z zoom, review keys --
  function lightboxOf() {
    let current = null, zoomed = false, drag = null;
    const img = h("img", {class: "full", alt: "", draggable: "false"});  // (a drag pans or swipes)
    const stage = h("div", {class: "stage", "data-stage": ""}, img);
    const info = h("aside", {class: "info", "aria-live": "polite"});
    const title = h("h2", {class: "title"});
    const button = (label, attrs, onclick) => h("button", {type: "button", class: "small", ...attrs, onclick}, label);
    const download = h("a", {class: "small", download: "", "data-download": "", text: t("download")});
    const dialog = h("dialog", {class: "lightbox", "aria-label": t("image")},
      h("div", {class: "lightbox-bar"}, title,
        button("←", {"aria-label": t("previous"), "data-prev": ""}, () => go(-1)),
        button("→", {"aria-label": t("next_image"), "data-next": ""}, () => go(1)),
        button(t("zoom"), {"data-zoom": ""}, () => zoom()),
        button(t("before_after"), {"data-before-after": ""}, () => { dialog.close(); compare.beforeAfter(current); }),
        download,
        button("✕", {"aria-label": t("close"), "data-close": "", class: "link"}, () => dialog.close())),
      h("div", {class: "body"}, stage, info));
    dialog.addEventListener("close", () => { if (current) { focused = current.id; refocus(); } });
    dialog.addEventListener("keydown", (e) => {
      if (e.target.closest("input, textarea") || e.altKey || e.metaKey) return;
      const key = e.key.toLowerCase();
      if (key === "arrowright" || key === "arrowleft") { e.preventDefault(); go(key === "arrowright" ? 1 : -1); return; }
      if (key === "z" && !e.ctrlKey) { e.preventDefault(); zoom(); return; }
      if (key === "c" && current && !e.ctrlKey) { e.preventDefault(); if (e.shiftKey) { dialog.close(); compare.open(); } else compare.toggle(current); return; }
      if (key === "b" && current && current.parent_job_id && !e.ctrlKey) { e.preventDefault(); dialog.close(); compare.beforeAfter(current); return; }
      if (e.ctrlKey && key === "z") { e.preventDefault(); undoLast(); return; }
      if (!current || !reviewing(current) || e.ctrlKey) return;
      const j = current;
      if (key === "p") { e.preventDefault(); go(1); review_(j, "approved"); }
      else if (key === "x" && e.shiftKey) { e.preventDefault(); askReason(j); }
      else if (key === "x") { e.preventDefault(); go(1); review_(j, "rejected"); }
      else if (key === "u") { e.preventDefault(); review_(j, "unreviewed"); }
      else if (key === "r") { e.preventDefault(); askChanges(j); }
      else if (/^[0-5]$/.test(key)) { e.preventDefault(); grade(j, Number(key) || null); }
    });
    // Dragging a zoomed image pans it; on the whole image, a swipe reviews (a phone's way):
    // left or right steps to the next or the previous, up approves, down rejects.
    stage.addEventListener("pointerdown", (e) => {
      drag = {x: e.clientX, y: e.clientY, left: stage.scrollLeft, top: stage.scrollTop};
      stage.setPointerCapture(e.pointerId);
    });
    stage.addEventListener("pointermove", (e) => {
      if (!drag || !zoomed) return;
      stage.scrollLeft = drag.left - (e.clientX - drag.x);
      stage.scrollTop = drag.top - (e.clientY - drag.y);
    });
    stage.addEventListener("pointerup", (e) => {
      const from = drag;
      drag = null;
      if (!from || zoomed || !current) return;
      const dx = e.clientX - from.x, dy = e.clientY - from.y;
      if (Math.max(Math.abs(dx), Math.abs(dy)) < SWIPE) return;
      const j = current;
      if (Math.abs(dx) > Math.abs(dy)) go(dx < 0 ? 1 : -1);
      else if (reviewing(j)) { go(1); review_(j, dy < 0 ? "approved" : "rejected"); }
    });
    stage.addEventListener("pointercancel", () => { drag = null; });
    function zoom(on = !zoomed) {  // 100 %: the image's own pixels, panned by dragging
      zoomed = on;
      stage.classList.toggle("zoomed", zoomed);
      dialog.querySelector("[data-zoom]").setAttribute("aria-pressed", String(zoomed));
    }
    function neighbours() {  // the images in the grid's order
      return [...grid.querySelectorAll("figure.thumb")].map((c) => latest.get(Number(c.dataset.job)))
        .filter((j) => j && j.outputs.length);
    }
    function go(by) {
      const all = neighbours();
      const at = all.findIndex((j) => current && j.id === current.id);
      const to = all[at + by];
      if (to) show(to.id);
    }
    function show(id) {
      current = latest.get(id);
      if (!current) return;
      focused = id;
      zoom(false);
      img.src = current.outputs[0] || previews.get(id) || "";  // running: the picture forming
      if (current.outputs.length) delete img.dataset.preview;
      else img.dataset.preview = String(id);
      img.alt = rowName(current);
      download.hidden = !current.outputs.length;
      download.href = current.outputs[0] || "";
      title.textContent = `#${current.id} · ${rowName(current)}${distinction(current) ? " · " + distinction(current) : ""}`;
      dialog.dataset.lightbox = String(id);
      dialog.querySelector("[data-before-after]").hidden = !current.parent_job_id;
      info.replaceChildren(...recipe(current));
      if (!dialog.open) { document.body.appendChild(dialog); dialog.showModal(); }
    }
    function again() { if (dialog.open && current) show(current.id); }  // (the job read afresh)
    return {show, again};
  }
  function recipe(j) {  // what made it: values, model, version, lineage, timings, the call
    const row = (label, value, attrs = {}) => value === null || value === undefined || value === "" ? null
      : [h("dt", {text: label}), h("dd", {...attrs, text: String(value)})];
    const values = Object.entries(j.values || {}).flatMap(([k, v]) =>  // (null: the template's default)
      row(k, v === null ? "—" : typeof v === "object" ? JSON.stringify(v) : v, {"data-value": k}) || []);
    const waited = j.started_at ? j.started_at - j.enqueued_at : null;
    const ran = j.started_at && j.finished_at ? j.finished_at - j.started_at : null;
    const call_ = remake(j);
    const lineage = h("p", {class: "muted lineage-links"});
    call("GET", `${API}/jobs/${j.id}/lineage`).then((r) => {
      if (!r.ok) return;
      const link = (x) => h("a", {href: `#/batches/${x.batch}`, "data-lineage-job": x.id,
        text: `#${x.id}${x.action ? " " + verb(x.action) : ""}`});
      const list = (jobs) => jobs.length ? jobs.flatMap((x, i) => [i ? ", " : "", link(x)]) : [t("none")];
      lineage.replaceChildren(`${t("ancestors")}: `, ...list(r.data.ancestors), h("br"),
        `${t("children")}: `, ...list(r.data.children));
    });
    return [  // (null leaves a part out: filtered below, as replaceChildren would write "null")
      h("p", {}, badge(j.status), " ", reviewed(j) ? badge(j.review, "reviews") : "",
        j.stars ? h("span", {class: "stars", text: " " + "★".repeat(j.stars)}) : ""),
      j.review_note ? h("p", {class: "review-note", text: j.review_note}) : null,
      j.rated_by ? h("p", {class: "muted", text: `${j.rated_by} · ${when(j.rated_at)}`}) : null,
      h("dl", {class: "values"}, ...values,
        ...(row(t("instruction_label"), j.instruction) || []),
        ...(row(t("model"), j.model, {"data-model": ""}) || []),
        ...(row(t("template"), j.template ? `${j.template}${j.template_version ? "@" + j.template_version : ""}` : null, {"data-template": ""}) || []),
        ...(row(t("waited"), waited === null ? null : span(waited)) || []),
        ...(row(t("ran"), ran === null ? null : span(ran)) || [])),
      lineage,
      h("h3", {text: t("remake")}),
      h("pre", {class: "remake", "data-remake": j.id, text: call_}),
      h("button", {type: "button", class: "small", "data-copy": "", onclick: async (e) => {
        try { await navigator.clipboard.writeText(call_); toast(t("copied"), "ok"); }
        catch { const range = document.createRange(); range.selectNodeContents(e.currentTarget.previousSibling);
          getSelection().removeAllRanges(); getSelection().addRange(range); }
      }}, t("copy"))].filter((part) => part);
  }
  function remake(j) {  // the API call that makes this image again: its template version and values
    const body = JSON.stringify({template: j.template_version ? `${j.template}@${j.template_version}` : j.template,
      rows: [j.values]});
    return `curl -X POST ${location.origin}${API}/batches \\\n  -H "Authorization: Bearer $GENBOT_TOKEN" -H "Content-Type: application/json" \\\n  -d '${body.replaceAll("'", "'\\''")}'`;
  }
  // --- compare: two to four images side by side, zoom and pan locked; before/after ------
  function compareOf() {
    const picked = [];  // job ids, in the order picked
    const button = h("button", {type: "button", class: "small", id: "compare", hidden: true, onclick: () => open()});
    function has(id) { return picked.includes(id); }
    function toggle(j) {
      const at = picked.indexOf(j.id);
      if (at >= 0) picked.splice(at, 1);
      else { if (picked.length >= COMPARE_MOST) picked.shift(); picked.push(j.id); }
      button.hidden = picked.length < 2;
      button.textContent = t("compare", {count: picked.length});
      refresh();
    }
    function open() {
      const jobs = picked.map((id) => latest.get(id)).filter((j) => j && j.outputs.length);
      if (jobs.length < 2) { toast(t("compare_pick")); return; }
      side(jobs.map((j) => ({src: j.outputs[0], label: `#${j.id} · ${rowName(j)}${distinction(j) ? " · " + distinction(j) : ""}`})));
    }
    function side(images) {  // panes side by side; zoom (Z) and scrolling move them all
      let zoomed = false, syncing = false, drag = null;
      const panes = images.map((x) => h("figure", {class: "pane"},
        h("div", {class: "stage"}, h("img", {src: x.src, alt: x.label, draggable: "false"})),
        h("figcaption", {text: x.label})));
      const stages = panes.map((p) => p.querySelector(".stage"));
      for (const stage of stages) {
        stage.addEventListener("scroll", () => {
          if (syncing) return;
          syncing = true;
          for (const other of stages) if (other !== stage) { other.scrollLeft = stage.scrollLeft; other.scrollTop = stage.scrollTop; }
          syncing = false;
        });
        stage.addEventListener("pointerdown", (e) => {
          if (!zoomed) return;
          drag = {x: e.clientX, y: e.clientY, left: stage.scrollLeft, top: stage.scrollTop, stage};
          stage.setPointerCapture(e.pointerId);
        });
        stage.addEventListener("pointermove", (e) => {
          if (!drag || drag.stage !== stage) return;
          stage.scrollLeft = drag.left - (e.clientX - drag.x);
          stage.scrollTop = drag.top - (e.clientY - drag.y);
        });
        stage.addEventListener("pointerup", () => { drag = null; });
      }
      const zoom = () => { zoomed = !zoomed; for (const stage of stages) stage.classList.toggle("zoomed", zoomed); };
      dialogOf("compare", t("compare_title"), [
        h("button", {type: "button", class: "small", "data-zoom": "", onclick: zoom}, t("zoom"))],
        h("div", {class: `panes n${panes.length}`}, ...panes), (e) => {
          if (e.key.toLowerCase() === "z" && !e.ctrlKey) { e.preventDefault(); zoom(); }
        });
    }
    async function beforeAfter(j) {  // the image it was made from under it, a slider between
      const r = await call("GET", `${API}/jobs/${j.parent_job_id}`);
      if (!r.ok) return failure(r);
      const parent = r.data;
      if (!parent.outputs.length) { toast(t("compare_pick")); return; }
      const after = h("img", {class: "after", src: j.outputs[0], alt: `#${j.id}`, draggable: "false"});
      const slider = h("input", {type: "range", min: 0, max: 100, value: 50, "aria-label": t("before_after"),
        "data-slider": "", oninput: () => { after.style.clipPath = `inset(0 0 0 ${slider.value}%)`; }});
      after.style.clipPath = "inset(0 0 0 50%)";
      dialogOf("before-after", t("before_after"), [],
        h("div", {class: "swipe-stack"},
          h("img", {class: "before", src: parent.outputs[0], alt: `#${parent.id}`, draggable: "false"}), after),
        (e) => {
          const by = {arrowleft: -5, arrowright: 5}[e.key.toLowerCase()];
          if (by) { e.preventDefault(); slider.value = String(Number(slider.value) + by); slider.dispatchEvent(new Event("input")); }
        }, [h("p", {class: "muted", text: `${t("before")} #${parent.id} · ${t("after")} #${j.id} (${verb(j.action)})`}), slider]);
    }
    return {has, toggle, open, beforeAfter, button};
  }
  function dialogOf(kind, title, tools, body, onKey, below = []) {
    const dialog = h("dialog", {class: `viewer ${kind}`, "aria-label": title, "data-viewer": kind},
      h("div", {class: "lightbox-bar"}, h("h2", {class: "title", text: title}), ...tools,
        h("button", {type: "button", class: "link", "aria-label": t("close"), onclick: () => dialog.close()}, "✕")),
      body, ...below);
    dialog.addEventListener("keydown", onKey);
    dialog.addEventListener("close", () => { dialog.remove(); refocus(); });
    document.body.appendChild(dialog);
    dialog.showModal();
    return dialog;
  }
  async function move(to) {  // admins: its waiting jobs first (or last) among its submitter's
    const r = await call("POST", `${API}/batches/${id}/move`, {to});
    if (!r.ok) return failure(r);
    toast(t("moved", {count: r.data.moved}), "ok");
    refresh();
  }
  async function signOff() {
    const r = await call("POST", `${API}/batches/${id}/signoff`);
    if (!r.ok) return failure(r);
    toast(t("signed_off", {by: r.data.signed_off.by, when: when(r.data.signed_off.at)}), "ok");
    refresh();
  }
  async function reopen() {
    const r = await call("DELETE", `${API}/batches/${id}/signoff`);
    if (!r.ok) return failure(r);
    refresh();
  }
  async function act(j, action, button) {
    button.disabled = true;  // (and a second click within seconds gets the same batch anyway)
    await actWith(j, {action});
    button.disabled = false;
  }
  async function showLineage(j, box) {
    if (box.childElementCount) { box.replaceChildren(); return; }  // a second click hides it
    const r = await call("GET", `${API}/jobs/${j.id}/lineage`);
    if (!r.ok) return failure(r);
    const link = (x, how) => h("a", {href: `#/batches/${x.batch}`, "data-lineage-job": x.id,
      text: `#${x.id}${how && x.action ? " " + verb(x.action) : ""}${x.rating ? " · " + t(x.rating) : ""}`});
    const list = (jobs, how) => jobs.length ? jobs.flatMap((x, i) => [i ? ", " : "", link(x, how)]) : [t("none")];
    box.replaceChildren(
      h("p", {class: "muted ancestors"}, `${t("ancestors")}: `, ...list(r.data.ancestors, false)),
      h("p", {class: "muted children"}, `${t("children")}: `, ...list(r.data.children, true)));
  }
  async function loadPicks() {
    const r = await call("GET", `${API}/batches/${id}/picks`);
    if (!r.ok) return failure(r);
    grid.replaceChildren(...r.data.jobs.map(card));
    if (!r.data.jobs.length) grid.append(h("p", {class: "muted", id: "no-picks", text: t("no_picks")}));
    more.hidden = true;
    return r.data;
  }
  async function loadRows(total) {
    // The API lists newest first, so the sheet's first rows are its last offsets.
    shown = Math.min(total, Math.max(shown, 200));
    const jobs = [];
    for (let got = 0; got < shown; got += 1000) {
      const r = await call("GET", `${API}/jobs?batch=${id}&offset=${total - shown + got}&limit=${Math.min(1000, shown - got)}`);
      if (!r.ok) return failure(r);
      jobs.push(...r.data.jobs);
    }
    jobs.reverse();
    if (gridView && sweep) grid.replaceChildren(...sweepGrids(jobs));
    else grid.replaceChildren(...jobs.map(card));  // unchanged cards move, not reload
    more.hidden = shown >= total;
  }
  // A sweep's grids, as the contact sheet lays them out: one per row (and per value of any
  // axis beyond two), the grid's first axis across and its second down, each header the
  // swept value; each cell the image's card (review keys, the lightbox, its buttons).
  function sweepGrids(jobs) {
    const chosen = (sweep.grid && sweep.grid.length ? sweep.grid : sweep.axes) || [];
    const [across, down] = chosen.length ? [chosen[0], chosen[1] || null]
      : (sweep.seeds || 1) > 1 ? ["seed", null] : [null, null];
    const grids = new Map();
    for (const j of jobs) {
      const axes = j.axes || {};
      const rest = Object.entries(axes).filter(([k]) => k !== across && k !== down);
      const key = `${j.row} ${JSON.stringify(rest)}`;
      if (!grids.has(key)) grids.set(key, {j, rest, xs: [], ys: [], cells: new Map()});
      const g = grids.get(key);
      const at = (list, v) => { const s = JSON.stringify(v); if (!list.includes(s)) list.push(s); return list.indexOf(s); };
      g.cells.set(`${across ? at(g.xs, axes[across]) : 0} ${down ? at(g.ys, axes[down]) : 0}`, j);
    }
    return [...grids.values()].map((g) => h("section", {class: "sweep-grid", "data-grid-row": g.j.row},
      h("h3", {text: [rowName(g.j), ...g.rest.map(([k, v]) => axisLabel(k, v))].join(" · ")}),
      h("table", {},
        h("thead", {}, h("tr", {}, h("th", {}), ...(g.xs.length ? g.xs : ["null"]).map((x) =>
          h("th", {scope: "col", text: across ? axisLabel(across, JSON.parse(x)) : ""})))),
        h("tbody", {}, ...(g.ys.length ? g.ys : ["null"]).map((y, yi) => h("tr", {},
          h("th", {scope: "row", text: down ? axisLabel(down, JSON.parse(y)) : ""}),
          ...(g.xs.length ? g.xs : ["null"]).map((_, xi) => {
            const j = g.cells.get(`${xi} ${yi}`);
            return h("td", {}, j ? card(j) : null);
          })))))));
  }
  async function refresh() {
    const r = await call("GET", `${API}/batches/${id}`);
    if (!r.ok) return failure(r);
    const b = r.data;
    sweep = b.meta.sweep || null;
    if (b.counts.succeeded) await loadFiles();  // (made as jobs finish: read with them)
    const active = states().filter(isActive).reduce((a, s) => a + (b.counts[s] || 0), 0);
    const pickFiles = keptOnly ? h("span", {id: "pick-files"}) : null;
    const tallied = b.meta.compare ? h("ul", {id: "ab-tally", class: "muted"}) : null;
    signedOff = Boolean(b.signed_off);
    const images = Object.values(b.reviews).reduce((a, n) => a + n, 0);
    const done = vocabulary.reviews.filter((r) => r.reviewed).reduce((a, r) => a + (b.reviews[r.name] || 0), 0);
    const review = images ? h("p", {class: "review", id: "batch-review"},
      h("span", {id: "reviewed-of", text: t("reviewed_of", {reviewed: done, total: images})}),
      ...vocabulary.reviews.filter((r) => r.reviewed && b.reviews[r.name]).map((r) =>
        h("span", {class: "pair"}, badge(r.name, "reviews"), ` ${b.reviews[r.name]}`)),
      b.signed_off ? h("strong", {id: "signed-off", text: ` ✅ ${t("signed_off", {by: b.signed_off.by, when: when(b.signed_off.at)})}`}) : null,
      !b.signed_off && me.may.includes("signoff") ? h("button", {id: "sign-off", class: "small",
        disabled: done < images || active > 0, onclick: signOff}, t("sign_off")) : null,
      b.signed_off && me.may.includes("reopen") ? h("button", {id: "reopen", class: "small link", onclick: reopen}, t("reopen")) : null,
      me.may.includes("keep") && !b.signed_off ? h("span", {class: "muted keys", text: ` ${t("review_keys")}`}) : null) : null;
    head.replaceChildren(...[  // (null leaves a part out; replaceChildren would write "null")
      h("h2", {text: t("batch", {id})}),
      h("p", {}, h("strong", {text: b.template + (b.meta.version ? `@${b.meta.version}` : "")}), h("span", {class: "muted", text: ` · ${b.submitter} · ${named("priorities", b.priority)} · ${when(b.created_at)}${b.meta.sheet ? " · " + b.meta.sheet : ""}${b.meta.compare ? " · A/B: " + b.meta.compare.join(" / ") : ""}`})),
      b.demo_models.length ? h("p", {class: "note", id: "demo-note", text: t("demo_note", {models: b.demo_models.join(", ")})}) : null,
      ...b.unplaced.map((u) => h("p", {class: "note unplaced", text: t("unplaced_note", {what: u.what, why: u.why.join("; ")})})),
      h("p", {}, outcomeBar(b.counts, b.total, {id: "batch-progress"}),
        h("span", {id: "batch-done", text: ` ${b.done >= b.total && b.counts.canceled  // (not "2 of 2 done")
          ? t("canceled_of", {canceled: b.counts.canceled, total: b.total, succeeded: b.counts.succeeded || 0, failed: b.counts.failed || 0})
          : t("done_of", b)}`}),
        ...states().filter((s) => b.counts[s]).map((s) => h("span", {class: "pair"}, badge(s), ` ${b.counts[s]}`)),
        active && (b.held || b.eta_seconds) ? h("span", {class: "muted", id: "batch-eta", text: ` · ${estimate(b.held, b.eta_seconds, "")}`}) : null),
      b.meta.parent_job ? h("p", {class: "muted", id: "made-from"},
        `${t("batch_from", {action: verb(b.meta.action), job: b.meta.parent_job})} `,
        h("a", {href: `#/batches/${b.meta.parent_batch}`, text: t("batch", {id: b.meta.parent_batch})})) : null,
      h("p", {class: "actions"},
        active && mayTouch("cancel", b.submitter) ? h("button", {id: "cancel-batch", onclick: () => cancel(`${API}/batches/${id}/cancel`)}, t("cancel_batch")) : null,
        b.counts.failed && !active && mayTouch("retry", b.submitter) ? h("button", {id: "retry-batch", onclick: retry}, t("retry")) : null,
        b.counts.queued && me.may.includes("move") ? h("button", {id: "move-front", class: "small", onclick: () => move("front")}, t("move_front")) : null,
        b.counts.queued && me.may.includes("move") ? h("button", {id: "move-back", class: "small", onclick: () => move("back")}, t("move_back")) : null,
        b.done >= b.total && b.files.contact ? h("a", {href: b.files.contact, target: "_blank", text: t("contact")}) : null,
        b.done >= b.total ? h("a", {href: b.files.results, text: t("results")}) : null,
        b.counts.succeeded ? h("a", {href: `${API}/batches/${id}/images.zip`, "data-zip": "", text: t("zip")}) : null,
        compare.button,
        b.reviews.approved ? h("a", {href: `${API}/batches/${id}/images.zip?review=approved`, "data-zip": "approved", text: t("zip_approved")}) : null,
        files.size ? h("a", {href: `${API}/batches/${id}/deliverables.zip`, "data-zip": "deliverables", text: t("deliverables")}) : null,
        b.done >= b.total && /\.(xlsx|xlsm|csv)$/i.test(b.meta.sheet || "")
          ? h("a", {href: `${API}/batches/${id}/sheet`, id: "filled-sheet", text: t("filled_sheet")}) : null,
        h("label", {}, h("input", {type: "checkbox", id: "kept-only", checked: keptOnly,
          onchange: (e) => { location.hash = `#/batches/${id}${e.target.checked ? "?kept=1" : ""}`; }}),
          ` ${t("kept_only")}`),
        sweep && !keptOnly ? h("label", {}, h("input", {type: "checkbox", id: "sweep-grid", checked: gridView,
          onchange: (e) => { location.hash = `#/batches/${id}${e.target.checked ? "?grid=1" : ""}`; }}),
          ` ${t("as_grid")}`) : null,
        pickFiles),
      review, tallied].filter((part) => part));
    if (tallied) await tally(tallied);
    if (!keptOnly) { await loadRows(b.total); refocus(); return; }
    const picks = await loadPicks();
    if (picks && picks.jobs.length && pickFiles) {
      pickFiles.replaceChildren(
        h("a", {href: picks.files.contact, target: "_blank", text: t("picks_contact")}), " ",
        h("a", {href: picks.files.results, text: t("picks")}));
    }
  }
  // An A/B batch: the rows each version won by keeps (/ab). Filled into the list it was
  // given, not one looked up after the await: by then the page may have moved on.
  async function tally(list) {
    const r = await call("GET", `${API}/batches/${id}/ab`);
    if (!r.ok) return;
    const a = r.data;
    list.replaceChildren(
      ...a.variants.map((v) => h("li", {text: t("ab_won", {variant: v, count: a.won[v] || 0})})),
      h("li", {text: t("ab_ties", a)}), a.unrated ? h("li", {text: t("ab_unrated", {count: a.unrated})}) : "");
  }
  async function retry() {
    const r = await call("POST", `${API}/batches/${id}/retry`);
    if (!r.ok) return failure(r);
    location.hash = `#/batches/${r.data.batch}`;
  }
  more.addEventListener("click", () => { shown += 200; refresh(); });
  await refresh();
  return {refresh};
}

async function submitForm(main) {
  // A sheet, or rows typed here (a form from the template's columns, pictures uploaded
  // per row: sent as a CSV sheet with them, so every check a sheet gets, these get);
  // either may sweep (vary, seeds, grid) and compare with other versions (A/B).
  const r = await call("GET", `${API}/templates`);
  if (!r.ok) { failure(r); return {refresh() {}}; }
  const templates = r.data.templates;
  let key = randomKey();  // one key per filled-in form: a double click queues one batch
  const choice = h("select", {name: "template", id: "template", required: true},
    ...templates.map((tp) => h("option", {value: tp.name, text: `${tp.name} — ${tp.description || ""}`})));
  const template = () => templates.find((x) => x.name === choice.value);
  const help = h("div", {class: "params"});
  const showParams = () => {
    const tp = template();
    help.replaceChildren(h("h3", {text: t("params")}), h("table", {},
      ...(tp ? tp.params : []).map((p) => h("tr", {},
        h("td", {}, h("code", {text: p.name})),
        h("td", {class: "muted", text: p.type}),
        h("td", {text: p.required ? t("required") : (p.default !== null ? t("default", {v: JSON.stringify(p.default)}) : t("optional"))}),
        h("td", {class: "muted", text: [p.help, p.allowed].filter(Boolean).join(" · ")})))));
    rows.replaceChildren();
    addRow();
  };
  const bySheet = h("input", {type: "radio", name: "source", id: "by-sheet", value: "sheet", checked: true});
  const byRows = h("input", {type: "radio", name: "source", id: "by-rows", value: "rows"});
  const sheet = h("input", {type: "file", name: "sheet", id: "sheet", required: true, accept: ".xlsx,.xlsm,.xls,.ods,.csv"});
  const pictures = h("input", {type: "file", name: "pictures", id: "pictures", multiple: true, accept: "image/*"});
  const sheetPart = h("div", {class: "sheet-part"}, h("label", {}, t("sheet"), sheet),
    h("label", {}, t("pictures"), pictures));
  const rows = h("div", {class: "rows", id: "rows"});
  const addRow = () => rows.append(rowFields(template(), rows.childElementCount + 1));
  const rowsPart = h("div", {class: "rows-part", hidden: true}, rows,
    h("button", {type: "button", class: "small", id: "add-row", onclick: addRow}, t("add_row")));
  const switchSource = () => {
    sheetPart.hidden = byRows.checked;
    rowsPart.hidden = !byRows.checked;
    sheet.required = !byRows.checked;
  };
  bySheet.addEventListener("change", switchSource);
  byRows.addEventListener("change", switchSource);
  choice.addEventListener("change", showParams);
  // Only the priorities this person may use (GET /me): the API refuses the others anyway.
  const priority = h("select", {name: "priority", id: "priority"},
    ...vocabulary.priorities.filter((p) => me.priorities.includes(p.name)).map((p) =>
      h("option", {value: p.name, selected: p.name === "normal", text: p.label})));
  const notBefore = h("input", {type: "text", name: "not_before", id: "not_before", autocomplete: "off"});
  const skip = h("input", {type: "checkbox", name: "skip_invalid", id: "skip_invalid"});
  const axes = h("div", {class: "axes", id: "axes"});
  const addAxis = () => axes.append(h("input", {type: "text", class: "axis",
    placeholder: "steps=20,30,40", "aria-label": t("axes")}));
  addAxis();
  const seeds = h("input", {type: "number", name: "seeds", id: "seeds", min: 1, max: 100, value: 1});
  const grid = h("input", {type: "text", name: "grid", id: "grid", placeholder: "steps,guidance"});
  const compare = h("input", {type: "text", name: "compare", id: "compare-with", placeholder: "product_main@2"});
  const channels = h("input", {type: "text", name: "channels", id: "channels", placeholder: "taobao,douyin"});
  const layout = h("input", {type: "text", name: "layout", id: "layout", placeholder: "launch"});
  const send = h("button", {type: "submit", id: "send", text: t("send")});
  const report = h("div", {id: "report"});
  const form = h("form", {class: "card submit", id: "submit-form"},
    h("label", {}, t("template"), choice), help,
    h("p", {class: "source"}, h("label", {class: "inline"}, bySheet, ` ${t("by_sheet")}`), " ",
      h("label", {class: "inline"}, byRows, ` ${t("by_rows")}`)),
    sheetPart, rowsPart,
    h("fieldset", {class: "sweep"}, h("legend", {text: t("sweep")}),
      h("label", {}, t("axes"), axes),
      h("button", {type: "button", class: "small", id: "add-axis", onclick: addAxis}, t("add_axis")),
      h("label", {}, t("seeds"), seeds), h("label", {}, t("grid"), grid),
      h("label", {}, t("compare_with"), compare)),
    h("label", {}, t("channels"), channels),
    h("label", {}, t("layout"), layout),
    h("label", {}, t("priority"), priority),
    h("label", {}, t("not_before"), notBefore),
    h("label", {class: "inline"}, skip, ` ${t("skip_invalid")}`),
    send, report);
  form.addEventListener("submit", async (e) => {
    e.preventDefault();
    const body = new FormData();
    body.append("template", choice.value);
    body.append("priority", priority.value);
    if (notBefore.value.trim()) body.append("not_before", notBefore.value.trim());
    if (skip.checked) body.append("skip_invalid", "1");
    for (const axis of axes.querySelectorAll("input")) if (axis.value.trim()) body.append("vary", axis.value.trim());
    if (Number(seeds.value) > 1) body.append("seeds", seeds.value);
    if (grid.value.trim()) body.append("grid", grid.value.trim());
    if (channels.value.trim()) body.append("channels", channels.value.trim());
    if (layout.value.trim()) body.append("layout", layout.value.trim());
    for (const other of compare.value.split(",").map((x) => x.trim()).filter(Boolean)) body.append("compare", other);
    if (byRows.checked) {
      const typed = typedRows(template(), rows);
      if (!typed.count) { report.replaceChildren(h("p", {class: "error", text: t("no_rows")})); return; }
      body.append("sheet", new Blob([typed.csv], {type: "text/csv"}), "rows.csv");
      for (const f of typed.pictures) body.append("picture", f, f.name);
    } else {
      body.append("sheet", sheet.files[0], sheet.files[0].name);
      for (const f of pictures.files) body.append("picture", f, f.name);
    }
    send.disabled = true;
    send.textContent = t("sending");
    const res = await submitWith(body, key);
    send.disabled = false;
    send.textContent = t("send");
    if (res.ok) {
      key = randomKey();
      toast(t("submitted", {id: res.data.id, count: res.data.total}), "ok");
      location.hash = `#/batches/${res.data.id}`;
      return;
    }
    const err = res.data.error || {message: String(res.status)};
    report.replaceChildren(h("p", {class: "error", text: err.code === "invalid_sheet" ? t("problems") : err.message}),
      err.problems ? h("ul", {class: "problems"}, ...err.problems.map((p) => h("li", {text: p.message}))) : "");
  });
  main.replaceChildren(form);
  showParams();
  return {refresh() {}};
}

function rowFields(tp, n) {  // one row's fields, from the template's columns
  const field = (p) => {
    const attrs = {name: p.name, "data-param": p.name, "aria-label": `${p.name} (${n})`,
      "data-required": p.required};  // (said by the server, by row and column, as for a sheet)
    let input;
    if (p.picture) input = h("input", {...attrs, type: "file", accept: "image/*"});
    else if (p.choices.length) input = h("select", attrs, h("option", {value: "", text: p.default !== null ? `— ${p.default}` : "—"}),
      ...p.choices.map((c) => h("option", {value: c, text: c})));
    else if (["int", "float", "seed"].includes(p.type)) input = h("input", {...attrs, type: "number",
      step: p.type === "float" ? "any" : 1, min: p.minimum ?? "", max: p.maximum ?? "",
      placeholder: p.default !== null ? String(p.default) : ""});
    else if (p.type === "text") input = h("textarea", {...attrs, rows: 2, placeholder: p.default !== null ? String(p.default) : ""});
    else input = h("input", {...attrs, type: "text", placeholder: p.default !== null ? String(p.default) : ""});
    return h("label", {class: "cell"}, h("code", {text: p.name}), input);
  };
  return h("fieldset", {class: "row", "data-row": n}, h("legend", {text: t("row_n", {n})}),
    ...(tp ? tp.params : []).map(field));
}

function typedRows(tp, rows) {
  // The rows typed as a CSV sheet (its header the columns' names), each picture renamed
  // after its row so that two rows' "photo.png" stay two pictures.
  const quote = (v) => /[",\n\r]/.test(v) ? `"${v.replaceAll('"', '""')}"` : v;
  const names = tp.params.map((p) => p.name);
  const lines = [names.map(quote).join(",")], pictures = [];
  let count = 0;
  rows.querySelectorAll("fieldset.row").forEach((row, i) => {
    const cells = names.map((name) => {
      const input = row.querySelector(`[data-param="${CSS.escape(name)}"]`);
      if (input.type === "file") {
        const f = input.files[0];
        if (!f) return "";
        const renamed = new File([f], `row${i + 1}-${f.name}`, {type: f.type});
        pictures.push(renamed);
        return renamed.name;
      }
      return input.value.trim();
    });
    if (cells.some((c) => c !== "")) { count += 1; lines.push(cells.map(quote).join(",")); }
  });
  return {csv: lines.join("\r\n") + "\r\n", pictures, count};
}

async function submitWith(body, key) {
  const response = await fetch(`${API}/batches`, {method: "POST", body, credentials: "same-origin",
    headers: {"X-CSRF-Token": me.csrf, "Idempotency-Key": key}});
  let data = {};
  try { data = await response.json(); } catch (e) { /* empty */ }
  return {ok: response.ok, status: response.status, data};
}

async function webhooksPage(main, params) {
  // Admins only (the API refuses anyone else): the endpoints and how their deliveries went,
  // a test sent now, a delivery sent again, an endpoint a 410 Gone turned off turned on.
  const status = params.get("status") || "";
  const only = params.get("endpoint") || "";
  const endpoints = h("section", {class: "card", id: "endpoints"});
  const byStatus = h("select", {id: "delivery-status", "aria-label": t("status"), onchange: filtered},
    h("option", {value: "", text: t("all")}),
    ...vocabulary.deliveries.map((s) => h("option", {value: s.name, selected: s.name === status, text: s.label})));
  const byEndpoint = h("select", {id: "delivery-endpoint", "aria-label": t("endpoint"), onchange: filtered});
  const list = h("table", {id: "deliveries"});
  const more = h("button", {id: "more-deliveries", class: "link", hidden: true, text: t("more")});
  main.replaceChildren(endpoints, h("section", {class: "card"},
    h("h2", {text: t("deliveries")}), h("div", {class: "toolbar"}, byStatus, byEndpoint), list, more));
  let pages = 1;  // pages of deliveries on screen: a refresh fetches as many again

  function filtered() {
    const q = new URLSearchParams();
    if (byStatus.value) q.set("status", byStatus.value);
    if (byEndpoint.value) q.set("endpoint", byEndpoint.value);
    location.hash = q.toString() ? `#/webhooks?${q}` : "#/webhooks";
  }
  function query(cursor) {
    const q = new URLSearchParams({limit: DELIVERY_PAGE});
    if (only) q.set("endpoint", only);
    if (status) q.set("status", status);
    if (cursor !== null) q.set("cursor", cursor);
    return `${API}/webhooks/deliveries?${q}`;
  }
  function endpointRow(e) {
    return h("tr", {"data-endpoint": e.id, "data-disabled": String(Boolean(e.disabled))},
      h("td", {}, h("strong", {text: e.id}),
        e.description ? h("div", {class: "muted", text: e.description}) : null),
      h("td", {class: "url", text: e.url}),
      h("td", {text: t(`kind_${e.kind}`)}),
      h("td", {class: "muted", text: e.events.join(", ")}),
      h("td", {class: "nowrap"}, ...vocabulary.deliveries.map(({name}) => h("span", {class: "pair", "data-count": name},
        badge(name, "deliveries"), ` ${e.deliveries[name] || 0}`))),
      h("td", {}, e.disabled ? [badge("disabled"), h("div", {class: "error reason", text: e.disabled})] : null),
      h("td", {class: "nowrap"},
        h("button", {class: "small", "data-test": e.id, onclick: (ev) => test(e.id, ev.currentTarget)}, t("send_test")),
        e.disabled ? h("button", {class: "small", "data-enable": e.id,
          onclick: (ev) => enable(e.id, ev.currentTarget)}, t("enable")) : null));
  }
  function deliveryRow(d) {
    return h("tr", {"data-delivery": d.id, "data-status": d.status},
      h("td", {text: `#${d.id}`}), h("td", {text: d.endpoint}), h("td", {}, h("code", {text: d.type})),
      h("td", {class: "nowrap"}, badge(d.status, "deliveries"), d.response ? h("span", {class: "muted", text: ` ${d.response}`}) : null),
      h("td", {text: String(d.attempts)}),
      h("td", {class: d.status === "sent" ? "muted" : "error", title: d.last_error || null, text: d.last_error || ""}),
      h("td", {class: "muted", text: at(d.updated_at)}),
      h("td", {class: "muted", text: at(d.next_attempt_at)}),
      h("td", {}, d.status === "pending" ? null : h("button", {class: "small", "data-redeliver": d.id,
        onclick: (ev) => redeliver(d.id, ev.currentTarget)}, t("redeliver"))));
  }
  async function test(id, button) {
    button.disabled = true;  // (the attempt is made while the request waits)
    const r = await call("POST", `${API}/webhooks/endpoints/${encodeURIComponent(id)}/test`);
    button.disabled = false;
    if (!r.ok) return failure(r);
    if (r.data.status === "sent") toast(t("test_taken", {endpoint: id, response: r.data.response}), "ok");
    else toast(t("test_not_taken", {endpoint: id, error: r.data.last_error || named("deliveries", r.data.status)}));
    refresh();
  }
  async function enable(id, button) {
    button.disabled = true;
    const r = await call("POST", `${API}/webhooks/endpoints/${encodeURIComponent(id)}/enable`);
    if (!r.ok) { button.disabled = false; return failure(r); }
    toast(t(r.data.enabled ? "enabled" : "was_enabled", {endpoint: id}), "ok");
    refresh();
  }
  async function redeliver(id, button) {
    button.disabled = true;
    const r = await call("POST", `${API}/webhooks/deliveries/${id}/redeliver`);
    button.disabled = false;
    if (r.status === 409) toast(t("still_pending", {id}));
    else if (!r.ok) failure(r);
    else if (r.data.status === "sent") toast(t("redelivered", {id, response: r.data.response}), "ok");
    else toast(t("not_redelivered", {id, error: r.data.last_error || named("deliveries", r.data.status)}));
    refresh();
  }
  async function refresh() {
    const e = await call("GET", `${API}/webhooks`);
    if (!e.ok) {
      endpoints.replaceChildren(h("h2", {text: t("endpoints")}), h("p", {class: "muted", text: t("admins_only")}));
      return failure(e);
    }
    const found = [];
    let cursor = null;
    for (let p = 0; p < pages; p++) {
      const r = await call("GET", query(cursor));
      if (!r.ok) return failure(r);
      found.push(...r.data.deliveries);
      cursor = r.data.next_cursor;
      if (cursor === null) break;
    }
    const ids = e.data.endpoints.map((x) => x.id);
    endpoints.replaceChildren(h("h2", {text: t("endpoints")}), ids.length
      ? h("table", {},
        h("tr", {}, ...["endpoint", "url", "kind", "events", "deliveries", "status"].map((k) => h("th", {text: t(k)})), h("th")),
        ...e.data.endpoints.map(endpointRow))
      : h("p", {class: "muted", text: t("no_endpoints")}));
    byEndpoint.replaceChildren(h("option", {value: "", text: t("all_endpoints")}),
      ...(only && !ids.includes(only) ? [...ids, only] : ids).map((id) =>
        h("option", {value: id, selected: id === only, text: id})));
    list.replaceChildren(
      h("tr", {}, ...["delivery_id", "endpoint", "event", "status", "attempts", "last_error", "updated", "next_attempt"]
        .map((k) => h("th", {text: t(k)})), h("th")),
      ...found.map(deliveryRow));
    if (!found.length) list.append(h("tr", {}, h("td", {colspan: 9, class: "muted", id: "no-deliveries", text: t("no_deliveries")})));
    more.hidden = cursor === null;
  }
  more.addEventListener("click", () => { pages += 1; refresh(); });
  await refresh();
  return {refresh};
}

// --- sign-in and routing -------------------------------------------------------------
function signInForm() {  // (drawn again in a new language: what was typed stays)
  const typed = document.getElementById("token")?.value || "";
  const input = h("input", {type: "password", id: "token", autocomplete: "current-password", required: true});
  input.value = typed;
  const note = h("p", {class: "error", id: "sign-in-error"});
  const form = h("form", {class: "card sign-in", id: "sign-in"},
    h("h2", {text: t("sign_in")}), h("label", {}, t("token"), input),
    h("p", {class: "muted", text: t("sign_in_hint")}), h("button", {type: "submit", text: t("sign_in")}), note);
  form.addEventListener("submit", async (e) => {
    e.preventDefault();
    const r = await call("POST", "/dashboard/session", {token: input.value});
    if (!r.ok) { note.textContent = r.data.error ? r.data.error.message : String(r.status); return; }
    signedIn(r.data);
  });
  document.getElementById("main").replaceChildren(form);
  input.focus();
  const failed = new URLSearchParams(location.search).get("signin_error");  // (back from Slack or DingTalk)
  if (failed && ["denied", "state", "team", "slack", "dingtalk", "org"].includes(failed)) note.textContent = t(`signin_${failed}`);
  call("GET", "/dashboard/signins").then((r) => {  // a person's own sign-in, where one is set up
    if (!r.ok || form.querySelector("[data-signin]")) return;
    const offered = ["slack", "dingtalk"].filter((p) => r.data[p]);
    if (!offered.length) return;
    form.insertBefore(h("p", {class: "signins"}, ...offered.map((p) => h("a", {class: "button",
      href: `/dashboard/signin/${p}`, "data-signin": p, text: t(`sign_in_${p}`)}))), form.querySelector("label"));
  });
}

function signedOut() {
  me = null;
  view = null;
  if (socket) { const s = socket; socket = null; s.close(); }
  for (const id of ["nav", "me", "sign-out", "live"]) document.getElementById(id).hidden = true;
  signInForm();
}

async function signedIn(session) {
  me = session;
  document.getElementById("nav").hidden = false;
  document.getElementById("nav-webhooks").hidden = me.role !== "admin";  // (the API checks too)
  const who = document.getElementById("me");
  who.hidden = false;
  who.textContent = `${me.user} (${named("roles", me.role)})`;
  document.getElementById("sign-out").hidden = false;
  const q = await call("GET", `${API}/queue`);
  if (q.ok) seq = q.data.seq;
  connect();
  await route();
}

async function route() {
  if (!me) return;
  const [path, query] = (location.hash.slice(1) || "/").split("?");
  const params = new URLSearchParams(query || "");
  const main = document.getElementById("main");
  for (const a of document.querySelectorAll("#nav a")) {
    a.classList.toggle("here", a.getAttribute("href") === `#${path}`);
  }
  const batch = path.match(/^\/batches\/(\d+)$/);
  view = null;
  if (batch) view = await batchPage(main, batch[1], params);
  else if (path === "/jobs") view = await jobList(main, params);
  else if (path === "/gallery") view = await gallery(main, params);
  else if (path === "/submit") view = await submitForm(main);
  else if (path === "/webhooks") view = await webhooksPage(main, params);
  else view = await overview(main);
  document.body.dataset.view = path;
}

function translate() {  // the page's fixed words, and the languages offered in their own names
  document.documentElement.lang = lang;
  for (const el of document.querySelectorAll("[data-t]")) el.textContent = t(el.dataset.t);
  const choice = document.getElementById("lang");
  choice.replaceChildren(...vocabulary.languages.map((l) =>
    h("option", {value: l.code, lang: l.code, selected: l.code === lang, text: l.name})));
  choice.hidden = vocabulary.languages.length < 2;
}

window.addEventListener("hashchange", route);
document.addEventListener("DOMContentLoaded", async () => {
  await loadVocabulary();
  translate();
  document.getElementById("lang").addEventListener("change", async (e) => {
    lang = e.target.value;
    localStorage.setItem("genbot.lang", lang);
    await loadVocabulary();
    translate();
    if (me) route(); else signInForm();
  });
  document.getElementById("sign-out").addEventListener("click", async () => {
    await call("DELETE", "/dashboard/session");
    signedOut();
  });
  const r = await call("GET", "/dashboard/session");
  if (r.ok) signedIn(r.data); else signedOut();
});
