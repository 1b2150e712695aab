// Odradek web console (issue 29; docs/console.md). Plain modern JavaScript, no build step, no dependency.
//
// Invariants:
// - every figure comes from the broker's JSON API on this origin (the routes docs/console.md lists per page), so
//   a user sees and changes exactly what the API lets them; a 401 shows the sign-in form (a bearer token from
//   POST /auth/token, kept for this tab only), a 403 the API's own message;
// - nothing received is ever parsed as HTML: the DOM is built with createElement and text nodes (h() below), and
//   the page's Content-Security-Policy allows no inline script;
// - a page polls its routes at a bounded rate (POLL_MS), one refresh at a time, not while the tab is hidden,
//   and stops when another page is opened; forms live outside the refreshed part, so polling never eats input;
// - an error is shown where it happened; one the page did not expect (not an API answer of 401, 403 or 404) is
//   also logged with console.error (report()), so a drawing bug never hides in the status bar.

const POLL_MS = { overview: 2000, reassignments: 3000, default: 5000 };
const HISTORY = 60; // chart points kept
const BINARY = "application/vnd.kafka.binary.v2+json";
const SCHEMA_ACCEPT = { AVRO: "application/vnd.kafka.avro.v2+json", JSON: "application/vnd.kafka.jsonschema.v2+json",
  PROTOBUF: "application/vnd.kafka.protobuf.v2+json" };
const REGISTRY = "application/vnd.schemaregistry.v1+json, application/json";
const TOKEN_KEY = "odradek.console.token";

const main = document.getElementById("main");
// The API's answers a page expects and shows in place (the sign-in form, a refusal, a topic gone): not logged.
const EXPECTED_STATUS = new Set([401, 403, 404]);
const statusEl = document.getElementById("status");

// ------------------------------------------------------------------------------------------------- API

class ApiError extends Error {
  constructor(status, body, path) {
    const message = body && typeof body === "object" ? (body.message || body.error || JSON.stringify(body)) : String(body || "");
    super(`${status}${body && body.error ? " " + body.error : ""}: ${message}`);
    this.status = status;
    this.body = body;
    this.path = path;
    this.code = body && typeof body === "object" ? body.error || body.error_code : undefined;
  }
}

async function api(path, { method = "GET", body, accept = "application/json" } = {}) {
  const headers = { Accept: accept };
  const token = sessionStorage.getItem(TOKEN_KEY);
  if (token) headers.Authorization = `Bearer ${token}`;
  if (body !== undefined) headers["Content-Type"] = "application/json";
  const resp = await fetch(path, { method, headers, body: body === undefined ? undefined : JSON.stringify(body),
    credentials: "same-origin", cache: "no-store" });
  const text = await resp.text();
  let data = null;
  if (text) {
    try { data = JSON.parse(text); } catch { data = text; }
  }
  if (!resp.ok) {
    const err = new ApiError(resp.status, data, path);
    if (resp.status === 401) showLogin(err);
    throw err;
  }
  return data;
}

// Shown in place (an error box or the status bar) and, unless it is an answer the page expects (an ApiError with
// an EXPECTED_STATUS, or an error marked ``expected``: a bad input, a topic the metadata does not list), also
// logged with console.error, so that a drawing bug is never only a line in the status bar (the browser tests
// fail on any error in the browser's log).
function report(e) {
  const expected = (e instanceof ApiError && EXPECTED_STATUS.has(e.status)) || (e && e.expected === true);
  if (!expected) console.error("odradek console:", e);
  return e;
}
const expectedError = (text) => Object.assign(new Error(text), { expected: true });

const enc = encodeURIComponent;
let clusterId = null;
async function cluster() {
  if (clusterId === null) clusterId = (await api("/v3/clusters")).data[0].cluster_id;
  return `/v3/clusters/${enc(clusterId)}`;
}

// ------------------------------------------------------------------------------------------------- DOM helpers

function h(tag, attrs, ...children) {
  const el = document.createElement(tag);
  for (const [k, v] of Object.entries(attrs || {})) {
    if (v === null || v === undefined || v === false) continue;
    if (k.startsWith("on") && typeof v === "function") el.addEventListener(k.slice(2), v);
    else if (k === "class") el.className = v;
    else if (k === "dataset") Object.assign(el.dataset, v);
    else if (k === "value") el.value = v;
    else el.setAttribute(k, v === true ? "" : String(v));
  }
  append(el, children);
  return el;
}

function append(el, children) {
  for (const c of children.flat(Infinity)) {
    if (c === null || c === undefined || c === false) continue;
    el.append(c instanceof Node ? c : String(c));
  }
  return el;
}

function svg(tag, attrs, ...children) {
  const el = document.createElementNS("http://www.w3.org/2000/svg", tag);
  for (const [k, v] of Object.entries(attrs || {})) el.setAttribute(k, String(v));
  for (const c of children) el.append(c);
  return el;
}

function replace(el, ...children) {
  el.replaceChildren();
  return append(el, children);
}

function table(headers, rows, attrs = {}) {
  return h("table", attrs,
    h("thead", null, h("tr", null, headers.map((x) => {
      const [label, cls] = Array.isArray(x) ? x : [x, null];
      return h("th", { class: cls }, label);
    }))),
    h("tbody", null, rows.length ? rows : h("tr", null, h("td", { colspan: headers.length, class: "muted" }, "none"))));
}

function row(cells, attrs = {}) {
  return h("tr", attrs, cells.map((c) => (c instanceof Node && c.tagName === "TD" ? c : h("td", null, c))));
}

const num = (v) => h("td", { class: "num" }, v === null || v === undefined ? "–" : typeof v === "number" ? v.toLocaleString("en-US") : v);
const badge = (text, kind) => h("span", { class: `badge ${kind}` }, text);
const errorBox = (e) => h("div", { class: "error" }, e instanceof Error ? e.message : String(e));
const message = (text) => h("div", { class: "message" }, text);
const list = (items) => items.length ? items.join(", ") : "–";

function bytes(n) {
  if (n === null || n === undefined) return "–";
  const units = ["B", "KiB", "MiB", "GiB", "TiB"];
  let i = 0;
  while (n >= 1024 && i < units.length - 1) { n /= 1024; i += 1; }
  return `${i ? n.toFixed(1) : n} ${units[i]}`;
}

function isoTime(ms) {
  return ms === null || ms === undefined || ms < 0 ? "–" : new Date(ms).toISOString().replace("T", " ").replace("Z", " UTC");
}

function duration(s) {
  if (!Number.isFinite(s)) return "–";
  if (s < 90) return `${Math.round(s)} s`;
  if (s < 5400) return `${Math.round(s / 60)} min`;
  return `${(s / 3600).toFixed(1)} h`;
}

// A small line chart: series = [{name, points: [[t, v], ...]}]; the latest value of each is in the title.
function chart(title, series, unit) {
  const W = 320, H = 70;
  const all = series.flatMap((s) => s.points);
  const t0 = Math.min(...all.map((p) => p[0])), t1 = Math.max(...all.map((p) => p[0]));
  const max = Math.max(1, ...all.map((p) => p[1]));
  const el = svg("svg", { viewBox: `0 0 ${W} ${H}`, preserveAspectRatio: "none", role: "img" },
    svg("line", { class: "axis", x1: 0, y1: H - 1, x2: W, y2: H - 1 }));
  series.forEach((s, i) => {
    if (s.points.length < 2) return;
    const pts = s.points.map(([t, v]) => `${((t - t0) / Math.max(1, t1 - t0)) * W},${H - 2 - (v / max) * (H - 6)}`);
    el.append(svg("polyline", { class: `s${i}`, points: pts.join(" ") }));
  });
  const latest = series.map((s, i) => h("span", { class: `s${i}`, dataset: { series: s.name, points: JSON.stringify(s.points) } },
    `${s.name} ${s.points.length ? fmtRate(s.points[s.points.length - 1][1]) : "–"}${unit}`));
  return h("div", { class: "chart", dataset: { chart: title } },
    h("div", { class: "title" }, h("b", null, title), h("span", null, `max ${fmtRate(max)}${unit}`)),
    el, h("div", { class: "legend" }, latest.flatMap((x, i) => (i ? [" · ", x] : [x]))));
}

const fmtRate = (v) => (v >= 100 ? Math.round(v).toLocaleString("en-US") : v.toFixed(v >= 10 ? 1 : 2));

// ------------------------------------------------------------------------------------------------- confirmation

const dialog = document.getElementById("confirm");

// Resolves true when the user confirms; with ``typed``, only once they have typed that text.
function confirmAction(title, body, { typed = null, ok = "Confirm" } = {}) {
  return new Promise((resolve) => {
    document.getElementById("confirm-title").textContent = title;
    replace(document.getElementById("confirm-body"), body);
    const label = document.getElementById("confirm-typed-label");
    const input = document.getElementById("confirm-typed");
    const okButton = document.getElementById("confirm-ok");
    okButton.textContent = ok;
    label.hidden = typed === null;
    input.value = "";
    document.getElementById("confirm-expected").textContent = typed || "";
    const check = () => { okButton.disabled = typed !== null && input.value !== typed; };
    check();
    const done = (answer) => {
      input.removeEventListener("input", check);
      document.getElementById("confirm-form").onsubmit = null;
      document.getElementById("confirm-cancel").onclick = null;
      dialog.onclose = null;
      if (dialog.open) dialog.close();
      resolve(answer);
    };
    input.addEventListener("input", check);
    document.getElementById("confirm-form").onsubmit = (ev) => {
      ev.preventDefault();
      if (!okButton.disabled) done(true);
    };
    document.getElementById("confirm-cancel").onclick = () => done(false);
    dialog.onclose = () => done(false);
    dialog.showModal();
    (typed !== null ? input : okButton).focus();
  });
}

// ------------------------------------------------------------------------------------------------- sign-in

let loginShown = false;
function showLogin(err) {
  if (loginShown) return;
  loginShown = true;
  stopPage();
  const user = h("input", { id: "login-user", autocomplete: "username" });
  const pass = h("input", { id: "login-password", type: "password", autocomplete: "current-password" });
  const out = h("div");
  const form = h("form", { class: "panel" },
    h("p", { class: "note" }, "This broker asks who you are (", err.message, "). Sign in as a SCRAM user: the console " +
      "takes a bearer token from POST /auth/token and keeps it for this tab only. A client certificate, if your " +
      "browser has one, is used without signing in."),
    h("label", null, "User", user), h("label", null, "Password", pass),
    h("button", { class: "primary", type: "submit" }, "Sign in"), out);
  form.addEventListener("submit", async (ev) => {
    ev.preventDefault();
    try {
      const resp = await fetch("/auth/token", { method: "POST", credentials: "same-origin",
        headers: { Authorization: `Basic ${btoa(`${user.value}:${pass.value}`)}`, Accept: "application/json" } });
      const body = await resp.json();
      if (!resp.ok) throw new ApiError(resp.status, body, "/auth/token");
      sessionStorage.setItem(TOKEN_KEY, body.access_token);
      loginShown = false;
      route();
    } catch (e) {
      replace(out, errorBox(report(e)));
    }
  });
  replace(main, h("div", { class: "login" }, h("h1", null, "Sign in"), form));
}

document.getElementById("signout").addEventListener("click", () => {
  sessionStorage.removeItem(TOKEN_KEY);
  location.reload();
});

// ------------------------------------------------------------------------------------------------- page loop

let current = null; // {name, page, generation}
let generation = 0;

function stopPage() {
  generation += 1;
  if (current && current.timer) clearTimeout(current.timer);
  current = null;
}

function setStatus(ok, text) {
  statusEl.textContent = text;
  statusEl.classList.toggle("bad", !ok);
}

async function runPage(name, page) {
  const mine = ++generation;
  current = { name, page, timer: null };
  main.dataset.page = name;
  main.dataset.refreshes = "0";
  delete main.dataset.ready;
  const tick = async () => {
    if (mine !== generation) return;
    if (!document.hidden) {
      try {
        await page.refresh();
        if (mine !== generation) return;
        setStatus(true, `live · ${new Date().toLocaleTimeString()}`);
        page.errorSlot && page.errorSlot.replaceChildren();
      } catch (e) {
        if (mine !== generation) return;
        report(e);
        setStatus(false, `refresh failed: ${e.message}`);
        if (page.errorSlot) replace(page.errorSlot, errorBox(e));
      }
      main.dataset.refreshes = String(Number(main.dataset.refreshes) + 1);
      main.dataset.ready = "1";
    }
    if (mine === generation) current.timer = setTimeout(tick, POLL_MS[name] || POLL_MS.default);
  };
  await tick();
}

const ROUTES = [
  [/^#?\/?$/, "overview", () => overviewPage()],
  [/^#\/topics$/, "topics", () => topicsPage()],
  [/^#\/topics\/([^/]+)$/, "topic", (m) => topicPage(decodeURIComponent(m[1]))],
  [/^#\/topics\/([^/]+)\/partitions\/(\d+)$/, "browser", (m) => browserPage(decodeURIComponent(m[1]), Number(m[2]))],
  [/^#\/groups$/, "groups", () => groupsPage()],
  [/^#\/groups\/([^/]+)$/, "group", (m) => groupPage(decodeURIComponent(m[1]))],
  [/^#\/reassignments$/, "reassignments", () => reassignmentsPage()],
  [/^#\/acls$/, "acls", () => aclsPage()],
  [/^#\/quotas$/, "quotas", () => quotasPage()],
  [/^#\/schemas$/, "schemas", () => schemasPage()],
];

function route() {
  stopPage();
  loginShown = false;
  document.getElementById("signout").hidden = !sessionStorage.getItem(TOKEN_KEY);
  const hash = location.hash || "#/";
  for (const [re, name, make] of ROUTES) {
    const m = hash.match(re);
    if (!m) continue;
    const section = { topic: "topics", browser: "topics", group: "groups" }[name] || name;
    for (const a of document.querySelectorAll("#nav a")) a.classList.toggle("active", a.dataset.nav === section);
    main.replaceChildren();
    const page = make(m);
    runPage(name, page);
    return;
  }
  replace(main, h("h1", null, "Not found"), h("p", null, h("a", { href: "#/" }, "Back to the overview")));
}

window.addEventListener("hashchange", route);
document.addEventListener("visibilitychange", () => {
  if (!document.hidden && current && current.timer) {
    clearTimeout(current.timer);
    runPage(current.name, current.page);
  }
});

// A page: a heading, a slot for refresh errors, and a live part re-rendered by refresh(); forms go elsewhere.
function scaffold(title, subtitle) {
  const live = h("div", { class: "live" });
  const errorSlot = h("div");
  append(main, [h("h1", null, title, subtitle ? h("small", null, subtitle) : null), errorSlot]);
  return { live, errorSlot };
}

// ------------------------------------------------------------------------------------------------- shared data

// GET /ui/api/brokers: every broker as it answers for itself (health, log dirs, metric counters).
const brokersView = (include) => api(`/ui/api/brokers?include=${include}`);
// A route that only adds to a page (sizes, liveness, configs): its 403 (say no Cluster Describe) is returned as
// the ApiError for the page to show in place, instead of failing the page, so what the caller may Describe is
// still listed (issue 29: a user sees what the API lets them). Any other error still fails the refresh.
const optional = (promise) => promise.catch((e) => { if (e instanceof ApiError && e.status === 403) return e; throw e; });
const liveBrokers = (view, meta) => (view instanceof ApiError ? new Set(meta.brokers.map((b) => b.id))
  : new Set(view.brokers.filter((b) => b.reachable).map((b) => b.id)));

// Replica sizes by "topic/partition" -> {brokerId: {size, log_end_offset}} from the brokers' log dirs.
function replicaSizes(view) {
  const out = new Map();
  for (const b of view.brokers) {
    for (const dir of (b.log_dirs && b.log_dirs.log_dirs) || []) {
      for (const r of dir.replicas) {
        if (r.is_future) continue;
        const key = `${r.topic}/${r.partition}`;
        if (!out.has(key)) out.set(key, {});
        out.get(key)[b.id] = { size: r.size, log_end_offset: r.log_end_offset };
      }
    }
  }
  return out;
}

function partitionState(p, live) {
  if (p.leader === -1 || !live.has(p.leader)) return "offline";
  return p.isr.length < p.replicas.length ? "under" : "ok";
}

// ------------------------------------------------------------------------------------------------- overview

const rateHistory = { last: null, records: [], produce: [], fetch: [] };

function overviewPage() {
  const { live, errorSlot } = scaffold("Cluster overview");
  const charts = h("div", { class: "charts", id: "charts" });
  const zookeeper = h("section", { class: "panel", id: "zookeeper" });
  append(main, [live, h("h2", null, "Rates", h("small", null, "from each broker's /metrics, summed")), charts,
    h("h2", null, "ZooKeeper", h("small", null, "each server of the ensemble, as its srvr answer describes it")),
    zookeeper]);
  return {
    errorSlot,
    async refresh() {
      const [meta, view, ensemble] = await Promise.all([api("/metadata"), brokersView("health,metrics"),
        api("/ui/api/zookeeper")]);
      replace(zookeeper, table(["Server", "Mode", "Zxid", ["Connections", "num"], "Latency min/avg/max (ms)", "Detail"],
        ensemble.servers.map((z) => row([z.server,
          z.mode ? badge(z.mode, z.mode === "leader" ? "ok" : "") : badge("down", "bad"), z.zxid || "–",
          num(z.connections), z.latency_ms || "–", z.error || ""],
        { dataset: { server: z.server, mode: z.mode || "down" } })), { id: "zookeeper-servers" }));
      const reachable = new Set(view.brokers.filter((b) => b.reachable).map((b) => b.id));
      const registered = new Set(meta.brokers.map((b) => b.id));
      const liveIds = new Set([...registered].filter((id) => reachable.has(id)));
      const parts = meta.topics.flatMap((t) => t.partitions.map((p) => ({ topic: t.name, ...p })));
      const under = parts.filter((p) => partitionState(p, liveIds) === "under");
      const offline = parts.filter((p) => partitionState(p, liveIds) === "offline");
      const down = view.brokers.filter((b) => !b.reachable);
      const controller = meta.controller_id;
      const card = (label, value, kind, id) => h("div", { class: `card ${kind || ""}`, id },
        h("div", { class: "label" }, label), h("div", { class: "value" }, value));
      replace(live,
        h("div", { class: "cards" },
          card("Brokers up", `${view.brokers.length - down.length} / ${view.brokers.length}`, down.length ? "bad" : "ok", "card-brokers"),
          card("Controller", controller === null || controller === undefined || controller < 0 ? "none" : `broker ${controller}`,
            controller === null || controller < 0 ? "bad" : "", "card-controller"),
          card("Topics", meta.topics.length, "", "card-topics"),
          card("Partitions", parts.length, "", "card-partitions"),
          card("Under-replicated", under.length, under.length ? "warn" : "ok", "card-under"),
          card("Offline", offline.length, offline.length ? "bad" : "ok", "card-offline")),
        h("p", { class: "note" }, `Cluster ${meta.cluster_id} · this console is served by broker ${view.broker_id}`),
        h("h2", null, "Brokers"),
        table(["Broker", "URL", "Status", "Role", "ZooKeeper session", "Broker epoch", "Detail"],
          view.brokers.map((b) => {
            const health = b.health || {};
            const status = !b.registered ? badge("not registered", "bad") : b.reachable ? badge(health.status || "up", health.status === "ok" ? "ok" : "warn") : badge("down", "bad");
            return row([String(b.id), b.url || "–", status, b.id === controller ? badge("controller", "ok") : "",
              health.zk_state || "–", health.broker_epoch ?? "–", b.error || ""],
            { class: b.reachable ? "" : "down", dataset: { brokerId: b.id, status: b.reachable ? "up" : "down" } });
          }), { id: "brokers" }),
        h("h2", null, "Under-replicated partitions", h("small", null, "ISR smaller than the replica set")),
        partitionTable(under, "under-replicated"),
        h("h2", null, "Offline partitions", h("small", null, "no leader, or a leader that does not answer")),
        partitionTable(offline, "offline"));
      updateRates(view);
      replace(charts,
        chart("Records in / s", [{ name: "cluster", points: rateHistory.records }], " rec/s"),
        chart("Requests / s", [{ name: "produce", points: rateHistory.produce }, { name: "fetch", points: rateHistory.fetch }], "/s"));
    },
  };
}

function partitionTable(parts, id) {
  return table(["Topic", "Partition", "Leader", "Replicas", "ISR"], parts.map((p) => row([
    h("a", { href: `#/topics/${enc(p.topic)}` }, p.topic), String(p.partition), p.leader === -1 ? "none" : String(p.leader),
    list(p.replicas), list(p.isr)])), { id });
}

function updateRates(view) {
  const now = view.time_ms;
  const sample = new Map(view.brokers.filter((b) => b.counters).map((b) => [b.id, b.counters]));
  const last = rateHistory.last;
  if (last && now > last.time) {
    const dt = (now - last.time) / 1000;
    const sum = (key) => {
      let total = 0;
      for (const [id, c] of sample) {
        const before = last.sample.get(id);
        if (before && c[key] >= before[key]) total += (c[key] - before[key]) / dt;
      }
      return total;
    };
    for (const [key, series] of [["records_in", "records"], ["produce_requests", "produce"], ["fetch_requests", "fetch"]]) {
      rateHistory[series].push([now, sum(key)]);
      if (rateHistory[series].length > HISTORY) rateHistory[series].shift();
    }
  }
  rateHistory.last = { time: now, sample };
}

// ------------------------------------------------------------------------------------------------- topics

function topicsPage() {
  const { live, errorSlot } = scaffold("Topics");
  const out = h("div");
  const name = h("input", { id: "create-name", required: true, placeholder: "name", size: 24 });
  const partitions = h("input", { id: "create-partitions", type: "number", min: 1, value: "1", size: 5 });
  const rf = h("input", { id: "create-rf", type: "number", min: 1, value: "1", size: 5 });
  const configs = h("textarea", { id: "create-configs", rows: 2, cols: 40, placeholder: "cleanup.policy=compact (one per line)" });
  const form = h("form", { class: "inline", id: "create-topic" },
    h("label", null, "Name", name), h("label", null, "Partitions", partitions), h("label", null, "Replication factor", rf),
    h("label", null, "Configs", configs), h("button", { class: "primary", type: "submit", id: "create-submit" }, "Create topic…"));
  form.addEventListener("submit", async (ev) => {
    ev.preventDefault();
    let body;
    try {
      body = { topic_name: name.value.trim(), partitions_count: Number(partitions.value),
        replication_factor: Number(rf.value), configs: parseConfigs(configs.value) };
    } catch (e) {
      replace(out, errorBox(report(e)));
      return;
    }
    const ok = await confirmAction(`Create topic ${body.topic_name}?`,
      h("p", null, `${body.partitions_count} partition(s), replication factor ${body.replication_factor}`,
        body.configs.length ? `, configs ${body.configs.map((c) => `${c.name}=${c.value}`).join(", ")}` : ""),
      { ok: "Create" });
    if (!ok) return replace(out, h("p", { class: "note" }, "Cancelled."));
    try {
      await api(`${await cluster()}/topics`, { method: "POST", body });
      replace(out, message(`Topic ${body.topic_name} created.`));
      name.value = "";
      await current?.page.refresh();
    } catch (e) {
      replace(out, errorBox(report(e)));
    }
  });
  append(main, [h("section", { class: "panel" }, h("h2", null, "Create a topic"), form, out), live]);
  let rfSet = false;
  return {
    errorSlot,
    async refresh() {
      const [meta, view] = await Promise.all([api("/metadata"), optional(brokersView("log_dirs"))]);
      if (!rfSet) { rf.value = String(Math.min(3, meta.brokers.length || 1)); rfSet = true; }
      const liveIds = liveBrokers(view, meta);
      const noSizes = view instanceof ApiError;
      const sizes = noSizes ? new Map() : replicaSizes(view);
      replace(live, noSizes ? h("p", { class: "note", id: "sizes-hidden" }, `Sizes not shown: ${view.message}`) : null,
        table(["Topic", ["Partitions", "num"], ["Replication", "num"], ["Under-replicated", "num"],
        ["Offline", "num"], ["Size (leaders)", "num"], ["Size (all replicas)", "num"]],
      meta.topics.map((t) => {
        const states = t.partitions.map((p) => partitionState(p, liveIds));
        let leaderSize = 0, allSize = 0;
        for (const p of t.partitions) {
          const s = sizes.get(`${t.name}/${p.partition}`) || {};
          leaderSize += (s[p.leader] && s[p.leader].size) || 0;
          allSize += Object.values(s).reduce((a, r) => a + r.size, 0);
        }
        return row([h("a", { href: `#/topics/${enc(t.name)}` }, t.name), num(t.partitions.length),
          num(t.partitions[0] ? t.partitions[0].replicas.length : 0), num(states.filter((s) => s === "under").length),
          num(states.filter((s) => s === "offline").length), num(noSizes ? null : bytes(leaderSize)),
          num(noSizes ? null : bytes(allSize))],
        { dataset: { topic: t.name } });
      }), { id: "topics" }));
    },
  };
}

function parseConfigs(text) {
  return text.split("\n").map((l) => l.trim()).filter(Boolean).map((l) => {
    const i = l.indexOf("=");
    if (i <= 0) throw expectedError(`config lines are name=value: ${l}`);
    return { name: l.slice(0, i).trim(), value: l.slice(i + 1).trim() };
  });
}

function topicPage(topic) {
  const { live, errorSlot } = scaffold(`Topic ${topic}`);
  const out = h("div");
  const cfgName = h("input", { id: "config-name", placeholder: "retention.ms", list: "config-names", size: 28 });
  const cfgValue = h("input", { id: "config-value", placeholder: "value", size: 20 });
  const names = h("datalist", { id: "config-names" });
  const alter = async (operation) => {
    const entry = { name: cfgName.value.trim(), operation, ...(operation === "SET" ? { value: cfgValue.value } : {}) };
    if (!entry.name) return replace(out, errorBox("name a config"));
    const ok = await confirmAction(operation === "SET" ? `Set ${entry.name} on ${topic}?` : `Reset ${entry.name} of ${topic} to its default?`,
      h("p", null, operation === "SET" ? `${entry.name} = ${entry.value}` : "The override is removed."), { ok: operation === "SET" ? "Set" : "Reset" });
    if (!ok) return replace(out, h("p", { class: "note" }, "Cancelled."));
    try {
      await api(`${await cluster()}/topics/${enc(topic)}/configs:alter`, { method: "POST", body: { data: [entry] } });
      replace(out, message(`${entry.name} ${operation === "SET" ? "set" : "reset"}.`));
      await current?.page.refresh();
    } catch (e) {
      replace(out, errorBox(report(e)));
    }
  };
  const del = h("button", { class: "danger", type: "button", id: "delete-topic" }, "Delete topic…");
  del.addEventListener("click", async () => {
    const ok = await confirmAction(`Delete topic ${topic}?`,
      h("p", null, "Every partition and record of this topic is deleted. This cannot be undone."), { typed: topic, ok: "Delete" });
    if (!ok) return replace(out, h("p", { class: "note" }, "Cancelled."));
    stopPage(); // no refresh of a topic being deleted: its routes start answering 404 meanwhile
    try {
      await api(`${await cluster()}/topics/${enc(topic)}`, { method: "DELETE" });
      location.hash = "#/topics";
    } catch (e) {
      replace(out, errorBox(report(e)));
      runPage("topic", self);
    }
  });
  const setButton = h("button", { type: "button", id: "config-set", class: "primary" }, "Set…");
  const resetButton = h("button", { type: "button", id: "config-reset" }, "Reset to default…");
  setButton.addEventListener("click", () => alter("SET"));
  resetButton.addEventListener("click", () => alter("DELETE"));
  const configsLive = h("div");
  append(main, [live,
    h("h2", null, "Configs", h("small", null, "effective values; overrides marked")),
    h("section", { class: "panel" }, h("div", { class: "controls" }, h("label", null, "Config", cfgName), names,
      h("label", null, "Value", cfgValue), setButton, resetButton, del), out),
    configsLive]);
  const self = {
    errorSlot,
    async refresh() {
      const base = await cluster();
      const [meta, view, configs] = await Promise.all([api(`/metadata?topics=${enc(topic)}`),
        optional(brokersView("log_dirs")), optional(api(`${base}/topics/${enc(topic)}/configs`))]);
      const t = meta.topics[0];
      if (!t || t.error) throw expectedError(`topic ${topic}: ${t ? t.error : "not found"}`);
      const offsets = await Promise.all(t.partitions.slice(0, 200).map((p) =>
        api(`/topics/${enc(topic)}/partitions/${p.partition}/offsets`).catch((e) => ({ error: e.message }))));
      const liveIds = liveBrokers(view, meta);
      const sizes = view instanceof ApiError ? new Map() : replicaSizes(view);
      replace(live, h("h2", null, "Partitions", h("small", null, "offsets from the leaders; sizes from each broker's log dirs")),
        table(["Partition", "Leader", "Replicas", "ISR", ["Beginning", "num"], ["End", "num"], ["Size (leader)", "num"], "Browse"],
          t.partitions.map((p, i) => {
            const state = partitionState(p, liveIds);
            const o = offsets[i] || {};
            const s = sizes.get(`${topic}/${p.partition}`) || {};
            return row([String(p.partition), p.leader === -1 ? "none" : String(p.leader), list(p.replicas), list(p.isr),
              num(o.beginning_offset), num(o.end_offset), num(s[p.leader] ? bytes(s[p.leader].size) : null),
              h("a", { href: `#/topics/${enc(topic)}/partitions/${p.partition}` }, "messages")],
            { class: state === "ok" ? "" : state, dataset: { partition: p.partition } });
          }), { id: "partitions" }));
      if (configs instanceof ApiError) {
        replace(names);
        replace(configsLive, h("div", { class: "error", id: "configs-error" }, configs.message));
        return;
      }
      replace(names, configs.data.map((c) => h("option", { value: c.name })));
      replace(configsLive, table(["Name", "Value", "Source"], configs.data.map((c) => row([
        h("code", null, c.name), h("code", null, c.value ?? "null"),
        c.is_default ? h("span", { class: "muted" }, c.source) : badge(c.source, "warn")], { dataset: { config: c.name } })),
      { id: "configs" }));
    },
  };
  return self;
}

// ------------------------------------------------------------------------------------------------- message browser

function b64bytes(s) {
  const bin = atob(s);
  const out = new Uint8Array(bin.length);
  for (let i = 0; i < bin.length; i += 1) out[i] = bin.charCodeAt(i);
  return out;
}

// A key or value as shown: null, Confluent-framed (magic 0 + schema id), JSON (pretty), text, or hex.
function decodeField(b64) {
  if (b64 === null || b64 === undefined) return { kind: "null", text: "null" };
  const data = b64bytes(b64);
  if (data.length >= 5 && data[0] === 0) {
    const id = new DataView(data.buffer).getInt32(1);
    return { kind: "framed", schemaId: id, text: `(schema id ${id}, ${data.length - 5} bytes)` };
  }
  let text;
  try { text = new TextDecoder("utf-8", { fatal: true }).decode(data); } catch {
    return { kind: "binary", text: Array.from(data.slice(0, 256), (x) => x.toString(16).padStart(2, "0")).join(" ") + (data.length > 256 ? " …" : "") };
  }
  try { return { kind: "json", text: JSON.stringify(JSON.parse(text), null, 2) }; } catch { return { kind: "text", text }; }
}

function browserPage(topic, partition) {
  const { live, errorSlot } = scaffold(`Messages of ${topic}`, `partition ${partition}`);
  const partSel = h("select", { id: "browse-partition" });
  const mode = h("select", { id: "browse-mode" }, h("option", { value: "latest" }, "Latest"),
    h("option", { value: "offset" }, "From offset"), h("option", { value: "timestamp" }, "From time (UTC)"),
    h("option", { value: "beginning" }, "From the beginning"));
  const offset = h("input", { id: "browse-offset", type: "number", min: 0, value: "0", size: 10 });
  const time = h("input", { id: "browse-time", type: "datetime-local", step: 1 });
  const count = h("input", { id: "browse-count", type: "number", min: 1, max: 500, value: "50", size: 5 });
  const committed = h("input", { id: "browse-committed", type: "checkbox" });
  const decode = h("input", { id: "browse-decode", type: "checkbox", checked: true });
  const go = h("button", { class: "primary", type: "submit", id: "browse-go" }, "Read");
  const records = h("div", { id: "records" });
  const form = h("form", { class: "controls", id: "browse-form" }, h("label", null, "Partition", partSel),
    h("label", null, "Seek", mode), h("label", null, "Offset", offset), h("label", null, "Time", time),
    h("label", null, "Count", count), h("label", { class: "check" }, committed, "read_committed"),
    h("label", { class: "check" }, decode, "Decode with the schema registry"), go);
  partSel.addEventListener("change", () => { location.hash = `#/topics/${enc(topic)}/partitions/${partSel.value}`; });
  form.addEventListener("submit", (ev) => { ev.preventDefault(); read(); });
  append(main, [h("p", null, h("a", { href: `#/topics/${enc(topic)}` }, `← topic ${topic}`)),
    h("section", { class: "panel" }, form), live, records]);
  const base = `/topics/${enc(topic)}/partitions/${partition}`;
  const isolation = () => (committed.checked ? "&isolation=read_committed" : "");
  let reads = 0; // the newest read started: an older one that answers later is not shown over it

  async function read() {
    const mine = ++reads;
    // A read asks what the form said when it started (and its answer says so), whatever is changed while it waits.
    const readCommitted = committed.checked, seek = mode.value, at = offset.value, when = time.value;
    const n = Math.max(1, Math.min(500, Number(count.value) || 50)), decodeValues = decode.checked;
    const iso = readCommitted ? "&isolation=read_committed" : "";
    try {
      const ends = await api(`${base}/offsets?${iso.slice(1)}`);
      let from;
      if (seek === "offset") from = Number(at);
      else if (seek === "beginning") from = ends.beginning_offset;
      else if (seek === "latest") from = Math.max(ends.beginning_offset, ends.end_offset - n);
      else {
        if (!when) throw expectedError("choose a time");
        const ms = Date.parse(`${when}Z`);
        const found = await api(`${base}/offsets?timestamp=${ms}${iso}`);
        from = found.offset ?? ends.end_offset;
      }
      from = Math.max(from, ends.beginning_offset);
      const got = [];
      let next = from;
      while (got.length < n && next < ends.end_offset) {
        const answer = await api(`${base}/records?offset=${next}&timeout=0&max_bytes=1048576${iso}`, { accept: BINARY });
        if (!answer.records.length || answer.next_offset <= next) break;
        got.push(...answer.records);
        next = answer.next_offset;
      }
      const shown = got.slice(0, n);
      const decoded = decodeValues ? await schemaDecode(shown, from, iso) : null;
      if (mine !== reads) return;
      replace(records, h("p", { class: "note", id: "records-summary" },
        `${shown.length} record(s) from offset ${from}; the partition's ${readCommitted ? "last stable offset" : "high watermark"} is ${ends.end_offset}.`,
        decoded && decoded.note ? ` ${decoded.note}` : ""),
      table(["Offset", "Timestamp", "Key", "Value", "Headers"], shown.map((r, i) => {
        const key = decodeField(r.key), value = decodeField(r.value);
        const dv = decoded && decoded.values ? decoded.values[i] : null; // framed fields only: the rest as read
        const dk = dv && key.kind === "framed", dval = dv && value.kind === "framed";
        return row([String(r.offset), isoTime(r.timestamp), h("pre", { class: "key" }, dk ? pretty(dv.key) : key.text),
          h("pre", { class: `value ${dval ? "decoded" : value.kind}` }, dval ? pretty(dv.value) : value.text),
          h("pre", null, (r.headers || []).map((x) => `${x.name}: ${x.value === null ? "null" : decodeField(x.value).text}`).join("\n"))],
        { dataset: { offset: r.offset } });
      }), { id: "records-table" }));
    } catch (e) {
      if (mine === reads) replace(records, errorBox(report(e)));
    }
  }

  // Confluent-framed values decoded by the broker (the v2 read's schema formats, through the registry).
  async function schemaDecode(shown, from, iso) {
    const framed = shown.map((r) => decodeField(r.value)).find((f) => f.kind === "framed");
    if (!framed || !shown.length) return null;
    try {
      const schema = await api(`/schemas/ids/${framed.schemaId}`, { accept: REGISTRY });
      const type = schema.schemaType || "AVRO";
      const answer = await api(`${base}/records?offset=${from}&timeout=0&max_bytes=1048576${iso}`, { accept: SCHEMA_ACCEPT[type] });
      const byOffset = new Map(answer.records.map((r) => [r.offset, r]));
      return { values: shown.map((r) => byOffset.get(r.offset) || null), note: `Values decoded as ${type} through the schema registry.` };
    } catch (e) {
      return { values: null, note: `Not decoded through the schema registry (${report(e).message}).` };
    }
  }

  let started = false;
  return {
    errorSlot,
    async refresh() {
      const [meta, ends] = await Promise.all([api(`/metadata?topics=${enc(topic)}`), api(`${base}/offsets?${isolation().slice(1)}`)]);
      const t = meta.topics[0];
      if (partSel.options.length === 0 && t) {
        replace(partSel, t.partitions.map((p) => h("option", { value: p.partition, selected: p.partition === partition }, String(p.partition))));
      }
      replace(live, h("p", { class: "note", id: "browse-offsets" },
        `Offsets ${ends.beginning_offset} to ${ends.end_offset} (${committed.checked ? "last stable offset" : "high watermark"}).`));
      if (!started) {
        started = true;
        await read();
      }
    },
  };
}

function pretty(v) {
  if (v === null || v === undefined) return "null";
  return typeof v === "string" ? v : JSON.stringify(v, null, 2);
}

// ------------------------------------------------------------------------------------------------- consumer groups

function groupsPage() {
  const { live, errorSlot } = scaffold("Consumer groups");
  append(main, [live]);
  return {
    errorSlot,
    async refresh() {
      const { groups } = await api("/groups");
      replace(live, table(["Group", "State", ["Members", "num"], "Coordinator", "Kind"], groups.map((g) => row([
        h("a", { href: `#/groups/${enc(g.group)}` }, g.group), stateBadge(g.state), num(g.members),
        g.coordinator === null || g.coordinator === undefined ? "–" : String(g.coordinator), g.kind],
      { dataset: { group: g.group } })), { id: "groups" }));
    },
  };
}

const stateBadge = (s) => badge(s, s === "Stable" ? "ok" : s === "Empty" ? "muted" : s === "Dead" ? "bad" : "warn");

function groupPage(group) {
  const { live, errorSlot } = scaffold(`Consumer group ${group}`);
  const lagHistory = [];
  const out = h("div");
  const resetMode = h("select", { id: "reset-mode" }, h("option", { value: "earliest" }, "to the earliest offset"),
    h("option", { value: "latest" }, "to the latest offset"), h("option", { value: "offset" }, "to offset"));
  const resetOffset = h("input", { id: "reset-offset", type: "number", min: 0, value: "0", size: 10 });
  const resetButton = h("button", { class: "danger", type: "button", id: "reset-offsets" }, "Reset offsets…");
  const resetNote = h("span", { class: "note", id: "reset-note" });
  let lastOffsets = [], lastState = null;
  resetButton.addEventListener("click", async () => {
    try {
      const targets = await Promise.all(lastOffsets.map(async (o) => {
        if (resetMode.value === "offset") return { topic: o.topic, partition: o.partition, offset: Number(resetOffset.value) };
        const ends = await api(`/topics/${enc(o.topic)}/partitions/${o.partition}/offsets`);
        return { topic: o.topic, partition: o.partition, offset: resetMode.value === "earliest" ? ends.beginning_offset : ends.end_offset };
      }));
      const ok = await confirmAction(`Reset the offsets of ${group}?`,
        table(["Topic", "Partition", ["Now", "num"], ["New", "num"]], targets.map((t, i) => row([t.topic, String(t.partition),
          num(lastOffsets[i].offset), num(t.offset)]))), { ok: "Reset" });
      if (!ok) return replace(out, h("p", { class: "note" }, "Cancelled."));
      await api(`/groups/${enc(group)}/offsets/reset`, { method: "POST", body: { offsets: targets } });
      replace(out, message(`Offsets of ${group} reset.`));
      await current?.page.refresh();
    } catch (e) {
      replace(out, errorBox(report(e)));
    }
  });
  append(main, [live, h("h2", null, "Reset offsets", h("small", null, "only while the group is empty")),
    h("section", { class: "panel" }, h("div", { class: "controls" }, h("label", null, "Reset", resetMode),
      h("label", null, "Offset", resetOffset), resetButton, resetNote), out)]);
  return {
    errorSlot,
    async refresh() {
      const [described, committed] = await Promise.all([
        api(`/groups/${enc(group)}`).catch((e) => ({ error: e })), api(`/groups/${enc(group)}/offsets`)]);
      lastOffsets = committed.offsets;
      lastState = described.error ? null : described.state;
      const empty = lastState === "Empty" || (described.error && described.error.status === 404);
      resetButton.disabled = !empty || !lastOffsets.length;
      resetNote.textContent = empty ? (lastOffsets.length ? "" : "no committed offsets to reset")
        : `the group is ${lastState || "unknown"}: stop its members first`;
      const total = lastOffsets.reduce((a, o) => a + (o.lag || 0), 0);
      lagHistory.push([Date.now(), total]);
      if (lagHistory.length > HISTORY) lagHistory.shift();
      const maxLag = Math.max(1, ...lastOffsets.map((o) => o.lag || 0));
      replace(live,
        described.error ? errorBox(described.error) : h("div", { class: "kv", id: "group-summary" },
          [["State", stateBadge(described.state)], ["Generation", String(described.generation ?? "–")],
            ["Assignor", described.assignor || "–"], ["Coordinator", String(described.coordinator ?? "–")],
            ["Kind", described.kind || "–"]].map(([k, v]) => [h("span", { class: "muted" }, k), h("span", null, v)])),
        h("h2", null, "Members"),
        table(["Member", "Client", "Host", "Assignment"], ((described.members) || []).map((m) => row([
          h("code", null, m.member_id), m.client_id || "–", m.host || "–",
          (m.assignment || []).map(([t, p]) => `${t}-${p}`).join(", ") || "–"], { dataset: { member: m.member_id } })),
        { id: "members" }),
        h("h2", null, "Committed offsets and lag", h("small", null, `total lag ${total.toLocaleString("en-US")}`)),
        h("div", { class: "charts" }, chart("Total lag", [{ name: "lag", points: lagHistory }], "")),
        table(["Topic", "Partition", ["Committed", "num"], ["Log end", "num"], ["Lag", "num"], "", "Committed at"],
          lastOffsets.map((o) => row([o.topic, String(o.partition), num(o.offset), num(o.log_end_offset), num(o.lag),
            h("td", null, h("div", { class: "bar lag" }, lagBar(o.lag, maxLag))), isoTime(o.commit_timestamp)],
          { dataset: { topic: o.topic, partition: o.partition } })), { id: "offsets" }));
    },
  };
}

function lagBar(lag, max) {
  const fill = h("span");
  fill.style.width = `${Math.round(((lag || 0) / max) * 100)}%`;
  return [fill, h("em", null, lag === null || lag === undefined ? "–" : String(lag))];
}

// ------------------------------------------------------------------------------------------------- reassignments

function reassignmentsPage() {
  const { live, errorSlot } = scaffold("Reassignments in progress");
  const seen = new Map(); // "topic/partition/broker" -> [time, size] first seen, for the rate and ETA
  append(main, [live]);
  return {
    errorSlot,
    async refresh() {
      const [moves, view] = await Promise.all([api("/admin/reassign_partitions"), brokersView("log_dirs")]);
      const sizes = replicaSizes(view);
      const meta = moves.partitions.length ? await api(`/metadata?topics=${[...new Set(moves.partitions.map((m) => m.topic))].map(enc).join(",")}`) : { topics: [] };
      const leaders = new Map(meta.topics.flatMap((t) => t.partitions.map((p) => [`${t.name}/${p.partition}`, p.leader])));
      const now = Date.now();
      replace(live, moves.partitions.length ? null : h("p", { class: "note", id: "no-reassignments" }, "No reassignment is running."),
        table(["Topic", "Partition", "Target replicas", "Adding", "Removing", "Progress (bytes caught up)", "ETA"],
          moves.partitions.map((m) => {
            const key = `${m.topic}/${m.partition}`;
            const s = sizes.get(key) || {};
            const leaderSize = (s[leaders.get(key)] || {}).size || 0;
            const bars = m.adding_replicas.map((b) => {
              const size = (s[b] || {}).size || 0;
              const frac = leaderSize ? Math.min(1, size / leaderSize) : 0;
              const id = `${key}/${b}`;
              if (!seen.has(id)) seen.set(id, [now, size]);
              const [t0, s0] = seen.get(id);
              const rate = now > t0 ? (size - s0) / ((now - t0) / 1000) : 0;
              const eta = rate > 0 ? (leaderSize - size) / rate : Infinity;
              const fill = h("span");
              fill.style.width = `${Math.round(frac * 100)}%`;
              return { bar: h("div", { class: "bar" }, fill, h("em", null, `broker ${b}: ${Math.round(frac * 100)}% of ${bytes(leaderSize)}`)), eta };
            });
            return row([m.topic, String(m.partition), list(m.replicas), list(m.adding_replicas), list(m.removing_replicas),
              h("td", null, bars.map((x) => x.bar)), bars.length ? duration(Math.max(...bars.map((x) => x.eta))) : "–"],
            { dataset: { topic: m.topic, partition: m.partition } });
          }), { id: "reassignments" }));
    },
  };
}

// ------------------------------------------------------------------------------------------------- read-only views

function aclsPage() {
  const { live, errorSlot } = scaffold("ACLs", "read-only");
  append(main, [live]);
  return {
    errorSlot,
    async refresh() {
      let acls;
      try {
        acls = await api(`${await cluster()}/acls`);
      } catch (e) {
        if (e.code === "SECURITY_DISABLED" || (e.body && e.body.error === "SECURITY_DISABLED")) {
          replace(live, h("p", { class: "note", id: "acls-disabled" }, `This cluster runs no authorizer: ${e.body.message || e.message}`));
          return;
        }
        throw e;
      }
      replace(live, table(["Resource type", "Resource name", "Pattern", "Principal", "Host", "Operation", "Permission"],
        acls.data.map((a) => row([a.resource_type, a.resource_name, a.pattern_type, a.principal, a.host, a.operation,
          badge(a.permission, a.permission === "ALLOW" ? "ok" : "bad")])), { id: "acls" }));
    },
  };
}

function configList(configs) {
  if (Array.isArray(configs)) return configs.map((c) => `${c.name}=${c.value}`).join(", ") || "–";
  if (configs && typeof configs === "object") return Object.entries(configs).map(([k, v]) => `${k}=${v}`).join(", ") || "–";
  return "–";
}

function quotasPage() {
  const { live, errorSlot } = scaffold("Client quotas", "read-only");
  append(main, [live]);
  return {
    errorSlot,
    async refresh() {
      const base = await cluster();
      const [users, clients, nested] = await Promise.all([api(`${base}/users`), api(`${base}/clients`), api(`${base}/users?clients=true`)]);
      const rows = [
        ...users.data.map((e) => ["user", e.entity_name, "", e.configs]),
        ...clients.data.map((e) => ["client", "", e.entity_name, e.configs]),
        ...nested.data.map((e) => ["user + client", e.entity_name, e.client_id, e.configs]),
      ];
      replace(live, table(["Entity", "User", "Client id", "Configs"], rows.map(([kind, user, client, configs]) =>
        row([kind, user || "–", client || "–", h("code", null, configList(configs))])), { id: "quotas" }));
    },
  };
}

function schemasPage() {
  const { live, errorSlot } = scaffold("Schema subjects", "read-only");
  append(main, [live]);
  return {
    errorSlot,
    async refresh() {
      const [subjects, config] = await Promise.all([api("/subjects", { accept: REGISTRY }), api("/config", { accept: REGISTRY })]);
      const latest = await Promise.all(subjects.slice(0, 200).map((s) =>
        api(`/subjects/${enc(s)}/versions/latest`, { accept: REGISTRY }).catch((e) => ({ subject: s, error: e.message }))));
      const open = new Set([...live.querySelectorAll("details[open]")].map((d) => d.dataset.subject));
      replace(live, h("p", { class: "note" }, `Global compatibility: ${config.compatibilityLevel || config.compatibility || "–"}.`,
        subjects.length > 200 ? ` Showing 200 of ${subjects.length} subjects.` : ""),
      table(["Subject", ["Latest version", "num"], ["Schema id", "num"], "Type", "Schema"], latest.map((v) => row([
        v.subject, num(v.version), num(v.id), v.schemaType || (v.error ? "–" : "AVRO"),
        v.error ? h("span", { class: "error" }, v.error) : h("details", { dataset: { subject: v.subject }, open: open.has(v.subject) },
          h("summary", null, "show"), h("pre", null, prettySchema(v.schema)))], { dataset: { subject: v.subject } })), { id: "subjects" }));
    },
  };
}

function prettySchema(text) {
  try { return JSON.stringify(JSON.parse(text), null, 2); } catch { return text || ""; }
}

route();
