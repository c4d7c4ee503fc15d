// coopgrid dashboard: reads this peer's JSON API (/v1/...) with the bearer
// token the user gave once, and renders the federation's state. It follows
// the task events (GET /v1/events) and refreshes when a task changes state,
// with a slow background refresh; while the stream is down it polls every
// 1.5 s, as before the watch API. Plain
// JavaScript, no build step; charts through the vendored uPlot. Every value
// from the API goes into the page as text (textContent), never as HTML: task
// names and commands come from other organisations.
"use strict";
(function () {
  const POLL_MS = 1500; // without the event stream
  const LIVE_POLL_MS = 5000; // with it: what changes without a task event (heartbeats, limits)
  const REFRESH_DELAY_MS = 150; // a burst of task events makes one refresh
  const MAX_POINTS = 800; // 20 minutes of history at 1.5 s
  const TOKEN_KEY = "coopgrid.api.token";
  const MAX_TASK_ROWS = 1000;
  const SEED_WINDOW_S = 1200; // the charts open with the last 20 minutes (GET /v1/timeline)
  const SEED_POINTS = 120;
  // PAGE is how many items the page asks for at a time when it follows a
  // list's pages (?limit=&after=, docs/HISTORY.md "Pages of the lists"),
  // as the Go client does (api.ClientPageSize); ?page=N in the dashboard's
  // address asks for smaller pages.
  const PAGE = Math.min(10000, Math.max(1, parseInt(new URLSearchParams(location.search).get("page"), 10) || 1000));
  const PALETTE = ["#2457c5", "#d1495b", "#2e933c", "#edae49", "#7b2cbf", "#00798c", "#8d6a00", "#e76f51", "#3d405b", "#6a994e"];

  const $ = (sel) => document.querySelector(sel);
  let token = sessionStorage.getItem(TOKEN_KEY) || "";
  let timer = null;
  let polling = false;
  let stream = null; // the AbortController of the open event stream
  let lastEventId = ""; // where the stream resumes
  let streamRetryMs = 1000;
  let streamTimer = null;
  let refreshTimer = null;
  let status = null;
  let tab = "overview";
  let selected = null; // the task ID whose detail is open
  let detailKey = "";   // state/attempts of the open detail, to refresh logs when it changes
  let lastTasks = [];
  // GET /v1/members (the leader's view of every member's reachability)
  // when the peer has it; else /v1/status's peers, as this peer hears them.
  let membersAPI = true;
  // Time series kept in the page from polling: t (seconds) and per organisation.
  const hist = { t: [], orgs: new Map(), seeded: 0 };
  const charts = {}; // id -> {plot, key}

  class ApiError extends Error {
    constructor(status, code, message) {
      super(message);
      this.status = status;
      this.code = code;
    }
  }

  async function api(path, opts) {
    opts = opts || {};
    const init = { method: opts.method || "GET", cache: "no-store", headers: { Authorization: "Bearer " + token } };
    if (opts.body !== undefined) {
      init.body = JSON.stringify(opts.body);
      init.headers["Content-Type"] = "application/json";
    }
    let r;
    try {
      r = await fetch(path, init);
    } catch (e) {
      throw new ApiError(0, "unreachable", "the peer does not answer (" + e.message + ")");
    }
    if (!r.ok) {
      let code = "", msg = r.status + " " + r.statusText;
      try {
        const b = await r.json();
        code = b.error.code;
        msg = b.error.message;
      } catch (_) { /* not a JSON error */ }
      throw new ApiError(r.status, code, msg);
    }
    if (opts.text) return r.text();
    if (r.status === 204) return null;
    return r.json();
  }

  // pages calls GET path page by page, PAGE items at a time: items(answer)
  // is an answer's list, key(item) an item's cursor (the next page's
  // after), and a page shorter than PAGE is the last. more(first), if
  // given, adds parameters to every page after the first (the timeline's
  // end_ms). It returns the answers in order.
  async function pages(path, items, key, more) {
    const sep = path.includes("?") ? "&" : "?";
    const out = [];
    let after = "", extra = "";
    for (;;) {
      const a = await api(path + sep + "limit=" + PAGE + extra + (after ? "&after=" + encodeURIComponent(after) : ""));
      out.push(a);
      const list = (a && items(a)) || [];
      if (list.length < PAGE) return out;
      const next = key(list[list.length - 1]);
      if (next === after) throw new ApiError(0, "bad_page", path + ": the page after " + after + " ends with it again");
      after = next;
      if (out.length === 1 && more) extra = more(a);
    }
  }

  // getStatus is GET /v1/status followed page by page: the last page's
  // figures with every organisation, and every peer once (a peer whose
  // organisation registered between two pages may come twice).
  async function getStatus() {
    const ps = await pages("/v1/status", (st) => st.orgs, (o) => o.name);
    const st = ps[ps.length - 1];
    const seen = new Set();
    st.orgs = ps.flatMap((p) => p.orgs || []);
    st.peers = ps.flatMap((p) => p.peers || []).filter((p) => !seen.has(p.id) && seen.add(p.id));
    return st;
  }

  // getTimeline is GET /v1/timeline?query followed page by page, every
  // page at the first one's sample times (its last one as end_ms).
  async function getTimeline(query) {
    const ps = await pages("/v1/timeline?" + query, (h) => h.orgs, (o) => o.name,
      (first) => (first.times_ms && first.times_ms.length ? "&end_ms=" + first.times_ms[first.times_ms.length - 1] : ""));
    const h = ps[0];
    h.orgs = ps.flatMap((p) => p.orgs || []);
    return h;
  }

  // getMachines is GET /v1/machines followed page by page.
  async function getMachines() {
    const ps = await pages("/v1/machines", (ms) => ms, (m) => m.id);
    return ps.flat();
  }

  // --- small DOM helpers -------------------------------------------------

  function el(tag, props, ...children) {
    const e = document.createElement(tag);
    for (const [k, v] of Object.entries(props || {})) {
      if (k === "class") e.className = v;
      else if (k.startsWith("data-")) e.setAttribute(k, v);
      else e[k] = v;
    }
    for (const c of children) e.append(c instanceof Node ? c : String(c));
    return e;
  }

  function setText(sel, v) {
    const e = typeof sel === "string" ? $(sel) : sel;
    const s = String(v);
    if (e.textContent !== s) e.textContent = s;
  }

  // syncRows updates tbody in place, one row per item keyed by key(item),
  // so that rows being typed in (the limit form) survive a refresh.
  function syncRows(tbody, items, key, create, update) {
    const old = new Map();
    for (const tr of Array.from(tbody.rows)) old.set(tr.dataset.key, tr);
    let prev = null;
    for (const it of items) {
      const k = key(it);
      let tr = old.get(k);
      if (tr) old.delete(k);
      else {
        tr = create(it);
        tr.dataset.key = k;
      }
      update(tr, it);
      const want = prev ? prev.nextSibling : tbody.firstChild;
      if (want !== tr) tbody.insertBefore(tr, want);
      prev = tr;
    }
    for (const tr of old.values()) tr.remove();
  }

  function cells(tr, values) {
    values.forEach((v, i) => setText(tr.cells[i], v));
  }

  // stabilityText is a machine's MTBF, interruptions and availability
  // (docs/POLICY.md §9), "–" until the federation tracks stability.
  function stabilityText(s) {
    if (!s) return "–";
    const d = s.mtbf_ms / 1000;
    const mtbf = d >= 86400 ? Math.floor(d / 86400) + "d" + Math.floor((d % 86400) / 3600) + "h"
      : d >= 3600 ? Math.floor(d / 3600) + "h" + Math.floor((d % 3600) / 60) + "m"
      : d >= 60 ? Math.floor(d / 60) + "m" + Math.floor(d % 60) + "s" : Math.floor(d) + "s";
    return "MTBF " + mtbf + ", " + s.failures + " failures, " + s.reclaims + " reclaims, " + (s.availability * 100).toFixed(1) + "% available";
  }

  function row(n, numeric) {
    const tr = document.createElement("tr");
    for (let i = 0; i < n; i++) tr.append(el("td", { class: numeric && numeric.includes(i) ? "num" : "" }));
    return tr;
  }

  function num(x, digits) {
    if (x === null || x === undefined) return "–";
    const d = digits === undefined ? 2 : digits;
    const f = Math.pow(10, d);
    return String(Math.round(x * f) / f);
  }

  function shortID(id) {
    return id && id.length > 16 ? id.slice(0, 6) + "…" + id.slice(-6) : id || "";
  }

  function time(ms) {
    return ms ? new Date(ms).toLocaleTimeString() : "";
  }

  function orgColor(name) {
    const i = status ? status.orgs.findIndex((o) => o.name === name) : -1;
    return PALETTE[(i < 0 ? 0 : i) % PALETTE.length];
  }

  // fairnessState names where an organisation stands: excess (gets more than
  // it contributes), deficit (gets less and has work waiting), served (gets
  // all it asks for), or "no quota" (contributes nothing, DP undefined).
  function fairnessState(o) {
    if (o.dp === null || o.dp === undefined) return "no quota";
    if (o.dp > 1e-9) return "excess";
    if (o.dp < -1e-9 && o.queued > 0) return "deficit";
    return "served";
  }

  // --- login --------------------------------------------------------------

  function showLogin(message) {
    stop();
    $("#app").hidden = true;
    $("#logout").hidden = true;
    setText("#whoami", "");
    setText("#conn", "");
    resetData();
    $("#login").hidden = false;
    const err = $("#token-error");
    err.hidden = !message;
    setText(err, message || "");
    $("#token-input").focus();
  }

  function wrongToken() {
    token = "";
    sessionStorage.removeItem(TOKEN_KEY);
    showLogin("Wrong token: this peer refused it. Copy the token from the file api.token in the peer's data directory.");
  }

  // resetData forgets everything shown, so that after a wrong token nothing
  // of the federation stays on the page.
  function resetData() {
    status = null;
    selected = null;
    lastTasks = [];
    hist.t = [];
    hist.seeded = 0;
    hist.orgs.clear();
    for (const id of Object.keys(charts)) {
      charts[id].plot.destroy();
      delete charts[id];
    }
    document.querySelectorAll("#app tbody").forEach((tb) => tb.replaceChildren());
    document.querySelectorAll("#app .card .v").forEach((v) => (v.textContent = ""));
    $("#task-detail").hidden = true;
  }

  async function login(ev) {
    ev.preventDefault();
    const t = $("#token-input").value.trim();
    if (!t) return;
    token = t;
    try {
      await api("/v1/status?limit=1"); // the token's check
    } catch (e) {
      if (e.status === 401) return wrongToken();
      $("#token-error").hidden = false;
      setText("#token-error", "Cannot reach the peer: " + e.message);
      return;
    }
    sessionStorage.setItem(TOKEN_KEY, token);
    $("#token-input").value = "";
    start();
  }

  function start() {
    $("#login").hidden = true;
    $("#app").hidden = false;
    $("#logout").hidden = false;
    showTab(location.hash.slice(1) || "overview");
    poll();
    seedHistory();
    setLive(false);
    openStream();
  }

  function stop() {
    if (timer) clearInterval(timer);
    timer = null;
    if (stream) stream.abort();
    stream = null;
    if (streamTimer) clearTimeout(streamTimer);
    streamTimer = null;
    lastEventId = "";
  }

  // --- the event stream ---------------------------------------------------
  // GET /v1/events is read with fetch rather than EventSource: EventSource
  // cannot send the Authorization header, and the token must not go into a
  // URL (logs, history).

  function setLive(on) {
    if (timer) clearInterval(timer);
    timer = setInterval(poll, on ? LIVE_POLL_MS : POLL_MS);
    $("#conn").dataset.live = on ? "yes" : "no";
  }

  async function openStream() {
    if (!token || stream) return;
    const ctrl = new AbortController();
    stream = ctrl;
    try {
      const headers = { Authorization: "Bearer " + token, Accept: "text/event-stream" };
      if (lastEventId) headers["Last-Event-ID"] = lastEventId;
      const r = await fetch("/v1/events", { headers: headers, cache: "no-store", signal: ctrl.signal });
      if (r.status === 401) {
        stream = null;
        return wrongToken();
      }
      if (r.status === 410) lastEventId = ""; // the peer no longer holds them: the next refresh lists, then the present
      if (!r.ok || !r.body) throw new Error("HTTP " + r.status);
      streamRetryMs = 1000;
      await readStream(r.body.getReader());
    } catch (_) {
      // Aborted, refused or lost: polling covers until the stream is back.
    }
    if (stream !== ctrl) return; // stopped (logout) meanwhile
    stream = null;
    if (!timer) return;
    setLive(false);
    scheduleRefresh();
    streamTimer = setTimeout(() => {
      streamTimer = null;
      if (timer) openStream();
    }, streamRetryMs);
    streamRetryMs = Math.min(streamRetryMs * 2, 30000);
  }

  // readStream parses server-sent events (event, id, data lines; a blank
  // line ends one).
  async function readStream(reader) {
    const dec = new TextDecoder();
    let buf = "";
    let ev = {};
    for (;;) {
      const { value, done } = await reader.read();
      if (done) return;
      buf += dec.decode(value, { stream: true });
      let i;
      while ((i = buf.indexOf("\n")) >= 0) {
        const line = buf.slice(0, i).replace(/\r$/, "");
        buf = buf.slice(i + 1);
        if (line === "") {
          onStreamEvent(ev);
          ev = {};
          continue;
        }
        const c = line.indexOf(":");
        const field = c < 0 ? line : line.slice(0, c);
        let v = c < 0 ? "" : line.slice(c + 1);
        if (v.startsWith(" ")) v = v.slice(1);
        if (field === "event") ev.event = v;
        else if (field === "id") ev.id = v;
        else if (field === "data") ev.data = ev.data === undefined ? v : ev.data + "\n" + v;
      }
    }
  }

  function onStreamEvent(ev) {
    if (ev.id) lastEventId = ev.id;
    switch (ev.event) {
      case "open":
        setLive(true);
        break;
      case "task":
        scheduleRefresh();
        break;
      case "end":
        // too_slow: the page missed changes; shutting_down: the peer
        // stops. Either way a full refresh, then a new stream.
        try {
          const end = JSON.parse(ev.data);
          if (end.code === "too_slow") lastEventId = "";
        } catch (_) { /* not JSON: ignore */ }
        scheduleRefresh();
        break;
    }
  }

  // scheduleRefresh refreshes everything shortly, once for a burst of
  // events, and again after a refresh still in flight.
  function scheduleRefresh() {
    if (refreshTimer) return;
    refreshTimer = setTimeout(() => {
      refreshTimer = null;
      if (polling) return scheduleRefresh();
      poll();
    }, REFRESH_DELAY_MS);
  }

  // --- refreshing ---------------------------------------------------------

  function taskPath() {
    const st = $("#task-state").value;
    return "/v1/tasks" + (st ? "?state=" + encodeURIComponent(st) : "");
  }

  async function poll() {
    if (polling || !token) return;
    polling = true;
    try {
      const [st, ms, led, ts, mem] = await Promise.all([getStatus(), getMachines(), api("/v1/ledger"), api(taskPath()), members()]);
      if (!timer) return; // logged out meanwhile
      status = st;
      lastTasks = ts;
      record(st, led);
      renderOverview(st, ms, mem);
      renderFairness(st);
      renderPower(st);
      renderEnergy(st, led);
      renderTasks(st);
      renderCharts();
      if (selected) await renderDetail(false);
      $("#api-error").hidden = true;
      const c = $("#conn");
      c.classList.remove("stale");
      setText(c, "updated " + new Date().toLocaleTimeString());
    } catch (e) {
      if (e.status === 401) return wrongToken();
      const a = $("#api-error");
      a.hidden = false;
      setText(a, "The API answered with an error: " + (e.code ? e.code + ": " : "") + e.message);
      $("#conn").classList.add("stale");
    } finally {
      polling = false;
    }
  }

  // members is GET /v1/members, or null when this peer does not have it.
  async function members() {
    if (!membersAPI) return null;
    try {
      const ps = await pages("/v1/members", (v) => v.members, (m) => m.id);
      const v = ps[ps.length - 1]; // the figures are the whole membership's
      v.members = ps.flatMap((p) => p.members || []);
      return v;
    } catch (e) {
      if (e.status === 401) throw e;
      // 404: a peer without the route; anything else (no leader to ask):
      // this refresh shows this peer's own view from /v1/status.
      if (e.status === 404) membersAPI = false;
      return null;
    }
  }

  // seedHistory fills the charts with the federation's recent past, which
  // the peer reconstructs from the ledger's task segments, before the
  // samples this page takes itself (it may arrive after the first ones).
  async function seedHistory() {
    let h;
    try {
      h = await getTimeline("window_s=" + SEED_WINDOW_S + "&points=" + SEED_POINTS);
    } catch (e) {
      if (e.status === 401) return wrongToken();
      return; // an older peer: the charts start empty
    }
    if (!token || !h || !h.times_ms) return;
    const first = hist.t.length ? hist.t[0] : Infinity;
    const ts = h.times_ms.map((ms) => ms / 1000);
    const n = ts.findIndex((t) => t >= first) < 0 ? ts.length : ts.findIndex((t) => t >= first);
    if (n === 0) return;
    const old = hist.t.length;
    const nulls = (k) => Array(k).fill(null);
    for (const o of h.orgs) {
      if (!hist.orgs.has(o.name)) hist.orgs.set(o.name, { dp: nulls(old), pi: nulls(old), lim: nulls(old), user: nulls(old), owner: nulls(old) });
    }
    for (const [name, series] of hist.orgs) {
      const o = h.orgs.find((x) => x.name === name);
      const seed = {
        dp: o ? o.dp.slice(0, n) : nulls(n),
        pi: o ? o.pi_w.slice(0, n) : nulls(n),
        lim: nulls(n), // the ledger keeps no history of limits
        user: o ? o.user_j.slice(0, n) : nulls(n),
        owner: o ? o.owner_j.slice(0, n) : nulls(n),
      };
      for (const k of Object.keys(series)) series[k] = seed[k].concat(series[k]);
    }
    hist.t = ts.slice(0, n).concat(hist.t);
    hist.seeded = n;
    renderCharts();
  }

  function record(st, led) {
    const now = Date.now() / 1000;
    const acct = new Map(led.orgs.map((a) => [a.org, a]));
    for (const o of st.orgs) {
      if (!hist.orgs.has(o.name)) {
        const pad = () => hist.t.map(() => null);
        hist.orgs.set(o.name, { dp: pad(), pi: pad(), lim: pad(), user: pad(), owner: pad() });
      }
    }
    hist.t.push(now);
    for (const [name, h] of hist.orgs) {
      const o = st.orgs.find((x) => x.name === name);
      const a = acct.get(name);
      h.dp.push(o && o.dp !== null ? o.dp : null);
      h.pi.push(o ? o.pi_w : null);
      h.lim.push(o ? o.limit_w : null);
      h.user.push(a ? a.user_j : o ? o.energy_j : null);
      h.owner.push(a ? a.owner_self_j + a.owner_others_j : o ? o.owner_energy_j : null);
    }
    if (hist.t.length > MAX_POINTS) {
      const cut = hist.t.length - MAX_POINTS;
      hist.t.splice(0, cut);
      for (const h of hist.orgs.values()) for (const k of Object.keys(h)) h[k].splice(0, cut);
    }
  }

  // --- views --------------------------------------------------------------

  // peerHealth lists the members with their reachability, from GET
  // /v1/members when the peer has it, else from /v1/status.
  function peerHealth(st, mem) {
    const addrs = new Map(st.peers.map((p) => [p.id, p.addrs]));
    if (mem && mem.members) {
      return mem.members.map((m) => ({ id: m.id, org: m.org || "", voter: m.suffrage === "voter", leader: m.leader,
        reachable: m.reachable, last: m.last_contact_ms, addrs: addrs.get(m.id) || [] }));
    }
    return st.peers.map((p) => ({ id: p.id, org: p.org, voter: p.voter, leader: p.leader,
      reachable: p.reachable, last: p.last_contact_ms, addrs: p.addrs }));
  }

  function lastContactText(p, self) {
    if (p.id === self) return "this peer";
    if (p.last === undefined || p.last === null || p.last < 0) return "never";
    if (p.last < 1000) return "just now";
    if (p.last < 120000) return Math.round(p.last / 1000) + " s ago";
    return Math.round(p.last / 60000) + " min ago";
  }

  // renderHealth is the first line of the overview: is the federation
  // healthy? Quorum (a majority of the voters reachable, and a leader),
  // the leader by organisation, unreachable peers, lost and drained
  // machines.
  function renderHealth(st, peers, machines) {
    const voters = peers.filter((p) => p.voter);
    const up = voters.filter((p) => p.reachable).length;
    const down = peers.filter((p) => !p.reachable);
    const lost = machines.filter((m) => m.state !== "up").length;
    const drained = machines.filter((m) => m.drained).length;
    const quorum = up * 2 > voters.length && !!st.leader;
    const leader = peers.find((p) => p.id === st.leader);
    let verdict = "healthy", text = "Healthy";
    if (!quorum) {
      verdict = "no-quorum";
      text = st.leader ? "No quorum" : "No leader (no quorum)";
    } else if (down.length || lost) {
      verdict = "degraded";
      text = "Degraded";
    }
    $("#health").dataset.health = verdict;
    setText("#health-verdict", text);
    setText("#quorum", up + " of " + voters.length + " voters up");
    setText("#leader-org", st.leader ? (leader && leader.org ? leader.org : shortID(st.leader)) + (st.leader === st.self ? " (this peer)" : "") : "none");
    $("#leader-org").title = st.leader || "";
    setText("#peers-down", down.length ? down.map((p) => p.org || shortID(p.id)).join(", ") : "none");
    setText("#machines-lost", lost);
    setText("#machines-drained", drained);
  }

  function renderOverview(st, machines, mem) {
    setText("#whoami", "peer " + shortID(st.self) + " of " + st.org);
    setText("#org-name", st.org);
    setText("#self-id", shortID(st.self));
    $("#self-id").title = st.self;
    setText("#leader-id", st.leader ? (st.leader === st.self ? "this peer" : shortID(st.leader)) : "none");
    $("#leader-id").title = st.leader;
    setText("#raft-state", st.raft.state);
    setText("#applied-index", st.raft.applied_index);
    setText("#state-hash", (st.raft.state_hash || "").slice(0, 12));
    $("#state-hash").title = st.raft.state_hash;

    const peers = peerHealth(st, mem);
    renderHealth(st, peers, machines);
    syncRows($("#peers-table tbody"), peers, (p) => p.id, () => {
      const tr = row(7);
      ["peer", "org", "voter", "leader", "reach", "contact", "addrs"].forEach((c, i) => tr.cells[i].classList.add(c));
      return tr;
    }, (tr, p) => {
      tr.dataset.peer = p.id;
      tr.classList.toggle("self", p.id === st.self);
      tr.classList.toggle("unreachable", !p.reachable);
      cells(tr, [shortID(p.id), p.org || "(not registered)", p.voter ? "yes" : "no", p.leader ? "leader" : "", p.reachable ? "yes" : "NO",
        lastContactText(p, st.self), p.addrs.join(" ")]);
      tr.cells[0].title = p.id;
    });

    const blank = () => ({ n: 0, up: 0, lost: 0, drained: 0, busy: 0, g: 0, w: 0 });
    const per = new Map(st.orgs.map((o) => [o.name, blank()]));
    for (const m of machines) {
      if (!per.has(m.org)) per.set(m.org, blank());
      const p = per.get(m.org);
      p.n++;
      if (m.state === "up") p.up++;
      else p.lost++;
      if (m.drained) p.drained++;
      if (m.task) p.busy++;
      p.g += m.gflops;
      p.w += m.busy_w;
    }
    syncRows($("#orgmachines-table tbody"), Array.from(per.entries()), (e) => e[0], () => {
      const tr = row(8, [1, 2, 3, 4, 5, 6, 7]);
      tr.cells[3].classList.add("lost");
      tr.cells[4].classList.add("drained");
      return tr;
    }, (tr, [org, p]) => {
      tr.dataset.org = org;
      cells(tr, [org, p.n, p.up, p.lost, p.drained, p.busy, num(p.g), num(p.w)]);
      tr.cells[3].classList.toggle("bad-count", p.lost > 0);
      tr.cells[4].classList.toggle("warn-count", p.drained > 0);
    });
    syncRows($("#machines-table tbody"), machines, (m) => m.id, () => {
      const tr = row(8, [2, 3]);
      tr.cells[4].classList.add("state");
      tr.cells[5].classList.add("resources");
      tr.cells[7].classList.add("stability");
      return tr;
    }, (tr, m) => {
      tr.dataset.machine = m.id;
      const lost = m.state !== "up";
      tr.classList.toggle("machine-lost", lost);
      tr.classList.toggle("machine-drained", !lost && !!m.drained);
      let state = lost ? m.state.toUpperCase() + (m.drained ? " (drained)" : "") : m.drained ? "drained" : m.state;
      if (m.reclaimed) state += " (reclaimed)";
      else if (m.opportunistic) state += " (opportunistic)";
      cells(tr, [m.id + (m.unprotected ? " (UNPROTECTED!: tasks run as its peer's own user)" : ""), m.org, num(m.gflops), num(m.busy_w), state,
        resourcesText(m), (m.tasks || (m.task ? [m.task] : [])).join(" "), stabilityText(m.stability)]);
    });
  }

  function renderFairness(st) {
    syncRows($("#fairness-table tbody"), st.orgs, (o) => o.name, () => {
      const tr = row(7, [1, 2, 3, 5, 6]);
      ["org", "quota", "allocated", "dp", "state", "queued", "running"].forEach((c, i) => tr.cells[i].classList.add(c));
      return tr;
    }, (tr, o) => {
      tr.dataset.org = o.name;
      const fs = fairnessState(o);
      cells(tr, [o.name, num(o.quota_gflops), num(o.allocated_gflops), num(o.dp, 3), fs, o.queued, o.running]);
      tr.cells[4].className = "state state-" + fs.replace(" ", "-");
    });
  }

  function renderPower(st) {
    syncRows($("#power-table tbody"), st.orgs, (o) => o.name, (o) => {
      const tr = row(6, [1, 2, 3]);
      ["org", "pi", "limit", "quota", "usage", "control"].forEach((c, i) => tr.cells[i].classList.add(c));
      tr.cells[4].append(el("div", { class: "meter" }, el("div")));
      if (o.name === st.org) tr.cells[5].append(limitForm());
      return tr;
    }, (tr, o) => {
      tr.dataset.org = o.name;
      cells(tr, [o.name, num(o.pi_w), num(o.limit_w), num(o.power_quota_w)]);
      const frac = o.limit_w > 0 ? Math.min(1, o.pi_w / o.limit_w) : o.pi_w > 0 ? 1 : 0;
      const m = tr.cells[4].firstChild;
      m.firstChild.style.width = (frac * 100).toFixed(1) + "%";
      m.classList.toggle("full", frac >= 0.999);
      m.title = num(o.pi_w) + " W of " + num(o.limit_w) + " W";
    });
  }

  function limitForm() {
    const input = el("input", { id: "limit-input", type: "number", min: "0", step: "any", required: true, placeholder: "new limit" });
    const unit = el("select", { id: "limit-unit" }, el("option", { value: "watts" }, "W"), el("option", { value: "percent" }, "% of quota"));
    const btn = el("button", { id: "limit-set", type: "submit" }, "Set");
    const f = el("form", { class: "limit-form", id: "limit-form" }, input, unit, btn);
    f.addEventListener("submit", async (ev) => {
      ev.preventDefault();
      const v = Number(input.value);
      const msg = $("#limit-msg");
      if (input.value === "" || !isFinite(v) || v < 0) {
        msg.className = "bad";
        setText(msg, "The limit must be a number, 0 or more.");
        return;
      }
      btn.disabled = true;
      try {
        const o = await api("/v1/limit", { method: "PUT", body: { [unit.value]: v } });
        msg.className = "";
        setText(msg, "The limit of " + o.name + " is now " + num(o.limit_w) + " W.");
        input.value = "";
        poll();
      } catch (e) {
        if (e.status === 401) return wrongToken();
        msg.className = "bad";
        setText(msg, "The limit was not changed: " + (e.code ? e.code + ": " : "") + e.message);
      } finally {
        btn.disabled = false;
      }
    });
    return f;
  }

  function renderEnergy(st, led) {
    const acct = new Map(led.orgs.map((a) => [a.org, a]));
    syncRows($("#energy-table tbody"), st.orgs, (o) => o.name, () => {
      const tr = row(5, [1, 2, 3, 4]);
      ["org", "user", "owner", "owner-self", "owner-others"].forEach((c, i) => tr.cells[i].classList.add(c));
      return tr;
    }, (tr, o) => {
      tr.dataset.org = o.name;
      const a = acct.get(o.name) || { user_j: o.energy_j, owner_self_j: 0, owner_others_j: o.owner_energy_j };
      cells(tr, [o.name, num(a.user_j), num(a.owner_self_j + a.owner_others_j), num(a.owner_self_j), num(a.owner_others_j)]);
    });
  }

  function renderTasks(st) {
    const sum = { queued: 0, running: 0, done: 0, failed: 0, cancelled: 0 };
    for (const o of st.orgs) for (const k of Object.keys(sum)) sum[k] += o[k];
    for (const k of Object.keys(sum)) setText("#count-" + k, sum[k]);

    const q = $("#task-search").value.trim().toLowerCase();
    const match = (t) => !q || [t.id, t.org, t.name, t.machine, t.state, t.reason].some((s) => s && s.toLowerCase().includes(q));
    const shown = lastTasks.filter(match);
    const rows = shown.slice(-MAX_TASK_ROWS).reverse(); // newest first
    setText("#task-shown", rows.length < shown.length ? "newest " + rows.length + " of " + shown.length + " shown" : shown.length + " shown");
    syncRows($("#tasks-table tbody"), rows, (t) => t.id, (t) => {
      const tr = row(9, [5, 6, 7]);
      ["id", "org", "name", "state", "machine", "attempts", "exit", "size", "submitted"].forEach((c, i) => tr.cells[i].classList.add(c));
      tr.addEventListener("click", () => openDetail(t.id));
      return tr;
    }, (tr, t) => {
      tr.dataset.task = t.id;
      tr.classList.toggle("selected", t.id === selected);
      // A queued task says why it waits (the leader's pending reason).
      const state = t.state === "queued" && t.pending ? "queued (waiting: " + (t.pending_detail || t.pending) + ")" : t.state + reasonText(t.reason) + deadlineText(t);
      const ended = t.state === "done" || t.state === "failed" || t.state === "cancelled";
      cells(tr, [t.id, t.org, t.name || "", state, t.machine || "", t.attempts, ended ? t.exit_code : "", num(t.size_gflop), time(t.submitted_ms)]);
    });
  }

  // resourcesText is a machine's resources and labels ("8 cpus, 16 GiB,
  // 2 gpus; matlab"), or "one slot" for a machine declared without them.
  function resourcesText(m) {
    const parts = [];
    if (m.cpus) parts.push(m.cpus + " cpus");
    if (m.memory_bytes) parts.push(num(m.memory_bytes / 1073741824) + " GiB");
    if (m.gpus) parts.push(m.gpus + " gpus");
    const text = parts.length ? parts.join(", ") : "one slot";
    return m.labels && m.labels.length ? text + "; " + m.labels.join(" ") : text;
  }

  // deadlineText is a task's class and deadline (docs/JOBS.md,
  // "Deadlines"): " · soft-deadline, 2h 5m left, finish ~14:05", "" for a
  // task without a class.
  function deadlineText(t) {
    if (!t.class) return "";
    let s = " · " + t.class;
    if (t.deadline_ms) {
      if (t.ended_ms) s += t.ended_ms <= t.deadline_ms ? ", deadline met" : ", deadline missed";
      else {
        const left = Math.round((t.deadline_ms - Date.now()) / 60000);
        const h = Math.floor(Math.abs(left) / 60), m = Math.abs(left) % 60;
        s += ", " + (h ? h + "h " : "") + m + "m " + (left >= 0 ? "left" : "late");
      }
    }
    if (t.predicted_finish_ms) s += ", finish ~" + time(t.predicted_finish_ms);
    return s;
  }

  // reasonText shows why a task ended, unless it simply succeeded.
  function reasonText(r) {
    return r && r !== "ok" ? " (" + r + ")" : "";
  }

  function openDetail(id) {
    selected = id;
    detailKey = "";
    document.querySelectorAll("#tasks-table tbody tr").forEach((tr) => tr.classList.toggle("selected", tr.dataset.task === id));
    renderDetail(true);
  }

  async function renderDetail(first) {
    const id = selected;
    let d;
    try {
      d = await api("/v1/tasks/" + encodeURIComponent(id));
    } catch (e) {
      if (e.status === 401) return wrongToken();
      setText("#detail-title", id + ": " + e.message);
      return;
    }
    if (id !== selected) return;
    const box = $("#task-detail");
    box.hidden = false;
    box.dataset.task = d.id;
    box.dataset.state = d.state;
    setText("#detail-title", d.id + (d.name ? " — " + d.name : ""));
    const fields = [
      ["state", d.state + reasonText(d.reason)],
      ["class", d.class ? d.class + deadlineText(d).replace(" · " + d.class, "") : "–"],
      ["deadline", d.deadline_ms ? new Date(d.deadline_ms).toLocaleString() : "–"],
      ["organisation", d.org],
      ["machine", d.machine || "–"],
      ["attempts", d.attempts],
      ["exit code", d.exit_code],
      ["size", num(d.size_gflop) + " GFlop"],
      ["remaining", num(d.remaining_gflop) + " GFlop"],
      ["command", d.argv.join(" ")],
      ["wall-clock limit", d.wall_limit_ms ? num(d.wall_limit_ms / 1000) + " s" : "–"],
      ["checkpointable", d.checkpointable ? "yes" : "no"],
      ["inputs", (d.inputs || []).join(", ") || "–"],
      ["outputs", (d.outputs || []).join(", ") || "–"],
      ["submitted", time(d.submitted_ms)],
      ["ended", time(d.ended_ms) || "–"],
    ];
    $("#detail-fields").replaceChildren(...fields.flatMap(([k, v]) => [el("dt", {}, k), el("dd", { "data-field": k }, v)]));
    $("#detail-segments tbody").replaceChildren(...(d.segments || []).map((s) =>
      el("tr", {}, el("td", {}, s.machine), el("td", {}, s.machine_org), el("td", {}, time(s.start_ms)), el("td", {}, time(s.end_ms) || "running"),
        el("td", { class: "num", title: s.source ? "energy source: " + s.source : "" }, num(s.energy_j)), el("td", {}, s.outcome))));
    const cp = d.checkpoint;
    setText("#detail-checkpoint", cp ? "at " + time(cp.at_ms) + ", " + num(cp.progress_gflop) + " GFlop done, " + cp.size_bytes + " bytes, hash " +
      cp.hash.slice(0, 12) + ", held by " + (cp.holders.join(", ") || "nobody") : "none");
    // Logs are fetched when the detail opens, when the task's state changes,
    // and on every refresh while it runs.
    const key = d.state + "/" + d.attempts;
    if (first || key !== detailKey || d.state === "running") {
      detailKey = key;
      for (const stream of ["stdout", "stderr"]) {
        let text;
        try {
          text = await api("/v1/tasks/" + encodeURIComponent(id) + "/logs?stream=" + stream, { text: true });
        } catch (e) {
          if (e.status === 401) return wrongToken();
          text = "(no output: " + e.message + ")";
        }
        if (id === selected) setText("#detail-" + stream, text || "(empty)");
      }
    }
  }

  // --- charts (uPlot) -----------------------------------------------------

  const chartDefs = {
    "chart-dp": { tab: "fairness", lines: [["dp", "DP", null]], y: "DP" },
    "chart-power": { tab: "power", lines: [["pi", "PI W", null], ["lim", "limit W", [6, 4]]], y: "W" },
    "chart-energy": { tab: "energy", lines: [["user", "as user J", null], ["owner", "as owner J", [6, 4]]], y: "J" },
  };

  function renderCharts() {
    if (typeof uPlot === "undefined") return;
    for (const [id, def] of Object.entries(chartDefs)) {
      if (def.tab !== tab) continue; // a hidden chart has no width: drawn when shown
      const names = Array.from(hist.orgs.keys());
      const key = names.join("\n");
      const data = [hist.t];
      for (const n of names) for (const [field] of def.lines) data.push(hist.orgs.get(n)[field]);
      const box = document.getElementById(id);
      // How many samples the chart holds, and how many came from the
      // ledger's history (GET /v1/timeline) rather than this page.
      box.dataset.points = String(hist.t.length);
      box.dataset.seeded = String(hist.seeded || 0);
      const width = Math.max(320, box.clientWidth || 800);
      let c = charts[id];
      if (c && c.key !== key) {
        c.plot.destroy();
        c = null;
      }
      if (!c) {
        box.replaceChildren();
        const series = [{}];
        for (const n of names) {
          for (const [, label, dash] of def.lines) {
            series.push({ label: n + " " + label, stroke: orgColor(n), width: 2, dash: dash || undefined, spanGaps: false });
          }
        }
        const plot = new uPlot({ width, height: 280, series, scales: { x: { time: true } }, axes: [{}, { label: def.y, size: 70 }] }, data, box);
        charts[id] = { plot, key };
      } else {
        if (c.plot.width !== width) c.plot.setSize({ width, height: 280 });
        c.plot.setData(data);
      }
    }
  }

  // --- tabs and events ----------------------------------------------------

  function showTab(name) {
    if (!document.getElementById("view-" + name)) name = "overview";
    tab = name;
    document.querySelectorAll("#tabs button").forEach((b) => b.classList.toggle("active", b.dataset.tab === name));
    document.querySelectorAll(".view").forEach((v) => (v.hidden = v.id !== "view-" + name));
    renderCharts();
  }

  document.addEventListener("DOMContentLoaded", () => {
    $("#token-form").addEventListener("submit", login);
    $("#logout").addEventListener("click", () => {
      token = "";
      sessionStorage.removeItem(TOKEN_KEY);
      showLogin("");
    });
    document.querySelectorAll("#tabs button").forEach((b) => b.addEventListener("click", () => {
      history.replaceState(null, "", "#" + b.dataset.tab);
      showTab(b.dataset.tab);
    }));
    window.addEventListener("hashchange", () => showTab(location.hash.slice(1)));
    $("#task-state").addEventListener("change", poll);
    $("#task-search").addEventListener("input", () => status && renderTasks(status));
    if (token) {
      // A token from earlier in this tab: check it before showing anything.
      api("/v1/status?limit=1").then(start, (e) => (e.status === 401 ? wrongToken() : showLogin("Cannot reach the peer: " + e.message)));
    } else {
      showLogin("");
    }
  });
})();
