// Tandem console: the calls, call, live, registrations, streams and alerts pages. Each page is
// a shell that reads the same JSON API scripts use (/api/calls, /api/calls/{uid}, /api/live,
// /api/registrations, /api/streams, /api/alerts). Times travel in UTC (µs since the epoch, or RFC 3339) and are shown in
// the browser's time zone, which every page names.
//
// Everything a capture put in a packet (numbers, user agents, whole SIP messages) is text that
// a stranger chose: it only ever reaches the page through textContent, never as markup.
"use strict";
(function () {
  const SVG = "http://www.w3.org/2000/svg";
  const tz = Intl.DateTimeFormat().resolvedOptions().timeZone || "local time";
  const pad = (n, w = 2) => String(n).padStart(w, "0");

  // "UTC+01:00" for the browser's offset at time `d`.
  function offsetName(d) {
    const m = -d.getTimezoneOffset();
    const sign = m < 0 ? "-" : "+";
    const a = Math.abs(m);
    return `UTC${sign}${pad(Math.floor(a / 60))}:${pad(a % 60)}`;
  }
  const zoneLabel = () => `${tz} (${offsetName(new Date())})`;

  function localText(us, withMs) {
    if (us === null || us === undefined) return "";
    const d = new Date(us / 1000);
    const s = `${d.getFullYear()}-${pad(d.getMonth() + 1)}-${pad(d.getDate())} ${pad(d.getHours())}:${pad(d.getMinutes())}:${pad(d.getSeconds())}`;
    return withMs ? `${s}.${pad(d.getMilliseconds(), 3)}` : s;
  }
  const inputValue = (d) =>
    `${d.getFullYear()}-${pad(d.getMonth() + 1)}-${pad(d.getDate())}T${pad(d.getHours())}:${pad(d.getMinutes())}:${pad(d.getSeconds())}`;

  // A <time> element: the local text, with the UTC instant in its datetime attribute.
  function timeEl(us, withMs) {
    const t = document.createElement("time");
    if (us === null || us === undefined) return t;
    t.dateTime = new Date(us / 1000).toISOString();
    t.dataset.us = String(us);
    t.textContent = localText(us, withMs);
    t.title = `${t.dateTime} (UTC)`;
    return t;
  }

  function el(tag, attrs, ...children) {
    const e = document.createElement(tag);
    for (const [k, v] of Object.entries(attrs || {})) {
      if (v === null || v === undefined) continue;
      if (k === "class") e.className = v;
      else if (k.startsWith("data-")) e.setAttribute(k, v);
      else e[k] = v;
    }
    for (const c of children) {
      if (c === null || c === undefined) continue;
      e.append(c instanceof Node ? c : document.createTextNode(String(c)));
    }
    return e;
  }
  function svgEl(tag, attrs, text) {
    const e = document.createElementNS(SVG, tag);
    for (const [k, v] of Object.entries(attrs || {})) if (v !== null && v !== undefined) e.setAttribute(k, v);
    if (text !== undefined) e.textContent = text;
    return e;
  }

  const plural = (n, word) => `${n} ${word}${n === 1 ? "" : "s"}`;
  const num = (v, digits) => (v === null || v === undefined || Number.isNaN(v) ? "" : Number(Number(v).toFixed(digits)).toString());
  const duration = (s) => {
    if (s === null || s === undefined) return "";
    s = Math.round(s);
    const h = Math.floor(s / 3600), m = Math.floor((s % 3600) / 60), r = s % 60;
    return h ? `${h}:${pad(m)}:${pad(r)}` : `${m}:${pad(r)}`;
  };

  async function api(path) {
    const r = await fetch(path, { credentials: "same-origin", headers: { Accept: "application/json" } });
    if (r.status === 401) {
      location.href = `/login?next=${encodeURIComponent(location.pathname + location.search)}`;
      throw new Error("signed out");
    }
    const body = await r.json().catch(() => ({ error: `${r.status} ${r.statusText}` }));
    if (!r.ok) throw new Error(body.error || `${r.status} ${r.statusText}`);
    return body;
  }

  function nameZones() {
    document.querySelectorAll(".tz").forEach((e) => (e.textContent = zoneLabel()));
  }

  // ---- Search forms (calls and registrations) --------------------------------------------

  // The range of the page: `from`/`to` from the URL (RFC 3339 or epoch seconds), else the last
  // `defaultSpan` seconds.
  function pageRange(params, defaultSpan) {
    const parse = (v) => {
      if (!v) return null;
      if (/^\d+$/.test(v)) return Number(v) * 1000;
      const t = Date.parse(v);
      return Number.isFinite(t) ? t : null;
    };
    const to = parse(params.get("to")) ?? Date.now();
    const from = parse(params.get("from")) ?? to - defaultSpan * 1000;
    return { from, to };
  }

  function searchForm(defaultSpan) {
    const form = document.getElementById("search");
    const params = new URLSearchParams(location.search);
    const range = pageRange(params, defaultSpan);
    const fromLocal = document.getElementById("from-local");
    const toLocal = document.getElementById("to-local");
    fromLocal.value = inputValue(new Date(range.from));
    toLocal.value = inputValue(new Date(range.to));
    for (const [k, v] of params) {
      const input = form.elements.namedItem(k);
      if (input && !["from", "to"].includes(k)) input.value = v;
    }
    form.addEventListener("submit", (ev) => {
      ev.preventDefault();
      const f = new Date(fromLocal.value).getTime();
      const t = new Date(toLocal.value).getTime();
      const q = new URLSearchParams();
      if (Number.isFinite(f)) q.set("from", new Date(f).toISOString());
      if (Number.isFinite(t)) q.set("to", new Date(t).toISOString());
      for (const input of form.elements) {
        if (input.name && !["from", "to"].includes(input.name) && input.value.trim() !== "") q.set(input.name, input.value.trim());
      }
      location.search = q.toString();
    });
    document.querySelectorAll("#quick a[data-span]").forEach((a) =>
      a.addEventListener("click", (ev) => {
        ev.preventDefault();
        const now = Date.now();
        fromLocal.value = inputValue(new Date(now - Number(a.dataset.span) * 1000));
        toLocal.value = inputValue(new Date(now));
        form.requestSubmit();
      })
    );
    // The API's query: the form's filters and the range in UTC.
    const q = new URLSearchParams();
    for (const [k, v] of params) if (!["from", "to", "after"].includes(k) && v !== "") q.set(k, v);
    q.set("from", new Date(range.from).toISOString());
    q.set("to", new Date(range.to).toISOString());
    return { q, range };
  }

  // "No calls from … to … (zone)": an empty answer names the range it searched.
  function nothingFound(what, range) {
    return `No ${what} from ${localText(range.from * 1000)} to ${localText(range.to * 1000)} (${zoneLabel()}); that is ${new Date(range.from).toISOString()} to ${new Date(range.to).toISOString()} in UTC.`;
  }

  // An empty first page: nothing stored yet (the server's hint says how records come), or
  // nothing in this range, with a link to the day up to the newest record there is.
  function emptyState(status, body, what, range) {
    if (body.hint) {
      status.replaceChildren(el("b", { id: "empty-title" }, `No ${what} yet.`), " ", body.hint);
      status.dataset.empty = "none-yet";
      return;
    }
    status.replaceChildren(nothingFound(what, range));
    status.dataset.empty = "range";
    if (body.newest_us === null || body.newest_us === undefined) return;
    const to = Math.floor(body.newest_us / 1000) + 1000;
    const q = new URLSearchParams(location.search);
    q.set("from", new Date(to - 86400 * 1000).toISOString());
    q.set("to", new Date(to).toISOString());
    q.delete("after");
    status.append(" The newest started at ", timeEl(body.newest_us), ": ",
      el("a", { id: "newest-range", href: `${location.pathname}?${q}` }, "show the 24 hours up to it"), ".");
  }

  // Pages newest first through the API's keyset cursor.
  function pager(url, q, tbody, row, status, what, range, list) {
    const more = document.getElementById("more");
    let shown = 0;
    async function load(after) {
      const query = new URLSearchParams(q);
      if (after) query.set("after", after);
      status.textContent = "Searching…";
      status.classList.remove("error", "empty");
      const t0 = performance.now();
      try {
        const body = await api(`${url}?${query}`);
        const rows = body[list] || [];
        rows.forEach((r) => tbody.append(row(r)));
        shown += rows.length;
        const ms = Math.round(performance.now() - t0);
        // A rare filter over a long range: the server reads a bounded number of rows a page and
        // says where it stopped (the cursor's time); the person decides to search further back.
        const stoppedAt = body.scanned_to_us ?? (body.next ? Number(String(body.next).split(".")[0]) : null);
        const partial = body.next && rows.length === 0;
        if (partial) {
          status.textContent = `${shown} ${what} found so far; searched back to ${localText(stoppedAt)} (${zoneLabel()}). "Older" searches further.`;
        } else if (shown === 0) {
          emptyState(status, body, what, range);
        } else {
          status.textContent = `${shown} ${what} shown, newest first (${ms} ms).`;
        }
        status.classList.toggle("empty", shown === 0 && !partial);
        more.hidden = !body.next;
        more.onclick = () => load(body.next);
      } catch (e) {
        status.textContent = `Search failed: ${e.message}`;
        status.classList.add("error");
      }
    }
    load(null);
  }

  // ---- Calls page ----------------------------------------------------------------------

  function resultText(c) {
    const code = c.last_response ? `${c.last_response}` : "";
    return code ? `${c.state} (${code})` : c.state || "";
  }

  // The codec cell: a fax call says so first (its T.38 is not among the RTP codecs).
  function codecCell(c) {
    const td = el("td", { class: "codec" });
    if (c.fax) td.append(el("span", { class: "badge fax", title: c.fax_result ? `fax ${c.fax_result}` : "T.38 fax" }, "fax"), " ");
    td.append(c.codec || "");
    return td;
  }

  // A leg linked into a call says so, and by which rule; a call's first leg says how many
  // legs its call has when the API counted them (`legs`).
  function legBadge(c) {
    const legs = c.legs || 0;
    if (c.linked_by) {
      const sure = c.link_confidence != null ? `, confidence ${num(c.link_confidence, 2)}` : "";
      return el("span", { class: "badge leg", title: `a leg of a linked call: linked by ${c.linked_by}${sure}` }, "leg");
    }
    if (legs > 1) return el("span", { class: "badge linked", title: `the first leg of a call of ${legs} legs: its page shows them all` }, `${legs} legs`);
    return null;
  }

  function callRow(c) {
    const linked = c.linked_by || (c.legs || 0) > 1;
    const tr = el("tr", { "data-uid": c.uid, "data-group": c.call_group || c.uid, class: [c.fax ? "fax" : "", linked ? "linked" : ""].join(" ").trim() || null });
    const link = el("a", { href: `/calls/${encodeURIComponent(c.uid)}` }, timeEl(c.start_us));
    const badge = legBadge(c);
    tr.append(
      el("td", {}, link, ...(badge ? [" ", badge] : [])),
      el("td", { class: "caller" }, c.caller),
      el("td", { class: "called" }, c.called),
      el("td", { class: "n" }, duration(c.duration_s)),
      el("td", {}, resultText(c)),
      codecCell(c),
      el("td", { class: `n ${c.mos_min !== null && c.mos_min < 3.1 ? "bad" : ""}` }, num(c.mos_min, 2)),
      el("td", { class: "n" }, num(c.loss_pct_max, 2)),
      el("td", { class: "n" }, num(c.jitter_max_ms, 2)),
      el("td", {}, c.hangup_by || ""),
      el("td", {}, c.sensor || "")
    );
    return tr;
  }

  // The labels of a time axis over `spanMs`: the year whenever the range is long enough to
  // leave it in doubt (or crosses one), the time of day while it is short.
  function axisText(us, spanMs, crossesYear) {
    const t = localText(us);
    if (spanMs > 180 * 86400 * 1000 || crossesYear) return spanMs > 3 * 86400 * 1000 ? t.slice(0, 10) : t.slice(0, 16);
    return spanMs > 3 * 86400 * 1000 ? t.slice(5, 10) : t.slice(5, 16);
  }

  // The header's small chart: calls per bucket as bars, average MOS as a line (1 to 5), a dot
  // on each bucket's MOS so that a lone bucket, or one between empty ones, still shows.
  function totalsChart(box, t, range) {
    const W = 900, H = 120, L = 40, R = 40, T = 8, B = 20;
    const svg = svgEl("svg", { viewBox: `0 0 ${W} ${H}`, class: "chart mini", role: "img", "aria-label": "calls and MOS over the range" });
    const buckets = t.buckets || [];
    const maxCalls = Math.max(1, ...buckets.map((b) => b.calls));
    // `range` in ms since the epoch, bucket starts in µs; a bucket is drawn within the frame.
    const span = Math.max(1, range.to - range.from);
    const x = (us) => L + Math.min(1, Math.max(0, (us / 1000 - range.from) / span)) * (W - L - R);
    const widthUs = (t.bucket_s || 0) * 1e6;
    svg.append(svgEl("line", { x1: L, x2: W - R, y1: H - B, y2: H - B, class: "grid" }));
    svg.append(svgEl("text", { x: L - 4, y: T + 8, class: "tick-y" }, String(maxCalls)));
    svg.append(svgEl("text", { x: L - 4, y: H - B, class: "tick-y" }, "0"));
    svg.append(svgEl("text", { x: W - R + 4, y: T + 8 }, "MOS 5"));
    svg.append(svgEl("text", { x: W - R + 4, y: H - B }, "1"));
    const bars = svgEl("g", { class: "c0" });
    const mos = svgEl("g", { class: "c1 mos" });
    let line = "", joined = false;
    for (const b of buckets) {
      const x0 = x(b.start_us), x1 = widthUs ? x(b.start_us + widthUs) : W - R;
      const bw = Math.max(1, x1 - x0 - 1);
      const h = (b.calls / maxCalls) * (H - T - B);
      if (b.calls) bars.append(svgEl("rect", { x: x0, y: H - B - h, width: bw, height: h, class: "bar" }));
      if (b.mos_avg === null || b.mos_avg === undefined) {
        joined = false;
        continue;
      }
      const cx = x0 + bw / 2, cy = H - B - ((b.mos_avg - 1) / 4) * (H - T - B);
      line += `${joined ? "L" : "M"}${cx.toFixed(1)},${cy.toFixed(1)}`;
      joined = true;
      mos.append(svgEl("circle", { cx: cx.toFixed(1), cy: cy.toFixed(1), r: 2.5, class: "dot" }, undefined));
      mos.lastChild.append(svgEl("title", {}, `MOS ${num(b.mos_avg, 2)} (${b.calls} calls from ${localText(b.start_us)})`));
    }
    svg.append(bars);
    if (line) mos.prepend(svgEl("path", { d: line, class: "line" }));
    svg.append(mos);
    const crossesYear = new Date(range.from).getFullYear() !== new Date(range.to).getFullYear();
    for (const [i, at] of [range.from * 1000, ((range.from + range.to) / 2) * 1000, range.to * 1000].entries()) {
      const anchor = ["start", "middle", "end"][i];
      svg.append(svgEl("text", { x: x(at), y: H - 4, "text-anchor": anchor, class: "tick-x-label" }, axisText(at, span, crossesYear)));
    }
    box.replaceChildren(svg, el("p", { class: "legend-line" }, el("span", { class: "swatch c0" }), " calls  ", el("span", { class: "swatch c1" }), " average MOS"));
  }

  async function callsPage() {
    const { q, range } = searchForm(86400);
    exportLinks("/api/calls", q);
    pager("/api/calls", q, document.querySelector("#calls tbody"), callRow, document.getElementById("status"), "calls", range, "calls");
    const totals = document.getElementById("totals");
    try {
      const t = await api(`/api/calls/totals?${q}`);
      const share = t.calls ? `${((100 * t.answered) / t.calls).toFixed(1)} % answered` : "";
      totals.replaceChildren(
        el("b", { id: "total-calls" }, `${t.calls.toLocaleString()} calls`),
        share ? ` · ${share}` : "",
        t.mos_avg !== null && t.mos_avg !== undefined ? ` · average MOS ${num(t.mos_avg, 2)}` : "",
        t.mos_min !== null && t.mos_min !== undefined ? ` · worst MOS ${num(t.mos_min, 2)}` : "",
        t.note ? ` · ${t.note}` : ""
      );
      totalsChart(document.getElementById("totals-chart"), t, range);
    } catch (e) {
      totals.textContent = `Totals failed: ${e.message}`;
    }
  }

  // ---- Call page: fields, ladder, streams, charts, audio ---------------------------------

  function fields(c) {
    const dl = document.getElementById("call-fields");
    const add = (k, v) => dl.append(el("dt", {}, k), el("dd", {}, v));
    add("Call-ID", c.call_id);
    add("Caller", `${c.caller} (${c.caller_addr})`);
    add("Called", `${c.called} (${c.callee_addr})`);
    add("Started", timeEl(c.start_us, true));
    if (c.answer_us) add("Answered", timeEl(c.answer_us, true));
    if (c.end_us) add("Ended", timeEl(c.end_us, true));
    add("Result", `${resultText(c)}${c.last_reason ? ` ${c.last_reason}` : ""}`);
    if (c.hangup_by) add("Hung up by", c.hangup_by);
    if (c.q850_cause) add("Q.850 cause", String(c.q850_cause));
    if (c.dtmf) add("Digits", c.dtmf);
    if (c.fax_result) add("Fax", `${c.fax_result}, ${plural(c.fax_pages ?? 0, "page")}`);
    else if (c.fax) add("Fax", "T.38 sent; no T.30 frames seen, so no pages or result (the capture may have begun late)");
    add("Sensor", c.sensor || "local");
    if (c.caller_ua) add("Caller's User-Agent", c.caller_ua);
    if (c.callee_ua) add("Callee's Server", c.callee_ua);
    if (c.from_domain || c.to_domain) add("Domains", `${c.from_domain || "-"} → ${c.to_domain || "-"}`);
    if (c.ruri_user) add("Request-URI user", c.ruri_user);
    for (const [name, value] of Object.entries(c.headers || {})) add(name, value);
  }

  // One column per address: SIP hosts as ip:port. An RTP endpoint goes to the host whose SDP
  // offered it (its media address; symmetric RTP sends from there too), else to the one host
  // of its IP, else to a column of its own: when both ends share an IP, the IP alone cannot
  // tell them apart.
  function ladderColumns(view) {
    const cols = [...view.hosts];
    const ipOf = (a) => (a.startsWith("[") ? a.slice(1, a.indexOf("]")) : a.slice(0, a.lastIndexOf(":")));
    const offeredBy = new Map();
    for (const m of view.ladder || []) {
      for (const media of (m.sdp && m.sdp.media) || []) if (media.addr && !offeredBy.has(media.addr)) offeredBy.set(media.addr, m.src);
    }
    const col = (addr) => {
      let i = cols.indexOf(addr);
      if (i < 0 && offeredBy.has(addr)) i = cols.indexOf(offeredBy.get(addr));
      if (i < 0) {
        const same = view.hosts.filter((h) => ipOf(h) === ipOf(addr));
        if (same.length === 1) i = cols.indexOf(same[0]);
      }
      if (i < 0) {
        cols.push(addr);
        i = cols.length - 1;
      }
      return i;
    };
    return { cols, col };
  }

  // `text` cut to about `px` pixels of 10-11 px type, with an ellipsis.
  const CHAR_PX = 6.2;
  function fit(text, px) {
    const n = Math.max(4, Math.floor(px / CHAR_PX));
    return text.length > n ? `${text.slice(0, n - 1)}…` : text;
  }

  // Legs are lettered A, B, … in the order they started; a message or stream names its leg
  // by Call-ID (the ladder) or by the uid of the leg whose row holds it (the streams).
  const legLetter = (i) => (i < 26 ? String.fromCharCode(65 + i) : `L${i + 1}`);
  function legOf(view, callId) {
    const legs = view.legs || [];
    if (legs.length < 2) return null;
    const i = legs.findIndex((l) => l.call_id === callId);
    return i < 0 ? null : { i, letter: legLetter(i) };
  }
  function legByUid(view, uid) {
    const i = (view.legs || []).findIndex((l) => l.uid === uid);
    return i < 0 ? "" : legLetter(i);
  }

  // Every leg's row, the rule that linked it, and its worst figures; the leg with the worst
  // loss or jitter is marked: where the trouble was.
  function legsPanel(view) {
    const legs = view.legs || [];
    if (legs.length < 2) return;
    document.getElementById("legs-panel").hidden = false;
    const quality = new Map((view.leg_quality || []).map((q) => [q.uid, q]));
    const tbody = document.querySelector("#legs tbody");
    legs.forEach((l, i) => {
      const q = quality.get(l.uid) || {};
      const worst = view.worst_leg === l.uid;
      const rule = l.linked_by ? `${l.linked_by}${l.link_confidence != null ? ` (${num(l.link_confidence, 2)})` : ""}` : "first leg";
      const here = el("a", { href: `/calls/${encodeURIComponent(l.uid)}` }, legLetter(i));
      tbody.append(el("tr", { "data-leg": legLetter(i), "data-uid": l.uid, class: worst ? "worst" : null },
        el("td", { class: "leg" }, here, worst ? el("span", { class: "badge bad", title: "the most loss or jitter of the call's legs" }, " loss here") : ""),
        el("td", {}, timeEl(l.start_us, true)), el("td", { class: "call-id" }, l.call_id),
        el("td", {}, l.caller), el("td", {}, l.called), el("td", {}, l.caller_addr), el("td", {}, l.callee_addr),
        el("td", {}, resultText(l)), el("td", { class: "linked-by" }, rule),
        el("td", { class: `n ${worst ? "bad" : ""}` }, num(q.loss_pct_max, 2)), el("td", { class: "n" }, num(q.jitter_max_ms, 2)),
        el("td", { class: "n" }, num(q.mos_min, 2))));
    });
    const worst = legs.findIndex((l) => l.uid === view.worst_leg);
    document.getElementById("legs-note").textContent = worst >= 0
      ? `One call in ${legs.length} legs, on one ladder below. Leg ${legLetter(worst)} had the worst loss and jitter.`
      : `One call in ${legs.length} legs, on one ladder below. No leg lost packets or jittered.`;
  }

  function drawLadder(view) {
    const box = document.getElementById("ladder");
    const note = document.getElementById("ladder-note");
    const msgBox = document.getElementById("message");
    if (!view.ladder || view.ladder.length === 0) {
      note.textContent = view.note || "No SIP packets archived for this call.";
      return;
    }
    const { cols, col } = ladderColumns(view);
    // Rows in time order: each SIP message, and each RTP stream at its first packet.
    const rows = view.ladder.map((m, i) => ({ kind: "sip", t: m.ts_us, m, i }));
    (view.streams || []).forEach((s, i) => rows.push({ kind: "rtp", t: s.figures.start_us, s, i }));
    rows.sort((a, b) => a.t - b.t || (a.kind === "sip" ? -1 : 1));
    (view.streams || []).forEach((s) => { col(s.figures.src); col(s.figures.dst); });
    const colW = 230, left = 150, top = 44, rowH = 30, loopW = 46;
    const W = left + colW * cols.length + 8, H = top + rowH * rows.length + 20;
    const svg = svgEl("svg", { viewBox: `0 0 ${W} ${H}`, width: W, height: H, class: "ladder-svg", role: "img", "aria-label": "SIP ladder" });
    const defs = svgEl("defs");
    const marker = svgEl("marker", { id: "arrow", viewBox: "0 0 10 10", refX: 10, refY: 5, markerWidth: 7, markerHeight: 7, orient: "auto-start-reverse" });
    marker.append(svgEl("path", { d: "M0,0 L10,5 L0,10 z", class: "arrow-head" }));
    // The RTP spans are thick: their head is sized in the drawing's units, not the stroke's.
    const rtpMarker = svgEl("marker", { id: "arrow-rtp", viewBox: "0 0 10 10", refX: 10, refY: 5, markerWidth: 10, markerHeight: 10, markerUnits: "userSpaceOnUse", orient: "auto-start-reverse" });
    rtpMarker.append(svgEl("path", { d: "M0,0 L10,5 L0,10 z", class: "rtp-head" }));
    defs.append(marker, rtpMarker);
    svg.append(defs);
    const cx = (i) => left + colW * i + colW / 2;
    cols.forEach((c, i) => {
      svg.append(svgEl("text", { x: cx(i), y: 16, class: "host", "text-anchor": "middle" }, fit(c, colW - 8)));
      svg.append(svgEl("line", { x1: cx(i), x2: cx(i), y1: 26, y2: H - 8, class: "lifeline" }));
    });
    // Text centred at `mid`, kept inside the drawing (one message per row: it may run past
    // its arrow, not past the edge; what is cut is in its title and in the message).
    const centred = (text, mid, width, y, cls) => {
      const shown = fit(text, W - left - 8);
      const half = (shown.length * CHAR_PX) / 2;
      const x = Math.min(W - 4 - half, Math.max(left + half, mid));
      const t = svgEl("text", { x: x.toFixed(1), y, "text-anchor": "middle", class: cls }, shown);
      if (shown !== text) t.append(svgEl("title", {}, text));
      return t;
    };
    // A message between two columns is an arrow; one a column sends to itself (two ports of
    // one host drawn as one column) a loop beside it.
    const span = (g, a, b, y, cls, markerId) => {
      if (a !== b) {
        g.append(svgEl("line", { x1: a, x2: b, y1: y, y2: y, class: cls, "marker-end": `url(#${markerId})` }));
        return [Math.min(a, b), Math.max(a, b)];
      }
      g.append(svgEl("path", { d: `M${a},${y - 7} h${loopW} v14 h-${loopW}`, class: `${cls} loop`, fill: "none", "marker-end": `url(#${markerId})` }));
      return [a, a + loopW];
    };
    rows.forEach((row, r) => {
      const y = top + r * rowH + rowH / 2;
      if (row.kind === "sip") {
        const m = row.m;
        const a = cx(col(m.src)), b = cx(col(m.dst));
        const cls = `msg${m.code ? " response" : " request"}${m.code >= 400 ? " failure" : ""}${m.resent ? " resent" : ""}`;
        const leg = legOf(view, m.call_id);
        const g = svgEl("g", { class: `${cls}${leg ? ` leg${leg.i}` : ""}`, "data-index": row.i, "data-label": m.label, "data-leg": leg ? leg.letter : "", "data-sdp": m.sdp ? "1" : "0", "data-resent": m.resent ? "1" : "0", tabindex: 0 });
        const resent = m.resent ? " (resent: a retransmission of the one before)" : "";
        g.append(svgEl("title", {}, `${m.label} ${m.src} → ${m.dst} (${m.transport})${resent}`));
        g.append(svgEl("text", { x: 4, y: y - 2, class: "when" }, localText(m.ts_us, true).slice(11)));
        g.append(svgEl("text", { x: 4, y: y + 10, class: "delta" }, r === 0 ? "" : `+${(m.delta_us / 1000).toFixed(1)} ms`));
        if (leg) g.append(svgEl("text", { x: left - 16, y: y + 4, class: `leg-tag leg${leg.i}`, "text-anchor": "middle" }, leg.letter));
        const [x1, x2] = span(g, a, b, y, "arrow", "arrow");
        g.append(svgEl("rect", { x: x1, y: y - 12, width: Math.max(x2 - x1, 40), height: 16, class: "hit" }));
        g.append(centred(m.resent ? `↻ ${m.label} (resent)` : m.label, (x1 + x2) / 2, x2 - x1, y - 4, "label"));
        if (m.sdp) {
          const sx = a + (b > a ? 10 : b < a ? -10 : 0);
          g.append(svgEl("circle", { cx: sx, cy: y, r: 4, class: "sdp-marker" }));
          const media = (m.sdp.media || []).map((s) => `${s.kind || ""} ${s.addr || ""} ${(s.codecs || []).join(" ")}`.trim()).join("; ");
          g.append(centred(`SDP ${media}`, (x1 + x2) / 2, x2 - x1, y + 11, "sdp-text"));
        }
        g.addEventListener("click", () => showMessage(m, g));
        g.addEventListener("keydown", (ev) => { if (ev.key === "Enter") showMessage(m, g); });
        svg.append(g);
      } else {
        const s = row.s.figures;
        const a = cx(col(s.src)), b = cx(col(s.dst));
        const g = svgEl("g", { class: "rtp", "data-stream": row.i });
        g.append(svgEl("title", {}, `RTP ${s.src} → ${s.dst}`));
        g.append(svgEl("text", { x: 4, y: y + 4, class: "when" }, localText(s.start_us, true).slice(11)));
        const [x1, x2] = span(g, a, b, y, "rtp-span", "arrow-rtp");
        const loss = s.packets + Math.max(0, s.lost) > 0 ? (100 * Math.max(0, s.lost)) / (s.packets + Math.max(0, s.lost)) : 0;
        g.append(centred(`RTP ${s.payload} ${s.packets} pkts, loss ${loss.toFixed(1)} %, MOS ${num(s.mos, 2) || "–"}`, (x1 + x2) / 2, x2 - x1, y - 6, "label rtp-label"));
        const rtcp = row.s.rtcp || [];
        if (rtcp.length) {
          const last = rtcp[rtcp.length - 1];
          g.append(centred(`RTCP ×${rtcp.length}: loss ${num(last.fraction_lost_pct, 1)} %, jitter ${num(last.jitter_ms, 1)} ms`, (x1 + x2) / 2, x2 - x1, y + 11, "rtcp-text"));
          if (a !== b) rtcp.forEach((p, k) => g.append(svgEl("circle", { cx: a + ((b - a) * (k + 1)) / (rtcp.length + 1), cy: y, r: 2.5, class: "rtcp-dot" })));
        }
        svg.append(g);
      }
    });
    box.replaceChildren(svg);
    const resent = view.ladder.filter((m) => m.resent).length;
    const legs = (view.legs || []).length;
    const across = legs > 1 ? ` across ${legs} legs (${(view.legs || []).map((l, i) => `${legLetter(i)}: ${l.call_id}`).join("; ")})` : "";
    note.textContent = `${view.ladder.length} SIP messages between ${cols.length} addresses${across}${resent ? `, ${resent} of them resent (↻, dashed)` : ""}; click a message to read it. Times in ${zoneLabel()}.`;
    function showMessage(m, g) {
      svg.querySelectorAll("g.msg.selected").forEach((x) => x.classList.remove("selected"));
      g.classList.add("selected");
      msgBox.hidden = false;
      msgBox.textContent = `${localText(m.ts_us, true)}  ${m.src} → ${m.dst} (${m.transport})${m.resent ? "  resent" : ""}\n\n${m.text}`;
    }
  }

  // The streams' table; `base` is the API path of what they are in (`/api/calls/UID` or
  // `/api/streams/UID`), whose `audio/N.wav` plays stream N. `alone`: the page of one stream,
  // whose title already says its addresses, SSRC and codec (the table then fits a laptop).
  function streamsTable(view, base, admin, alone = false) {
    const tbody = document.querySelector("#streams tbody");
    (view.streams || []).forEach((sv, i) => {
      const s = sv.figures;
      let listen;
      if (!sv.audio) listen = el("span", { class: "muted" }, sv.audio_note || "not decodable here");
      else if (!admin) listen = el("span", { class: "muted" }, "admins only");
      else listen = el("audio", { controls: true, preload: "none", src: `${base}/audio/${i}.wav`, "data-stream": i });
      const who = alone ? [] : [
        el("td", {}, String(i)), el("td", { class: "leg" }, legByUid(view, sv.leg) || ((view.legs || []).length > 1 ? "?" : "A")),
        el("td", { class: "src" }, s.src), el("td", { class: "dst" }, s.dst),
        el("td", { class: "ssrc" }, `0x${(s.ssrc >>> 0).toString(16).toUpperCase().padStart(8, "0")}`),
        el("td", { class: "payload" }, s.payload)];
      const worst = view.worst_leg && sv.leg === view.worst_leg;
      tbody.append(el("tr", { "data-stream": i, "data-leg": legByUid(view, sv.leg), class: worst ? "worst" : null }, ...who,
        el("td", { class: "listen" }, listen),
        el("td", { class: "n packets" }, String(s.packets)), el("td", { class: "n lost" }, String(s.lost)),
        el("td", { class: "n duplicates" }, String(s.duplicates)), el("td", { class: "n out_of_order" }, String(s.out_of_order)),
        el("td", { class: "n max_delta_ms" }, num(s.max_delta_ms, 3)),
        el("td", { class: "n mean_jitter_ms" }, num(s.mean_jitter_ms, 3)), el("td", { class: "n max_jitter_ms" }, num(s.max_jitter_ms, 3)),
        el("td", { class: "n mos" }, num(s.mos, 2)),
        el("td", { class: "n rtcp_reports" }, String(s.rtcp_reports)),
        el("td", { class: "n rtcp_loss" }, num(s.rtcp_fraction_lost_pct, 3)), el("td", { class: "n rtcp_jitter" }, num(s.rtcp_jitter_ms, 3))));
    });
    const mixed = document.getElementById("mixed");
    if (mixed && (view.streams || []).some((s) => s.audio)) {
      mixed.replaceChildren(admin
        ? el("p", {}, "Both directions mixed: ", el("audio", { controls: true, preload: "none", src: `${base}/audio/mixed.wav`, id: "mixed-audio" }))
        : el("p", { class: "muted" }, "Listening to calls needs the admin role."));
    }
  }

  // The top of an axis from `lo` that holds `hi`: lo plus 1, 2, 2.5 or 5 times a power of ten,
  // so that the three ticks read as round numbers; a flat series gets an axis of 1 (never a
  // span of zero, whose three ticks would all read 0).
  function niceCeil(lo, hi) {
    const span = hi - lo;
    if (!(span > 1e-6)) return lo + 1;
    const p = Math.pow(10, Math.floor(Math.log10(span)));
    for (const m of [1, 2, 2.5, 5, 10]) if (m * p >= span - 1e-9) return lo + m * p;
    return lo + 10 * p;
  }

  // A small line chart of one figure of one stream over the call's seconds.
  // `yMin`, `yMax`: a fixed axis (MOS is 1 to 5), else from 0 or the data to a round top;
  // `counts`: whole numbers (packets), whose axis has no half packet.
  function lineChart(title, unit, points, yMin, yMax, counts) {
    const W = 320, H = 130, L = 40, R = 16, T = 8, B = 20;
    const svg = svgEl("svg", { viewBox: `0 0 ${W} ${H}`, class: "chart small", role: "img", "aria-label": title });
    const xs = points.map((p) => p[0]), ys = points.map((p) => p[1]).filter((v) => v !== null && v !== undefined);
    if (ys.length === 0) {
      svg.append(svgEl("text", { x: W / 2, y: H / 2, class: "empty" }, "no data"));
      return el("figure", { class: "chart-box", "data-figure": title }, el("figcaption", {}, title), svg);
    }
    const x0 = Math.min(...xs), x1 = Math.max(x0 + 1, ...xs);
    const lo = yMin ?? Math.min(0, ...ys), hi = Math.max(lo, ...ys);
    let top = yMax ?? niceCeil(lo, hi);
    if (counts) top = Math.max(lo + 1, Math.ceil(top));
    const X = (v) => L + ((v - x0) / (x1 - x0)) * (W - L - R);
    // Every point within the frame, whatever a figure holds.
    const Y = (v) => H - B - ((Math.min(top, Math.max(lo, v)) - lo) / (top - lo)) * (H - T - B);
    const mid = (lo + top) / 2;
    const ticks = counts && !Number.isInteger(mid) ? [lo, top] : [lo, mid, top];
    for (const v of ticks) {
      svg.append(svgEl("line", { x1: L, x2: W - R, y1: Y(v), y2: Y(v), class: "grid" }));
      svg.append(svgEl("text", { x: L - 4, y: Y(v) + 3, class: "tick-y" }, num(v, 2)));
    }
    // Whole seconds only: a middle tick of a short span would repeat a neighbour's label.
    const xMid = (x0 + x1) / 2;
    const xTicks = Number.isInteger(xMid) || x1 - x0 >= 10 ? [x0, Math.round(xMid), x1] : [x0, null, x1];
    xTicks.forEach((v, i) => {
      if (v !== null) svg.append(svgEl("text", { x: X(v), y: H - 6, class: ["tick-x first", "tick-x", "tick-x last"][i] }, `${Math.round(v)} s`));
    });
    let d = "";
    points.forEach(([x, y]) => {
      if (y === null || y === undefined) return;
      d += `${d ? "L" : "M"}${X(x).toFixed(1)},${Y(y).toFixed(1)}`;
    });
    svg.append(svgEl("path", { d, class: "line" }));
    return el("figure", { class: "chart-box", "data-figure": title }, el("figcaption", {}, `${title} (${unit})`), svg);
  }

  // Each stream's figures per second; `titled`: a heading per stream (a call has several).
  function streamCharts(view, titled = true) {
    const box = document.getElementById("stream-charts");
    (view.streams || []).forEach((sv, i) => {
      const s = sv.figures;
      const iv = sv.intervals || [];
      const fig = el("section", { class: `stream-charts c${i % 8}`, "data-stream": i },
        titled ? el("h3", {}, `Stream ${i}: ${s.src} → ${s.dst} ${s.payload}`) : null);
      const grid = el("div", { class: "charts" });
      grid.append(
        lineChart("Jitter", "ms", iv.map((p) => [p.t_s, p.jitter_ms]), 0),
        lineChart("Lost packets", "per s", iv.map((p) => [p.t_s, Math.max(0, p.lost)]), 0, null, true),
        lineChart("MOS", "1-5", iv.map((p) => [p.t_s, p.mos]), 1, 5),
        lineChart("Packets", "per s", iv.map((p) => [p.t_s, p.packets]), 0, null, true)
      );
      fig.append(grid);
      box.append(fig);
    });
    if (!(view.streams || []).length) box.append(el("p", { class: "muted" }, "No RTP streams in this call's packets."));
  }

  // A comma list with runs of the same item folded: `cng ×3, v21-preamble, v21 ×40`.
  function runs(list) {
    const out = [];
    for (const item of String(list || "").split(",").map((x) => x.trim()).filter(Boolean)) {
      const last = out[out.length - 1];
      if (last && last[0] === item) last[1] += 1;
      else out.push([item, 1]);
    }
    return out.map(([item, n]) => (n > 1 ? `${item} ×${n}` : item)).join(", ");
  }

  // The call's T.38 flows, one row per direction, with the T.30 frames each carried and the
  // call's fax result above them.
  function t38Panel(view) {
    const flows = view.t38 || [];
    const panel = document.getElementById("t38-panel");
    if (!flows.length) return;
    panel.hidden = false;
    const c = view.call;
    document.getElementById("t38-result").textContent = c.fax_result
      ? `Result: ${c.fax_result}, ${plural(c.fax_pages ?? 0, "page")} confirmed by the receiver. ${plural(flows.length, "flow")}.`
      : `No T.30 control frames were read, so no pages or result (the capture may have begun after the fax did). ${plural(flows.length, "flow")}.`;
    const tbody = document.querySelector("#t38 tbody");
    flows.forEach((f, i) => tbody.append(el("tr", { "data-flow": i },
      el("td", { class: "src" }, f.src), el("td", { class: "dst" }, f.dst), el("td", {}, timeEl(f.start_us, true)),
      el("td", { class: "n" }, duration((f.end_us - f.start_us) / 1e6)),
      el("td", { class: "n packets" }, String(f.packets)), el("td", { class: "n" }, String(f.bytes)),
      el("td", { class: "n lost" }, String(f.lost)), el("td", { class: "n" }, String(f.duplicates)), el("td", { class: "n" }, String(f.out_of_order)),
      el("td", { class: "n" }, String(f.redundant)), el("td", { class: "n" }, String(f.fec)),
      el("td", { class: "t30" }, f.t30 ? f.t30.split(",").join(" ") : "none seen"),
      el("td", { class: "t30 types" }, runs(f.types)))));
  }

  async function callPage() {
    const page = document.getElementById("call-page");
    const uid = page.dataset.uid;
    const admin = page.dataset.admin === "true";
    try {
      const view = await api(`/api/calls/${encodeURIComponent(uid)}`);
      const c = view.call;
      const legs = (view.legs || []).length;
      document.getElementById("call-title").textContent = `Call ${c.caller} → ${c.called}${legs > 1 ? ` (${legs} legs)` : ""}`;
      document.title = `${c.caller} → ${c.called} · Tandem`;
      fields(c);
      const actions = document.getElementById("call-actions");
      if (admin && view.archived) actions.append(el("a", { href: `/api/calls/${encodeURIComponent(uid)}/pcap`, id: "pcap", download: `${c.call_id}.pcap` }, "Download pcap"));
      else if (view.archived) actions.append(el("span", { class: "muted" }, "Downloading packets needs the admin role."));
      else actions.append(el("span", { class: "muted" }, view.note || "This call's packets were not archived."));
      legsPanel(view);
      drawLadder(view);
      t38Panel(view);
      streamsTable(view, `/api/calls/${encodeURIComponent(uid)}`, admin);
      streamCharts(view);
      page.dataset.ready = "1";
    } catch (e) {
      page.prepend(el("p", { class: "error", id: "call-error" }, `This call cannot be shown: ${e.message}`));
      page.dataset.ready = "error";
    }
  }

  // ---- Streams without a call: the search and one stream's page ----------------------------

  const ssrcText = (v) => `0x${(v >>> 0).toString(16).toUpperCase().padStart(8, "0")}`;
  const lossPct = (s) => {
    const lost = Math.max(0, s.lost + (s.duplicates || 0)), expected = s.packets - (s.duplicates || 0) + lost;
    return expected > 0 ? (100 * lost) / expected : 0;
  };

  function loneRow(s) {
    const link = el("a", { href: `/streams/${encodeURIComponent(s.uid)}` }, timeEl(s.start_us));
    return el("tr", { "data-uid": s.uid, "data-ssrc": ssrcText(s.ssrc) },
      el("td", {}, link), el("td", { class: "src" }, s.src), el("td", { class: "dst" }, s.dst),
      el("td", { class: "ssrc" }, ssrcText(s.ssrc)), el("td", {}, s.payload),
      el("td", { class: "n" }, duration((s.end_us - s.start_us) / 1e6)),
      el("td", { class: "n packets" }, String(s.packets)), el("td", { class: "n lost" }, String(s.lost)),
      el("td", { class: "n" }, num(lossPct(s), 2)), el("td", { class: "n" }, num(s.max_jitter_ms, 2)),
      el("td", { class: `n ${s.mos !== null && s.mos < 3.1 ? "bad" : ""}` }, num(s.mos, 2)),
      el("td", {}, s.sensor));
  }

  function streamsPage() {
    const { q, range } = searchForm(86400);
    pager("/api/streams", q, document.querySelector("#lone-streams tbody"), loneRow, document.getElementById("status"), "streams without a call", range, "streams");
  }

  async function streamPage() {
    const page = document.getElementById("stream-page");
    const uid = page.dataset.uid;
    const admin = page.dataset.admin === "true";
    const base = `/api/streams/${encodeURIComponent(uid)}`;
    try {
      const body = await api(base);
      const s = body.stream;
      document.getElementById("stream-title").textContent = `RTP ${s.src} → ${s.dst}, SSRC ${ssrcText(s.ssrc)}`;
      document.title = `RTP ${s.src} → ${s.dst} · Tandem`;
      const dl = document.getElementById("stream-fields");
      const add = (k, v) => dl.append(el("dt", {}, k), el("dd", {}, v));
      add("Started", timeEl(s.start_us, true));
      add("Ended", timeEl(s.end_us, true));
      add("Duration", duration((s.end_us - s.start_us) / 1e6));
      add("Codec", s.payload);
      add("Loss", `${num(lossPct(s), 2)} %`);
      add("MOS", num(s.mos, 2) || "–");
      add("Sensor", s.sensor);
      document.getElementById("stream-note").textContent = body.note || "";
      const actions = document.getElementById("stream-actions");
      if (admin && body.archived) {
        const name = `rtp_${s.src}_${s.dst}_${ssrcText(s.ssrc)}.pcap`.replace(/[^A-Za-z0-9._-]/g, "_");
        actions.append(el("a", { href: `${base}/pcap`, id: "pcap", download: name }, "Download pcap"));
      } else if (body.archived) actions.append(el("span", { class: "muted" }, "Downloading packets and listening need the admin role."));
      streamsTable(body, base, admin, true);
      if (body.archived) streamCharts(body, false);
      else document.getElementById("charts-panel").hidden = true;
      page.dataset.ready = "1";
    } catch (e) {
      page.prepend(el("p", { class: "error", id: "stream-error" }, `This stream cannot be shown: ${e.message}`));
      page.dataset.ready = "error";
    }
  }

  // ---- Live page: server-sent events, no polling ------------------------------------------

  function livePage() {
    const tbody = document.querySelector("#live tbody");
    const status = document.getElementById("live-status");
    let last = null;
    const render = () => {
      if (!last) return;
      const now = Date.now() * 1000;
      tbody.replaceChildren(...last.calls.map((c) => {
        const streams = (c.streams || []).map((s) => `${s.payload || "?"} ${num(s.loss_pct, 1)} %, ${num(s.jitter_ms, 1)} ms`).join(" · ");
        return el("tr", { "data-call-id": c.call_id },
          el("td", {}, timeEl(c.start_us)), el("td", { class: "caller" }, c.caller), el("td", { class: "called" }, c.called),
          el("td", { class: "state" }, c.state), el("td", { class: "n" }, duration((now - c.start_us) / 1e6)), el("td", {}, streams));
      }));
      const more = last.left_out ? `, ${last.left_out} more not shown` : "";
      status.textContent = `${last.calls.length} calls in progress${more}; updated ${localText(last.taken_at_us)} (${zoneLabel()}).`;
    };
    const source = new EventSource("/api/live");
    source.addEventListener("calls", (ev) => { last = JSON.parse(ev.data); render(); });
    source.addEventListener("unavailable", (ev) => { status.textContent = JSON.parse(ev.data).error; });
    source.onerror = () => { status.textContent = "Connection lost; reconnecting…"; };
    setInterval(render, 1000);
  }

  // ---- Registrations page ----------------------------------------------------------------

  function registrationRow(r) {
    return el("tr", { "data-user": r.user },
      el("td", {}, timeEl(r.last_us)), el("td", { class: "user" }, r.user), el("td", { class: "contact" }, r.contact || ""),
      el("td", { class: "ua" }, r.user_agent || ""), el("td", { class: "result" }, `${r.result}${r.last_code ? ` (${r.last_code})` : ""}`),
      el("td", { class: "n" }, r.expires_s === null || r.expires_s === undefined ? "" : String(r.expires_s)),
      el("td", { class: "n" }, String(r.requests)), el("td", {}, r.src), el("td", {}, r.dst));
  }

  // The export links of a search page: the same query, every row, as CSV or JSON lines.
  function exportLinks(path, q) {
    for (const format of ["csv", "jsonl"]) {
      const a = document.getElementById(`export-${format}`);
      if (a) a.href = `${path}?${q}&format=${format}`;
    }
  }

  function registrationsPage() {
    const { q, range } = searchForm(86400);
    exportLinks("/api/registrations", q);
    pager("/api/registrations", q, document.querySelector("#registrations tbody"), registrationRow, document.getElementById("status"), "registrations", range, "registrations");
  }

  // ---- Alerts page: firing, one alert, history, silences, rules --------------------------

  // A request that changes something (POST or PUT), same-origin; the answer's body and status.
  async function send(method, path, body, type) {
    const headers = { Accept: "application/json" };
    if (body !== undefined) headers["Content-Type"] = type || "application/json";
    const r = await fetch(path, { method, credentials: "same-origin", headers, body });
    if (r.status === 401) {
      location.href = `/login?next=${encodeURIComponent(location.pathname)}`;
      throw new Error("signed out");
    }
    const answer = await r.json().catch(() => ({ error: `${r.status} ${r.statusText}` }));
    return { ok: r.ok, status: r.status, body: answer };
  }

  const windowText = (s) => {
    if (!s) return "";
    if (s % 86400 === 0) return plural(s / 86400, "day");
    if (s % 3600 === 0) return `${s / 3600} h`;
    if (s % 60 === 0) return `${s / 60} min`;
    return `${s} s`;
  };

  // "12 calls vs 10 over 5 min", "37.5 % vs 30 % over 10 min (15 of 40)".
  function figuresText(f) {
    if (!f || typeof f !== "object") return "";
    const unit = f.unit || "";
    const pct = unit === "%";
    const value = pct ? `${num(f.value, 1)} %` : `${num(f.value, 2)}${unit ? ` ${unit}` : ""}`;
    const threshold = pct ? `${num(f.threshold, 1)} %` : num(f.threshold, 2);
    let t = `${value} vs ${threshold}`;
    if (f.window_s) t += ` over ${windowText(f.window_s)}`;
    if (pct && f.total) t += ` (${f.matched} of ${f.total})`;
    return t;
  }

  const severityEl = (s) => el("span", { class: `sev ${["critical", "warning", "info"].includes(s) ? s : "other"}` }, s || "");
  const keyText = (a) => (a.group_by === "none" || a.key === "" ? "(one key)" : a.key);

  function ackCell(a, onAck) {
    const td = el("td", { class: "ack" });
    if (a.acked_by) {
      td.append(el("span", { class: "acked" }, `${a.acked_by}, `), timeEl(a.acked_us));
    } else if (a.state === "firing" && onAck) {
      const b = el("button", { type: "button", class: "ack-button", id: `ack-${a.id}` }, "Acknowledge");
      b.addEventListener("click", () => onAck(a, b));
      td.append(b);
    } else {
      td.append(el("span", { class: "muted" }, "no"));
    }
    if (a.silenced) td.append(el("span", { class: "silenced", title: `silence #${a.silenced.id} by ${a.silenced.by}` }, " · silenced until ", timeEl(a.silenced.ends_us)));
    return td;
  }

  function ruleCell(a) {
    return el("td", { class: "rule" }, el("a", { href: `#alert-${a.id}`, title: `${a.rule_kind}: ${a.summary || ""}` }, a.rule));
  }

  function firingRow(a, onAck) {
    return el("tr", { "data-id": String(a.id), "data-rule": a.rule, "data-key": a.key, class: a.acked_by ? "acked" : "unacked" },
      ruleCell(a), el("td", {}, severityEl(a.severity)), el("td", { class: "key" }, keyText(a)),
      el("td", {}, timeEl(a.since_us)), el("td", { class: "figures" }, figuresText(a.figures)),
      el("td", { class: "n calls" }, el("a", { href: `#alert-${a.id}` }, String(a.calls_count))), ackCell(a, onAck));
  }

  function historyRow(a) {
    return el("tr", { "data-id": String(a.id), class: a.state },
      el("td", {}, timeEl(a.since_us)), ruleCell(a), el("td", {}, severityEl(a.severity)),
      el("td", { class: "key" }, keyText(a)), el("td", { class: `state-${a.state}` }, a.state),
      el("td", {}, timeEl(a.resolved_us ?? a.at_us)), el("td", { class: "figures" }, figuresText(a.figures)),
      el("td", { class: "n" }, String(a.calls_count)), ackCell(a, null));
  }

  // The header's count, as the API last said it.
  function setBadge(firing, unacked) {
    const badge = document.getElementById("alert-badge");
    if (!badge) return;
    badge.textContent = String(firing);
    badge.dataset.firing = String(firing);
    badge.dataset.unacked = String(unacked);
    badge.title = `${firing} firing, ${unacked} not acknowledged`;
    badge.classList.toggle("unacked", unacked > 0);
    badge.classList.toggle("acked", unacked === 0 && firing > 0);
  }

  async function loadFiring() {
    const tbody = document.querySelector("#firing tbody");
    const status = document.getElementById("firing-status");
    const onAck = async (a, button) => {
      button.disabled = true;
      try {
        const r = await send("POST", `/api/alerts/${a.id}/ack`);
        if (!r.ok) throw new Error(r.body.error);
        await loadFiring();
      } catch (e) {
        button.disabled = false;
        status.textContent = `Acknowledging failed: ${e.message}`;
        status.classList.add("error");
      }
    };
    try {
      const body = await api("/api/alerts?state=firing&limit=500");
      const rows = body.alerts || [];
      tbody.replaceChildren(...rows.map((a) => firingRow(a, onAck)));
      status.classList.remove("error");
      status.textContent = rows.length ? "" : (body.hint || "Nothing is firing.");
      status.classList.toggle("empty", rows.length === 0);
      const tally = document.getElementById("firing-tally");
      tally.replaceChildren();
      if (body.firing) {
        tally.append(el("span", { class: "tally-down" }, `${body.firing} firing`));
        if (body.unacked) tally.append(" ", el("span", { class: "tally-down" }, `${body.unacked} not acknowledged`));
      }
      setBadge(body.firing || 0, body.unacked || 0);
      document.getElementById("alerts-page").dataset.firingReady = "1";
    } catch (e) {
      status.textContent = `Alerts cannot be read: ${e.message}`;
      status.classList.add("error");
    }
  }

  async function showAlert() {
    const m = /^#alert-(\d+)$/.exec(location.hash);
    const panel = document.getElementById("alert-detail");
    if (!m) {
      panel.hidden = true;
      return;
    }
    const dl = document.getElementById("detail-fields");
    const list = document.getElementById("detail-calls");
    const note = document.getElementById("detail-calls-note");
    dl.replaceChildren();
    list.replaceChildren();
    panel.hidden = false;
    try {
      const { alert: a } = await api(`/api/alerts/${m[1]}`);
      document.getElementById("detail-title").textContent = `Alert #${a.id}: ${a.rule} · ${keyText(a)}`;
      const add = (k, v) => dl.append(el("dt", {}, k), el("dd", {}, v));
      add("Rule", `${a.rule} (${a.rule_kind})`);
      add("Severity", severityEl(a.severity));
      add("Key", `${keyText(a)} (group by ${a.group_by})`);
      add("State", a.state);
      add("Firing since", timeEl(a.since_us));
      add("Last change", timeEl(a.at_us));
      if (a.resolved_us) add("Resolved", timeEl(a.resolved_us));
      add("Figures", figuresText(a.figures));
      if (a.summary) add("Summary", a.summary);
      if (a.node) add("Decided by", a.node);
      add("Acknowledged", a.acked_by ? el("span", {}, `${a.acked_by}, `, timeEl(a.acked_us)) : "no");
      if (a.silenced) add("Silenced", el("span", {}, `until `, timeEl(a.silenced.ends_us), ` (by ${a.silenced.by})`));
      const uids = a.calls || [];
      note.textContent = uids.length ? `${uids.length} ${uids.length === 1 ? "call or registration" : "calls or registrations"} behind it, oldest first:` : "No call is kept with this alert.";
      // A stored call: a link with its start, parties and result; any other uid (a
      // registration's, or a call removed since) as it is.
      const rows = a.call_rows || [];
      list.replaceChildren(...uids.map((uid, i) => {
        const c = rows[i];
        if (!c) return el("li", { class: "muted", title: "no stored call has this uid (a registration, or a call removed since)" }, uid);
        const result = c.last_response ? `${c.state} (${c.last_response})` : c.state;
        return el("li", {}, el("a", { href: `/calls/${encodeURIComponent(uid)}`, title: uid }, timeEl(c.start_us), ` ${c.caller} → ${c.called}`),
          el("span", { class: "muted" }, ` · ${result}${c.duration_s ? `, ${duration(c.duration_s)}` : ""}`));
      }));
      panel.scrollIntoView({ block: "nearest" });
    } catch (e) {
      note.textContent = `This alert cannot be shown: ${e.message}`;
    }
  }

  async function loadSilences(admin) {
    const tbody = document.querySelector("#silences tbody");
    const status = document.getElementById("silences-status");
    try {
      const body = await api("/api/silences");
      const rows = body.silences || [];
      tbody.replaceChildren(...rows.map((s) => {
        const end = el("td", {});
        if (admin) {
          const b = el("button", { type: "button", id: `end-silence-${s.id}` }, "End");
          b.addEventListener("click", async () => {
            b.disabled = true;
            const r = await send("POST", `/api/silences/${s.id}/end`).catch((e) => ({ ok: false, body: { error: e.message } }));
            if (!r.ok) status.textContent = `Ending the silence failed: ${r.body.error}`;
            loadSilences(admin);
            loadFiring();
          });
          end.append(b);
        }
        return el("tr", { "data-id": String(s.id) }, el("td", {}, s.rule), el("td", { class: "key" }, s.key),
          el("td", {}, timeEl(s.starts_us)), el("td", {}, timeEl(s.ends_us)), el("td", {}, s.created_by),
          el("td", { class: "comment" }, s.comment), end);
      }));
      status.textContent = rows.length ? "" : "No silence is running.";
    } catch (e) {
      status.textContent = `Silences cannot be read: ${e.message}`;
    }
  }

  function silenceForm() {
    const form = document.getElementById("silence-form");
    if (!form) return;
    const span = document.getElementById("silence-for");
    const untilLabel = document.getElementById("silence-until-label");
    const until = document.getElementById("silence-until");
    const error = document.getElementById("silence-error");
    span.addEventListener("change", () => {
      untilLabel.hidden = span.value !== "until";
      if (!until.value) until.value = inputValue(new Date(Date.now() + 86400 * 1000)).slice(0, 16);
    });
    form.addEventListener("submit", async (ev) => {
      ev.preventDefault();
      error.hidden = true;
      form.querySelectorAll("[aria-invalid]").forEach((i) => i.removeAttribute("aria-invalid"));
      const body = {
        rule: document.getElementById("silence-rule").value,
        key: document.getElementById("silence-key").value,
        comment: document.getElementById("silence-comment").value,
      };
      if (span.value === "until") {
        const t = new Date(until.value).getTime();
        body.ends = Number.isFinite(t) ? new Date(t).toISOString() : until.value;
      } else {
        body.duration_s = Number(span.value);
      }
      const r = await send("POST", "/api/silences", JSON.stringify(body)).catch((e) => ({ ok: false, body: { error: e.message } }));
      if (!r.ok) {
        error.textContent = r.body.error;
        error.hidden = false;
        const input = { rule: "silence-rule", key: "silence-key", comment: "silence-comment", ends: "silence-until", duration_s: "silence-for" }[r.body.field];
        if (input) document.getElementById(input).setAttribute("aria-invalid", "true");
        return;
      }
      loadSilences(true);
      loadFiring();
    });
  }

  async function rulesEditor() {
    const status = document.getElementById("rules-status");
    if (!status) return;
    const text = document.getElementById("rules-text");
    const result = document.getElementById("rules-result");
    const errors = document.getElementById("rules-errors");
    try {
      const body = await api("/api/alerts/rules");
      if (!body.enabled) {
        status.textContent = body.note;
        return;
      }
      document.getElementById("rules-config").textContent = body.config_text || "(no rules in tandem.toml)";
      text.value = body.console_text || "";
      document.getElementById("rules-body").hidden = false;
    } catch (e) {
      status.textContent = `The rules cannot be read: ${e.message}`;
      return;
    }
    const run = async (method, path, done) => {
      result.textContent = "…";
      result.className = "";
      errors.hidden = true;
      const r = await send(method, path, text.value, "text/plain; charset=utf-8").catch((e) => ({ ok: false, body: { error: e.message } }));
      if (r.ok) {
        result.textContent = done;
        result.className = "ok";
        return;
      }
      result.textContent = r.body.errors ? plural(r.body.errors.length, "problem") + "; nothing changed." : r.body.error;
      result.className = "bad";
      errors.replaceChildren(...(r.body.errors || []).map((m) => el("li", {}, m)));
      errors.hidden = !(r.body.errors || []).length;
    };
    document.getElementById("rules-check").addEventListener("click", () => run("POST", "/api/alerts/rules/check", "No problem found."));
    document.getElementById("rules-save").addEventListener("click", () => run("PUT", "/api/alerts/rules", "Saved: in effect now."));
  }

  function alertsPage() {
    const page = document.getElementById("alerts-page");
    const admin = page.dataset.admin === "true";
    loadFiring();
    setInterval(loadFiring, 15000);
    showAlert();
    window.addEventListener("hashchange", showAlert);
    const { q, range } = searchForm(7 * 86400);
    pager("/api/alerts", q, document.querySelector("#history tbody"), historyRow, document.getElementById("status"), "alerts", range, "alerts");
    loadSilences(admin);
    silenceForm();
    rulesEditor();
  }

  document.addEventListener("DOMContentLoaded", () => {
    nameZones();
    if (document.getElementById("calls-filter")) callsPage();
    else if (document.getElementById("call-page")) callPage();
    else if (document.getElementById("live-page")) livePage();
    else if (document.getElementById("registrations-page")) registrationsPage();
    else if (document.getElementById("streams-page")) streamsPage();
    else if (document.getElementById("stream-page")) streamPage();
    else if (document.getElementById("alerts-page")) alertsPage();
  });
})();
