// Tandem console: local time labels, drag-to-zoom, legend toggles and the absolute range form.
// Written for this console alone; the pages work without it (times then read in UTC).
"use strict";
(function () {
  const tz = Intl.DateTimeFormat().resolvedOptions().timeZone || "local time";
  const pad = (n) => String(n).padStart(2, "0");
  const local = (t) => new Date(t * 1000);
  const inputValue = (d) =>
    `${d.getFullYear()}-${pad(d.getMonth() + 1)}-${pad(d.getDate())}T${pad(d.getHours())}:${pad(d.getMinutes())}`;

  function relabel() {
    const tzEl = document.getElementById("tz");
    if (tzEl) tzEl.textContent = tz;
    document.querySelectorAll("text.tick-x[data-t]").forEach((el) => {
      const d = local(Number(el.dataset.t));
      // Month ticks are UTC month starts: named as they are, not shifted into the evening before.
      const fmt = el.dataset.fmt;
      if (fmt === "time") el.textContent = `${pad(d.getHours())}:${pad(d.getMinutes())}`;
      else if (fmt === "day") el.textContent = `${pad(d.getMonth() + 1)}-${pad(d.getDate())}`;
    });
    document.querySelectorAll("time.abs[data-t]").forEach((el) => {
      el.textContent = inputValue(local(Number(el.dataset.t))).replace("T", " ");
    });
    // To the second (µs since the epoch): the Sensors panel's times.
    document.querySelectorAll("time.abs-s[data-us]").forEach((el) => {
      const d = new Date(Number(el.dataset.us) / 1000);
      el.textContent = `${inputValue(d).replace("T", " ")}:${pad(d.getSeconds())}`;
      el.title = `${el.dateTime} (UTC)`;
    });
  }

  // Where a new range goes: the page's own base (the Reports page keeps its group and
  // period), else the dashboard.
  function base() {
    const b = document.getElementById("picker")?.dataset.base;
    return b ? `${b}&` : "/dashboard?";
  }

  // The absolute range: inputs show local time; the form sends seconds since the epoch.
  function absoluteForm() {
    const form = document.getElementById("absolute");
    const picker = document.getElementById("picker");
    if (!form || !picker) return;
    const from = document.getElementById("from");
    const to = document.getElementById("to");
    from.value = inputValue(local(Number(picker.dataset.from)));
    to.value = inputValue(local(Number(picker.dataset.to)));
    form.addEventListener("submit", (ev) => {
      const f = new Date(from.value).getTime() / 1000;
      const t = new Date(to.value).getTime() / 1000;
      if (!isFinite(f) || !isFinite(t) || t <= f) return;
      ev.preventDefault();
      location.href = `${base()}from=${Math.floor(f)}&to=${Math.floor(t)}`;
    });
  }

  // Drag across a chart: the page reloads on the time range selected.
  function zoom(svg) {
    const d = svg.dataset;
    const [x0, x1, from, to] = [Number(d.x0), Number(d.x1), Number(d.from), Number(d.to)];
    const rect = svg.querySelector("rect.zoom");
    let start = null;
    const userX = (ev) => {
      const box = svg.getBoundingClientRect();
      const x = ((ev.clientX - box.left) / box.width) * svg.viewBox.baseVal.width;
      return Math.min(x1, Math.max(x0, x));
    };
    const timeAt = (x) => from + ((x - x0) / (x1 - x0)) * (to - from);
    svg.addEventListener("mousedown", (ev) => {
      start = userX(ev);
      rect.setAttribute("x", start);
      rect.setAttribute("width", 0);
      ev.preventDefault();
    });
    svg.addEventListener("mousemove", (ev) => {
      if (start === null) return;
      const x = userX(ev);
      rect.setAttribute("x", Math.min(start, x));
      rect.setAttribute("width", Math.abs(x - start));
    });
    const end = (ev) => {
      if (start === null) return;
      const x = userX(ev);
      const a = Math.min(start, x), b = Math.max(start, x);
      start = null;
      rect.setAttribute("width", 0);
      if (b - a < 4) return;
      let f = Math.floor(timeAt(a)), t = Math.ceil(timeAt(b));
      if (t - f < 60) { const mid = (f + t) / 2; f = Math.floor(mid - 30); t = f + 60; }
      location.href = `${base()}from=${f}&to=${t}`;
    };
    svg.addEventListener("mouseup", end);
    svg.addEventListener("mouseleave", () => { start = null; rect.setAttribute("width", 0); });
  }

  // A legend entry shows or hides its series; the choice is kept for the tab's session.
  function legends() {
    document.querySelectorAll("figure.chart-box").forEach((fig) => {
      const chart = fig.dataset.chart;
      const key = `tandem.hidden.${chart}`;
      const hidden = new Set(JSON.parse(sessionStorage.getItem(key) || "[]"));
      const apply = () => {
        fig.querySelectorAll("g.series").forEach((g) => g.classList.toggle("hidden", hidden.has(g.dataset.series)));
        fig.querySelectorAll("button.toggle").forEach((b) => b.setAttribute("aria-pressed", String(!hidden.has(b.dataset.series))));
      };
      fig.querySelectorAll("button.toggle").forEach((b) =>
        b.addEventListener("click", () => {
          const s = b.dataset.series;
          hidden.has(s) ? hidden.delete(s) : hidden.add(s);
          sessionStorage.setItem(key, JSON.stringify([...hidden]));
          apply();
        })
      );
      apply();
    });
  }

  document.addEventListener("DOMContentLoaded", () => {
    relabel();
    absoluteForm();
    document.querySelectorAll("svg.chart").forEach(zoom);
    legends();
  });
})();
