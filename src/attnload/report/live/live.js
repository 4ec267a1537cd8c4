// attnload: live charts under the Locust "LLM" tab (TTFT p50/p99, ITL p50, output tok/s per model).
//
// Served by the master at ./attnload/live.js and injected into Locust's own page, so nothing
// is fetched from another origin. Locust 2.4x bundles its charting library (ECharts) inside its
// single module without exporting it, so it cannot be reused from outside; these charts are
// plain SVG drawn here (no second library), like the HTML report's. Points are kept in the
// page, as Locust's own Charts tab keeps its history: one point per poll while a test runs.
(function () {
  "use strict";
  var POLL_MS = 2000;
  var MAX_POINTS = 1800; // an hour at one point per 2 s; older points drop off
  var COLORS = { GQA: "#1f77b4", MLA: "#ff7f0e", MHA: "#2ca02c", MQA: "#9467bd" };
  var OTHER = "#7f7f7f";
  var CHARTS = [
    { key: "ttft_p50_ms", title: "TTFT p50 (ms)" },
    { key: "ttft_p99_ms", title: "TTFT p99 (ms)" },
    { key: "itl_p50_ms", title: "ITL p50 (ms)" },
    { key: "output_tok_s", title: "Output tokens/s" },
  ];
  var W = 560, H = 220, L = 56, R = 12, T = 26, B = 28;
  var SVG_NS = "http://www.w3.org/2000/svg";
  var series = {}; // model key -> {name, attention, points: [[t, {metric: value}]]}
  var marks = []; // [t, "stage label"]
  var lastStage = null;
  var container = null;

  function llmTabOpen() {
    var tab = new URLSearchParams(window.location.search).get("tab");
    if (tab === "llm") return true;
    var selected = document.querySelector('[role="tab"][aria-selected="true"]');
    return !!selected && /^\s*LLM\s*$/.test(selected.textContent || "");
  }

  function el(name, attrs, text) {
    var node = document.createElementNS(SVG_NS, name);
    Object.keys(attrs || {}).forEach(function (k) { node.setAttribute(k, attrs[k]); });
    if (text !== undefined) node.textContent = text;
    return node;
  }

  function color(attention) {
    return COLORS[String(attention || "").toUpperCase()] || OTHER;
  }

  function niceMax(value) {
    if (!(value > 0)) return 1;
    var p = Math.pow(10, Math.floor(Math.log10(value)));
    var steps = [1, 2, 2.5, 5, 10];
    for (var i = 0; i < steps.length; i++) if (steps[i] * p >= value) return steps[i] * p;
    return 10 * p;
  }

  function draw(chart, svg, t0, t1) {
    while (svg.firstChild) svg.removeChild(svg.firstChild);
    svg.appendChild(el("text", { x: L, y: 16, "font-size": 13, "font-weight": "bold", fill: "currentColor" },
      chart.title));
    var keys = Object.keys(series);
    var max = 0;
    keys.forEach(function (k) {
      series[k].points.forEach(function (p) { var v = p[1][chart.key]; if (v != null && v > max) max = v; });
    });
    var yMax = niceMax(max * 1.05);
    var span = Math.max(t1 - t0, 1);
    var x = function (t) { return L + (W - L - R) * (t - t0) / span; };
    var y = function (v) { return T + (H - T - B) * (1 - v / yMax); };
    for (var i = 0; i <= 4; i++) {
      var v = yMax * i / 4;
      svg.appendChild(el("line", { x1: L, x2: W - R, y1: y(v), y2: y(v), stroke: "#8884", "stroke-width": 1 }));
      svg.appendChild(el("text", { x: L - 6, y: y(v) + 4, "font-size": 10, "text-anchor": "end",
        fill: "currentColor" }, v >= 100 ? v.toFixed(0) : v.toPrecision(3)));
    }
    svg.appendChild(el("text", { x: W - R, y: 16, "font-size": 10, "text-anchor": "end", fill: "currentColor" },
      Math.round(span / 1000) + " s shown"));
    marks.forEach(function (m) {
      if (m[0] < t0) return;
      var g = el("g", { "class": "attnload-stage-mark", "data-stage": m[1] });
      g.appendChild(el("line", { x1: x(m[0]), x2: x(m[0]), y1: T, y2: H - B, stroke: "#888",
        "stroke-dasharray": "4 3" }));
      g.appendChild(el("text", { x: x(m[0]) + 3, y: T + 10, "font-size": 10, fill: "#888" }, m[1]));
      svg.appendChild(g);
    });
    var seen = {};
    keys.forEach(function (k, idx) {
      var s = series[k];
      var pts = s.points.filter(function (p) { return p[1][chart.key] != null; });
      var nth = seen[s.attention] = (seen[s.attention] || 0) + 1;
      var line = el("polyline", {
        "class": "attnload-live-series", "data-model": k, "data-attention": s.attention,
        "data-points": String(pts.length), fill: "none", stroke: color(s.attention), "stroke-width": 2,
        "stroke-dasharray": nth > 1 ? "6 3" : "none",
        points: pts.map(function (p) { return x(p[0]).toFixed(1) + "," + y(p[1][chart.key]).toFixed(1); }).join(" "),
      });
      line.appendChild(el("title", {}, s.name));
      svg.appendChild(line);
      var lx = L + 4 + 170 * (idx % 3), ly = H - B + 20 + 12 * Math.floor(idx / 3);
      svg.appendChild(el("rect", { x: lx, y: ly - 8, width: 14, height: 3, fill: color(s.attention) }));
      svg.appendChild(el("text", { x: lx + 18, y: ly - 4, "font-size": 10, fill: "currentColor" }, s.name));
    });
  }

  function anchor() {
    // Right under the LLM table when it is on the page; Locust's React tree keeps a node appended
    // after its own children, and when it remounts the tab the node is simply made again.
    var table = llmTabOpen() ? document.querySelector("#root table") : null;
    if (!table) return null;
    return table.closest(".MuiTableContainer-root, .MuiPaper-root") || table.parentElement;
  }

  function ensureContainer() {
    var after = anchor();
    if (container && document.body.contains(container) && (!after || container.previousSibling === after)) {
      return container;
    }
    if (container && container.parentNode) container.parentNode.removeChild(container);
    container = document.createElement("section");
    container.id = "attnload-live-charts";
    container.setAttribute("aria-label", "attnload live charts");
    container.style.cssText = "display:none;flex-wrap:wrap;gap:12px;padding:12px 24px;";
    CHARTS.forEach(function (chart) {
      var svg = el("svg", { viewBox: "0 0 " + W + " " + (H + 16), "class": "attnload-live-chart",
        "data-metric": chart.key, role: "img", "aria-label": chart.title });
      svg.style.cssText = "flex:1 1 520px;max-width:760px;";
      container.appendChild(svg);
    });
    if (after && after.parentNode) after.parentNode.insertBefore(container, after.nextSibling);
    else document.body.appendChild(container);
    return container;
  }

  function render() {
    var box = ensureContainer();
    box.style.display = llmTabOpen() ? "flex" : "none";
    if (box.style.display === "none") return;
    var now = Date.now(), t0 = now;
    Object.keys(series).forEach(function (k) { if (series[k].points.length) t0 = Math.min(t0, series[k].points[0][0]); });
    Array.prototype.forEach.call(box.querySelectorAll("svg.attnload-live-chart"), function (svg, i) {
      draw(CHARTS[i], svg, t0, now);
    });
  }

  function record(body) {
    if (!body || !body.running) return;
    var t = Date.now();
    var stageKey = (body.models || []).map(function (m) { return m.stage; }).join("|");
    if (lastStage !== null && stageKey !== lastStage && body.models.length) marks.push([t, body.models[0].stage]);
    lastStage = stageKey;
    (body.models || []).forEach(function (m) {
      var s = series[m.key] || (series[m.key] = { name: m.name, attention: m.attention, points: [] });
      var values = {};
      CHARTS.forEach(function (c) { values[c.key] = m[c.key]; });
      s.points.push([t, values]);
      if (s.points.length > MAX_POINTS) s.points.shift();
    });
  }

  function poll() {
    fetch("./attnload/live", { credentials: "same-origin" })
      .then(function (r) { return r.ok ? r.json() : null; })
      .then(function (body) { record(body); render(); })
      .catch(function () { render(); });
  }

  document.addEventListener("click", function () { window.setTimeout(render, 50); });
  window.addEventListener("popstate", render);
  window.setInterval(poll, POLL_MS);
  poll();
})();
