"use strict";
// The genbot dashboard: plain JS over /api/v1, served as is (no build step).
// Text from the server goes into the page through textContent only, never as HTML.
// The server decides what each person may do; buttons here only mirror its answer.

const API = "/api/v1";
const ROW = 34;        // px per row of the job list (fixed, so the list can be virtual)
const PAGE = 100;      // jobs fetched per page of the list
const REFRESH_MS = 400; // at most this often after queue events

const TEXT = {
  en: {
    overview: "Overview", jobs: "Jobs", submit: "Submit", sign_out: "Sign out",
    sign_in: "Sign in", token: "API token", sign_in_hint: "Use a token from [api] tokens in the service's config — on a fresh install with none, the admin token in data/local-admin.token on the service's machine.",
    live: "live", offline: "reconnecting…",
    queue: "Queue", running_state: "Running", paused_state: "Paused",
    paused_by: "paused by {by}", pause: "Pause", resume: "Resume", admins_only: "Admins only",
    eta: "Queue clears in about {t}", eta_unknown: "No estimate yet", now_running: "Running now",
    nothing_running: "Nothing is running.", recent: "Recent batches", no_batches: "No batches yet.",
    batch: "Batch {id}", template: "Template", submitter: "Submitter", priority: "Priority",
    created: "Created", progress: "Progress", row: "Row", status: "Status", job: "Job",
    enqueued: "Queued at", took: "Took", error: "Error", all: "All",
    n_jobs: "{n} jobs", loading: "loading…", cancel: "Cancel", cancel_batch: "Cancel batch",
    retry: "Retry failed", contact: "Contact sheet", results: "Results (.xlsx)",
    done_of: "{done} of {total} done", step: "step {step}/{total}",
    sheet: "Sheet (.xlsx, .xls, .ods, .csv)", pictures: "Pictures the sheet names (optional)",
    not_before: "Start at (optional, e.g. 22:00 or 2026-12-24 09:00)", skip_invalid: "Skip invalid rows",
    send: "Submit batch", sending: "Submitting…", params: "Columns this template reads",
    required: "required", optional: "optional", default: "default {v}",
    problems: "The sheet has problems; nothing was queued:", submitted: "Batch {id} queued: {n} jobs",
    canceled_n: "Canceled {n}", asked_n: "{n} running job(s) asked to stop",
    load_more: "Load more", refused: "Refused",
    demo_note: "Demo model ({models}) — images are noise; see README, Models, for real ones.",
    unplaced_note: "Waiting: no running executor can run {what} — {why}",
    queued: "queued", running: "running", succeeded: "succeeded", failed: "failed", canceled: "canceled",
    low: "low", normal: "normal", high: "high", urgent: "urgent",
    workers: "Executors", no_workers: "No executor is running: queued jobs wait until one starts.",
    idle: "idle", busy: "busy", lost: "lost", stopped: "stopped", seen: "seen {t} ago",
    takes: "takes", doing_loading: "loading {models}", doing_building_demo: "building demo models: {models}",
    doing_server_down: "server down: {models}",
    keep: "Keep", unkeep: "Unkeep", kept: "kept", rejected: "rejected",
    lineage: "Lineage",
    made_from: "{action} of #{id}", ancestors: "Made from", children: "Made from it", none: "none",
    batch_from: "{action} of job {job}, from", kept_only: "Kept only (with all made from this batch)",
    ab_won: "{variant}: kept in {won} rows where the other was not", ab_ties: "tie (both or neither kept): {ties}", ab_unrated: "not rated yet: {unrated} rows",
    picks: "Picks (.xlsx)", picks_contact: "Picks contact sheet", no_picks: "Nothing kept yet.",
    acted: "Batch {id} queued: {n} jobs",
    webhooks: "Webhooks", endpoints: "Endpoints", deliveries: "Deliveries", endpoint: "Endpoint",
    url: "URL", kind: "Kind", kind_config: "config", kind_callback: "callback URL", events: "Events",
    delivery_id: "Delivery", event: "Event", attempts: "Attempts", last_error: "Last error",
    updated: "Updated", next_attempt: "Next attempt", all_endpoints: "All endpoints",
    pending: "pending", sent: "sent", disabled: "disabled",
    send_test: "Send test", enable: "Enable", redeliver: "Redeliver", more: "More",
    no_endpoints: "No webhook endpoints yet: add [[webhooks]] to the config (docs/webhooks.md).",
    no_deliveries: "No deliveries.",
    test_taken: "{endpoint} took the test (HTTP {response})",
    test_not_taken: "{endpoint} did not take the test: {error}",
    redelivered: "Delivery {id} taken (HTTP {response})",
    not_redelivered: "Delivery {id} not taken: {error}",
    still_pending: "Delivery {id} is still pending: it is sent on its own",
    enabled: "{endpoint} is on again", was_enabled: "{endpoint} was on already",
  },
  zh: {
    overview: "概览", jobs: "任务", submit: "提交", sign_out: "退出",
    sign_in: "登录", token: "API 令牌", sign_in_hint: "使用服务配置 [api] tokens 中的令牌；新安装且未配置时，使用服务所在机器上 data/local-admin.token 中的管理员令牌。",
    live: "实时", offline: "重新连接中…",
    queue: "队列", running_state: "运行中", paused_state: "已暂停",
    paused_by: "由 {by} 暂停", pause: "暂停", resume: "恢复", admins_only: "仅管理员",
    eta: "预计约 {t} 后清空", eta_unknown: "暂无预计时间", now_running: "正在运行",
    nothing_running: "当前没有运行的任务。", recent: "最近的批次", no_batches: "还没有批次。",
    batch: "批次 {id}", template: "模板", submitter: "提交人", priority: "优先级",
    created: "创建时间", progress: "进度", row: "行", status: "状态", job: "任务",
    enqueued: "入队时间", took: "耗时", error: "错误", all: "全部",
    n_jobs: "{n} 个任务", loading: "加载中…", cancel: "取消", cancel_batch: "取消批次",
    retry: "重试失败项", contact: "缩略图总览", results: "结果表 (.xlsx)",
    done_of: "已完成 {done}/{total}", step: "第 {step}/{total} 步",
    sheet: "表格 (.xlsx, .xls, .ods, .csv)", pictures: "表格引用的图片（可选）",
    not_before: "开始时间（可选，如 22:00 或 2026-12-24 09:00）", skip_invalid: "跳过无效行",
    send: "提交批次", sending: "提交中…", params: "此模板读取的列",
    required: "必填", optional: "可选", default: "默认 {v}",
    problems: "表格有问题，未加入队列：", submitted: "批次 {id} 已入队：{n} 个任务",
    canceled_n: "已取消 {n} 个", asked_n: "已要求 {n} 个运行中的任务停止",
    load_more: "加载更多", refused: "被拒绝",
    demo_note: "演示模型 {models}——生成的图是噪点；真实模型见 README 的 Models 一节。",
    unplaced_note: "等待中：没有正在运行的执行器能运行 {what}——{why}",
    queued: "排队中", running: "运行中", succeeded: "成功", failed: "失败", canceled: "已取消",
    low: "低", normal: "普通", high: "高", urgent: "紧急",
    workers: "执行器", no_workers: "没有运行中的执行器：排队任务将等待执行器启动。",
    idle: "空闲", busy: "忙碌", lost: "失联", stopped: "已停止", seen: "{t} 前有心跳",
    takes: "接收", doing_loading: "正在加载 {models}", doing_building_demo: "正在生成演示模型：{models}",
    doing_server_down: "服务器无法连接：{models}",
    keep: "保留", unkeep: "取消保留", kept: "已保留", rejected: "已淘汰",
    lineage: "来历",
    made_from: "#{id} 的{action}", ancestors: "来自", children: "由它生成", none: "无",
    batch_from: "任务 {job} 的{action}，来自", kept_only: "只看保留的（含由此批次生成的）",
    ab_won: "{variant}：{won} 行中被保留而另一版本未被保留", ab_ties: "平局（都保留或都未保留）：{ties}", ab_unrated: "尚未评价：{unrated} 行",
    picks: "精选 (.xlsx)", picks_contact: "精选缩略图", no_picks: "还没有保留的图片。",
    acted: "批次 {id} 已入队：{n} 个任务",
    webhooks: "Webhook", endpoints: "端点", deliveries: "投递记录", endpoint: "端点",
    url: "地址", kind: "类型", kind_config: "配置", kind_callback: "回调地址", events: "事件",
    delivery_id: "投递", event: "事件", attempts: "尝试次数", last_error: "最近的错误",
    updated: "更新时间", next_attempt: "下次尝试", all_endpoints: "全部端点",
    pending: "待发送", sent: "已送达", disabled: "已停用",
    send_test: "发送测试", enable: "启用", redeliver: "重新投递", more: "更多",
    no_endpoints: "还没有 Webhook 端点：在配置中添加 [[webhooks]]（见 docs/webhooks.md）。",
    no_deliveries: "没有投递记录。",
    test_taken: "{endpoint} 已接收测试（HTTP {response}）",
    test_not_taken: "{endpoint} 未接收测试：{error}",
    redelivered: "投递 {id} 已被接收（HTTP {response}）",
    not_redelivered: "投递 {id} 未被接收：{error}",
    still_pending: "投递 {id} 仍在待发送中：它会自动发送",
    enabled: "{endpoint} 已重新启用", was_enabled: "{endpoint} 本来就是启用的",
  },
};
const STATUSES = ["queued", "running", "succeeded", "failed", "canceled"];
const PRIORITIES = ["urgent", "high", "normal", "low"];
const DELIVERY_STATES = ["pending", "sent", "failed"];
const DELIVERY_PAGE = 50; // webhook deliveries fetched per page

let lang = localStorage.getItem("genbot.lang") ||
  (navigator.language.toLowerCase().startsWith("zh") ? "zh" : "en");
let me = null;                 // {user, role, csrf, may} once signed in
let vocabulary = {actions: []}; // GET /vocabulary: the image actions and their words
let seq = 0;                   // the last event seen, to resume the stream from
let socket = null;
let view = null;               // the view on screen: {refresh()}
let refreshTimer = null;
const steps = new Map();       // job id -> {node, step, total}, from progress events

// --- small helpers -------------------------------------------------------------------
function rowName(j) {  // "BTL-001 · Row 2": the row as its sheet names it (the key column)
  return j.key ? `${j.key} · ${t("row")} ${j.row}` : `${t("row")} ${j.row}`;
}

function verb(action) {  // an image action's word, from the server's table
  const found = vocabulary.actions.find((a) => a.name === action);
  return found ? (found.verb[lang] || found.verb.en) : action;
}

function oneClick(action) {  // offered as a button here: needs nothing typed (no values)
  const found = vocabulary.actions.find((a) => a.name === action);
  return Boolean(found && found.button && !found.takes.includes("values"));
}

function t(key, vars = {}) {
  const text = (TEXT[lang] && TEXT[lang][key]) || TEXT.en[key] || key;
  return text.replace(/\{(\w+)\}/g, (_, k) => String(vars[k] ?? ""));
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

function failure(r) {
  toast(`${r.status === 403 ? t("refused") + ": " : ""}${r.data.error ? r.data.error.message : r.status}`);
}

function when(seconds) {
  return seconds ? new Date(seconds * 1000).toLocaleString(lang === "zh" ? "zh-CN" : "en-GB") : "";
}

function at(iso) {  // an ISO 8601 time from the API, as when() shows epoch seconds
  return iso ? new Date(iso).toLocaleString(lang === "zh" ? "zh-CN" : "en-GB") : "";
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

function badge(status) {
  return h("span", {class: `badge ${status}`, "data-status": status, text: t(status)});
}

function mayTouch(command, owner) {
  return me.may.includes(command) && (me.role === "admin" || owner === me.user);
}

function randomKey() {
  const bytes = crypto.getRandomValues(new Uint8Array(16));
  return Array.from(bytes, (b) => b.toString(16).padStart(2, "0")).join("");
}

function progressBar(jobId) {
  const s = steps.get(jobId);
  return h("div", {class: "step", "data-progress": jobId},
    h("progress", {max: s ? s.total : 1, value: s ? s.step : 0}),
    h("span", {class: "muted", text: s ? `${t("step", s)} ${s.node || ""}` : ""}));
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
  const ws = new WebSocket(`${scheme}://${location.host}${API}/events?after=${seq}`);
  socket = ws;
  ws.onopen = () => setLive(true);
  ws.onmessage = (m) => {
    const event = JSON.parse(m.data);
    seq = Math.max(seq, event.seq);
    if (event.kind === "progress") {
      steps.set(event.job_id, event.data);
      paintProgress(event.job_id);
      return;
    }
    if (event.job_id && event.kind !== "running") steps.delete(event.job_id);
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
    const [q, b] = await Promise.all([call("GET", `${API}/queue`), call("GET", `${API}/batches?limit=15`)]);
    if (!q.ok || !b.ok) return failure(q.ok ? b : q);
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
    const totals = Object.fromEntries(STATUSES.map((s) => [s,
      Object.values(q.data.counts[s] || {}).reduce((a, n) => a + n, 0)]));
    box.replaceChildren(
      h("section", {class: "card state"},
        h("h2", {text: t("queue")}),
        h("p", {}, h("strong", {id: "queue-state", "data-paused": String(paused),
          text: paused ? t("paused_state") : t("running_state")}),
          paused && q.data.changed_by ? h("span", {class: "muted", text: ` · ${t("paused_by", {by: q.data.changed_by})}`}) : null),
        button,
        h("p", {class: "muted", id: "eta", text: q.data.queued ? (q.data.eta_seconds ? t("eta", {t: span(q.data.eta_seconds)}) : t("eta_unknown")) : ""})),
      h("section", {class: "card counts"},
        ...STATUSES.map((s) => h("a", {class: "count", href: `#/jobs?status=${s}`, "data-count": s},
          h("b", {text: String(totals[s])}), badge(s)))),
      h("section", {class: "card"},
        h("h2", {text: t("now_running")}),
        q.data.jobs.length ? h("ul", {class: "running"}, ...q.data.jobs.map((j) => h("li", {"data-job": j.id},
          h("a", {href: `#/batches/${j.batch}`, text: `${t("batch", {id: j.batch})} · ${rowName(j)}`}),
          h("span", {class: "muted", text: ` ${j.template} · ${j.submitter}`}), progressBar(j.id))))
          : h("p", {class: "muted", text: t("nothing_running")})),
      h("section", {class: "card workers"},
        h("h2", {text: t("workers")}),
        q.data.workers.some((w) => w.state === "idle" || w.state === "busy") ? null
          : h("p", {class: "error", id: "no-workers", text: t("no_workers")}),
        q.data.workers.length ? h("table", {}, ...q.data.workers.map((w) => h("tr", {"data-worker": w.id},
          h("td", {}, h("strong", {text: w.id})), h("td", {class: "muted", text: `${w.device} · v${w.version}`}),
          h("td", {}, badge(w.state), w.job ? h("span", {text: ` #${w.job}`}) : null,
            w.doing ? h("span", {class: w.doing.what === "server_down" ? "error doing" : "muted doing", text: ` · ${t("doing_" + w.doing.what, {models: w.doing.models.join(", ")})}`}) : null),
          h("td", {class: "muted", text: w.memory_used ? bytes(w.memory_used) + (w.memory_total ? ` / ${bytes(w.memory_total)}` : "") : ""}),
          h("td", {class: "muted", text: w.models.join(", ") +
            (w.allow ? ` · ${t("takes")} ${w.allow.join(", ") || "-"}` : "")}),
          h("td", {class: "muted", text: t("seen", {t: span(Date.now() / 1000 - w.seen_at)})})))) : null),
      h("section", {class: "card"},
        h("h2", {text: t("recent")}),
        b.data.batches.length ? batchTable(b.data.batches) : h("p", {class: "muted", text: t("no_batches")})));
  }
  await refresh();
  return {refresh};
}

function batchTable(batches) {
  return h("table", {class: "batches"},
    h("tr", {}, ...["batch", "template", "submitter", "progress", "created"].map((k) => h("th", {text: t(k, {id: ""})}))),
    ...batches.map((b) => {
      const done = ["succeeded", "failed", "canceled"].reduce((a, s) => a + (b.counts[s] || 0), 0);
      return h("tr", {"data-batch": b.id},
        h("td", {}, h("a", {href: `#/batches/${b.id}`, text: `#${b.id}`})),
        h("td", {text: b.template}), h("td", {text: b.submitter}),
        h("td", {}, h("progress", {max: b.total, value: done}),
          h("span", {class: "muted", text: ` ${done}/${b.total}`}),
          ...STATUSES.filter((s) => b.counts[s] && s !== "succeeded").map((s) => badge(s))),
        h("td", {class: "muted", text: when(b.created_at)}));
    }));
}

async function jobList(main, params) {
  // A virtual list: the scroller is as tall as every row, but only the rows in view exist,
  // fetched a page at a time by offset; 20,000 jobs cost what 40 rows do.
  const status = params.get("status") || "";
  const filter = h("select", {id: "status-filter", onchange: () => {
    location.hash = filter.value ? `#/jobs?status=${filter.value}` : "#/jobs";
  }}, h("option", {value: "", text: t("all")}),
  ...STATUSES.map((s) => h("option", {value: s, selected: s === status, text: t(s)})));
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
    count.textContent = t("n_jobs", {n: total.toLocaleString()});
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

function jobRow(j) {
  const active = j.status === "queued" || j.status === "running";
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

async function batchPage(main, id, params) {
  const keptOnly = params.get("kept") === "1";  // the picks: kept images of it and all made from it
  const head = h("div", {class: "card batch-head"});
  const grid = h("div", {class: "grid", id: "thumbs"});
  const more = h("button", {class: "link", hidden: true, text: t("load_more")});
  main.replaceChildren(head, grid, more);
  const cards = new Map();   // job id -> [state, card]: a card is rebuilt only when it changes
  let shown = 0;             // rows 1..shown are on the page

  function card(j) {
    const state = `${j.status} ${j.rating}`;
    const known = cards.get(j.id);
    if (known && known[0] === state && j.status !== "running") return known[1];
    const lineage = h("div", {class: "lineage"});
    const made = h("figure", {class: `thumb ${j.status}`, "data-job": j.id, "data-rating": j.rating || ""},
      j.outputs.length
        ? h("a", {href: j.outputs[0], target: "_blank"}, h("img", {src: `${j.outputs[0]}?size=256`, loading: "lazy", alt: rowName(j)}))
        : h("div", {class: "empty"}, badge(j.status)),
      h("figcaption", {}, `${rowName(j)} `, badge(j.status), j.rating ? badge(j.rating) : null),
      j.status === "running" ? progressBar(j.id) : null,
      j.error ? h("p", {class: "error", title: j.error, text: j.error}) : null,
      imageActions(j, lineage), lineage);
    cards.set(j.id, [state, made]);
    return made;
  }
  function imageActions(j, lineage) {
    const finished = j.status === "succeeded" && j.outputs.length;
    const keep = j.rating === "kept";
    return h("div", {class: "image-actions"},
      finished && me.may.includes("keep") ? h("button", {class: `small${keep ? " on" : ""}`, "data-keep": j.id,
        onclick: () => rate(j, keep ? null : "keep")}, t(keep ? "unkeep" : "keep")) : null,
      ...(finished ? j.actions : []).filter((a) => oneClick(a) && mayTouch(a, j.submitter)).map((a) =>
        h("button", {class: "small", "data-act": a, onclick: (e) => act(j, a, e.currentTarget)}, verb(a))),
      j.parent_job_id || finished ? h("button", {class: "link small", "data-lineage": j.id,
        text: j.parent_job_id ? t("made_from", {action: verb(j.action), id: j.parent_job_id}) : t("lineage"),
        onclick: () => showLineage(j, lineage)}) : null);
  }
  async function rate(j, rating) {
    const r = await call("PUT", `${API}/jobs/${j.id}/rating`, {rating});
    if (!r.ok) return failure(r);
    refresh();
  }
  async function act(j, action, button) {
    button.disabled = true;  // (and a second click within seconds gets the same batch anyway)
    const r = await call("POST", `${API}/jobs/${j.id}/actions`, {action});
    button.disabled = false;
    if (!r.ok) return failure(r);
    toast(t("acted", {id: r.data.batch, n: r.data.jobs.length}), "ok");
    location.hash = `#/batches/${r.data.batch}`;
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
    grid.replaceChildren(...jobs.reverse().map(card));  // unchanged cards move, not reload
    more.hidden = shown >= total;
  }
  async function refresh() {
    const r = await call("GET", `${API}/batches/${id}`);
    if (!r.ok) return failure(r);
    const b = r.data;
    const active = (b.counts.queued || 0) + (b.counts.running || 0);
    head.replaceChildren(...[  // (null leaves a part out; replaceChildren would write "null")
      h("h2", {text: t("batch", {id})}),
      h("p", {}, h("strong", {text: b.template + (b.meta.version ? `@${b.meta.version}` : "")}), h("span", {class: "muted", text: ` · ${b.submitter} · ${t(b.priority)} · ${when(b.created_at)}${b.meta.sheet ? " · " + b.meta.sheet : ""}${b.meta.compare ? " · A/B: " + b.meta.compare.join(" / ") : ""}`})),
      b.demo_models.length ? h("p", {class: "note", id: "demo-note", text: t("demo_note", {models: b.demo_models.join(", ")})}) : null,
      ...b.unplaced.map((u) => h("p", {class: "note unplaced", text: t("unplaced_note", {what: u.what, why: u.why.join("; ")})})),
      h("p", {}, h("progress", {id: "batch-progress", max: b.total, value: b.done}),
        h("span", {id: "batch-done", text: ` ${t("done_of", b)}`}),
        ...STATUSES.filter((s) => b.counts[s]).map((s) => h("span", {class: "pair"}, badge(s), ` ${b.counts[s]}`)),
        active && b.eta_seconds ? h("span", {class: "muted", text: ` · ${t("eta", {t: span(b.eta_seconds)})}`}) : null),
      b.meta.parent_job ? h("p", {class: "muted", id: "made-from"},
        `${t("batch_from", {action: verb(b.meta.action), job: b.meta.parent_job})} `,
        h("a", {href: `#/batches/${b.meta.parent_batch}`, text: t("batch", {id: b.meta.parent_batch})})) : null,
      h("p", {class: "actions"},
        active && mayTouch("cancel", b.submitter) ? h("button", {id: "cancel-batch", onclick: () => cancel(`${API}/batches/${id}/cancel`)}, t("cancel_batch")) : null,
        b.counts.failed && !active && mayTouch("retry", b.submitter) ? h("button", {id: "retry-batch", onclick: retry}, t("retry")) : null,
        b.done >= b.total ? h("a", {href: b.files.contact, target: "_blank", text: t("contact")}) : null,
        b.done >= b.total ? h("a", {href: b.files.results, text: t("results")}) : null,
        h("label", {}, h("input", {type: "checkbox", id: "kept-only", checked: keptOnly,
          onchange: (e) => { location.hash = `#/batches/${id}${e.target.checked ? "?kept=1" : ""}`; }}),
          ` ${t("kept_only")}`),
        keptOnly ? h("span", {id: "pick-files"}) : null),
      b.meta.compare ? h("ul", {id: "ab-tally", class: "muted"}) : null].filter((part) => part));
    if (b.meta.compare) await tally();
    if (!keptOnly) return loadRows(b.total);
    const picks = await loadPicks();
    if (picks && picks.jobs.length) {
      document.getElementById("pick-files").replaceChildren(
        h("a", {href: picks.files.contact, target: "_blank", text: t("picks_contact")}), " ",
        h("a", {href: picks.files.results, text: t("picks")}));
    }
  }
  async function tally() {  // an A/B batch: the rows each version won by keeps (/ab)
    const r = await call("GET", `${API}/batches/${id}/ab`);
    if (!r.ok) return;
    const a = r.data;
    document.getElementById("ab-tally").replaceChildren(
      ...a.variants.map((v) => h("li", {text: t("ab_won", {variant: v, won: a.won[v] || 0})})),
      h("li", {text: t("ab_ties", a)}), a.unrated ? h("li", {text: t("ab_unrated", a)}) : "");
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
  const r = await call("GET", `${API}/templates`);
  if (!r.ok) { failure(r); return {refresh() {}}; }
  const templates = r.data.templates;
  let key = randomKey();  // one key per filled-in form: a double click queues one batch
  const choice = h("select", {name: "template", id: "template", required: true},
    ...templates.map((tp) => h("option", {value: tp.name, text: `${tp.name} — ${tp.description || ""}`})));
  const help = h("div", {class: "params"});
  const showParams = () => {
    const tp = templates.find((x) => x.name === choice.value);
    help.replaceChildren(h("h3", {text: t("params")}), h("table", {},
      ...(tp ? tp.params : []).map((p) => h("tr", {},
        h("td", {}, h("code", {text: p.name})),
        h("td", {class: "muted", text: p.type}),
        h("td", {text: p.required ? t("required") : (p.default !== null ? t("default", {v: JSON.stringify(p.default)}) : t("optional"))}),
        h("td", {class: "muted", text: [p.help, p.allowed].filter(Boolean).join(" · ")})))));
  };
  choice.addEventListener("change", showParams);
  const sheet = h("input", {type: "file", name: "sheet", id: "sheet", required: true, accept: ".xlsx,.xlsm,.xls,.ods,.csv"});
  const pictures = h("input", {type: "file", name: "pictures", id: "pictures", multiple: true, accept: "image/*"});
  const priority = h("select", {name: "priority", id: "priority"},
    ...PRIORITIES.map((p) => h("option", {value: p, selected: p === "normal", text: t(p)})));
  const notBefore = h("input", {type: "text", name: "not_before", id: "not_before", autocomplete: "off"});
  const skip = h("input", {type: "checkbox", name: "skip_invalid", id: "skip_invalid"});
  const send = h("button", {type: "submit", id: "send", text: t("send")});
  const report = h("div", {id: "report"});
  const form = h("form", {class: "card submit", id: "submit-form"},
    h("label", {}, t("template"), choice), help,
    h("label", {}, t("sheet"), sheet),
    h("label", {}, t("pictures"), pictures),
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
    body.append("sheet", sheet.files[0], sheet.files[0].name);
    for (const f of pictures.files) body.append("picture", f, f.name);
    send.disabled = true;
    send.textContent = t("sending");
    const res = await submitWith(body, key);
    send.disabled = false;
    send.textContent = t("send");
    if (res.ok) {
      key = randomKey();
      toast(t("submitted", {id: res.data.id, n: res.data.total}), "ok");
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
  const byStatus = h("select", {id: "delivery-status", onchange: filtered},
    h("option", {value: "", text: t("all")}),
    ...DELIVERY_STATES.map((s) => h("option", {value: s, selected: s === status, text: t(s)})));
  const byEndpoint = h("select", {id: "delivery-endpoint", onchange: filtered});
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
      h("td", {class: "nowrap"}, ...DELIVERY_STATES.map((s) => h("span", {class: "pair", "data-count": s},
        badge(s), ` ${e.deliveries[s] || 0}`))),
      h("td", {}, e.disabled ? [badge("disabled"), h("div", {class: "error reason", text: e.disabled})] : null),
      h("td", {class: "nowrap"},
        h("button", {class: "small", "data-test": e.id, onclick: (ev) => test(e.id, ev.currentTarget)}, t("send_test")),
        e.disabled ? h("button", {class: "small", "data-enable": e.id,
          onclick: (ev) => enable(e.id, ev.currentTarget)}, t("enable")) : null));
  }
  function deliveryRow(d) {
    return h("tr", {"data-delivery": d.id, "data-status": d.status},
      h("td", {text: `#${d.id}`}), h("td", {text: d.endpoint}), h("td", {}, h("code", {text: d.type})),
      h("td", {class: "nowrap"}, badge(d.status), d.response ? h("span", {class: "muted", text: ` ${d.response}`}) : null),
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
    else toast(t("test_not_taken", {endpoint: id, error: r.data.last_error || t(r.data.status)}));
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
    else toast(t("not_redelivered", {id, error: r.data.last_error || t(r.data.status)}));
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
function signInForm() {
  const input = h("input", {type: "password", id: "token", autocomplete: "current-password", required: true});
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
  who.textContent = `${me.user} (${me.role})`;
  document.getElementById("sign-out").hidden = false;
  const [q, v] = await Promise.all([call("GET", `${API}/queue`), call("GET", `${API}/vocabulary`)]);
  if (q.ok) seq = q.data.seq;
  if (v.ok) vocabulary = v.data;
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
  else if (path === "/submit") view = await submitForm(main);
  else if (path === "/webhooks") view = await webhooksPage(main, params);
  else view = await overview(main);
  document.body.dataset.view = path;
}

function translate() {
  document.documentElement.lang = lang === "zh" ? "zh-CN" : "en";
  for (const el of document.querySelectorAll("[data-t]")) el.textContent = t(el.dataset.t);
  document.getElementById("lang").textContent = lang === "zh" ? "English" : "中文";
}

window.addEventListener("hashchange", route);
document.addEventListener("DOMContentLoaded", async () => {
  translate();
  document.getElementById("lang").addEventListener("click", () => {
    lang = lang === "zh" ? "en" : "zh";
    localStorage.setItem("genbot.lang", lang);
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
