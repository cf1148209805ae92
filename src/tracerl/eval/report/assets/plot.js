/* tracerl report plots: vanilla JS + SVG, no dependency, works from file:// offline.
 * Reads the JSON in <script id="report-data">; builds one figure per entry of data.figures into #plots.
 * Hover: a guide line and a tooltip with every visible series' value at the nearest step.
 * Zoom: drag across a panel to zoom its steps; double-click or "reset zoom" to go back.
 * Toggle: the run buttons in #run-toggles hide a run in every panel; a panel's legend entry hides that
 * series in the panel. Colour is by run when the page compares runs (dash pattern tells series apart),
 * by series for a single run. */
(function () {
  "use strict";
  var NS = "http://www.w3.org/2000/svg";
  var PALETTE = ["#1f77b4", "#d62728", "#2ca02c", "#ff7f0e", "#9467bd", "#8c564b", "#e377c2", "#17becf",
                 "#bcbd22", "#7f7f7f"];
  var DASHES = ["", "7 3", "2 3", "9 3 2 3", "1 3", "12 4", "4 2 1 2"];
  var W = 540, H = 270, M = {l: 58, r: 14, t: 12, b: 34};
  var PW = W - M.l - M.r, PH = H - M.t - M.b;
  var hiddenRuns = {};
  var panels = [];

  function el(tag, attrs, parent, html) {
    var isSvg = ["svg", "g", "path", "line", "rect", "circle", "text", "defs", "clipPath"].indexOf(tag) >= 0;
    var e = isSvg ? document.createElementNS(NS, tag) : document.createElement(tag);
    for (var k in attrs || {}) { if (attrs[k] !== null && attrs[k] !== undefined) e.setAttribute(k, attrs[k]); }
    if (html !== undefined) e.textContent = html;
    if (parent) parent.appendChild(e);
    return e;
  }

  function fmt(v) {
    if (v === null || v === undefined || isNaN(v)) return "–";
    var a = Math.abs(v);
    if (a !== 0 && (a < 1e-3 || a >= 1e5)) return v.toExponential(2);
    return String(Math.round(v * 1e4) / 1e4);
  }

  function ticks(lo, hi, n, integer) {
    if (!(hi > lo)) return isFinite(lo) ? [lo] : [];
    var span = hi - lo, step = Math.pow(10, Math.floor(Math.log10(span / n)));
    [1, 2, 5, 10].some(function (m) { if (span / (step * m) <= n) { step *= m; return true; } return false; });
    if (integer) step = Math.max(1, Math.round(step));
    var out = [];
    for (var t = Math.ceil(lo / step) * step; t <= hi + step * 1e-9; t += step) out.push(Math.round(t * 1e9) / 1e9);
    return out;
  }

  function Panel(host, spec, data) {
    this.spec = spec; this.data = data; this.zoom = null; this.hiddenKeys = {};
    this.byRun = data.colorBy === "run";
    var keys = [];
    spec.series.forEach(function (s) { if (keys.indexOf(s.label) < 0) keys.push(s.label); });
    this.keys = keys;
    var box = el("div", {"class": "tr-panel"}, host);
    var head = el("div", {"class": "tr-panel-head"}, box);
    el("span", {"class": "tr-ylabel"}, head, spec.ylabel);
    this.resetBtn = el("button", {"class": "tr-reset", type: "button", hidden: ""}, head, "reset zoom");
    this.svg = el("svg", {"class": "tr-plot", viewBox: "0 0 " + W + " " + H, width: W, height: H,
                          "data-panel": spec.ylabel}, box);
    this.grid = el("g", {"class": "tr-grid"}, this.svg);
    this.plot = el("g", {"class": "tr-series-layer", transform: "translate(" + M.l + "," + M.t + ")"}, this.svg);
    this.guide = el("line", {"class": "tr-guide", y1: M.t, y2: M.t + PH, visibility: "hidden"}, this.svg);
    this.band = el("rect", {"class": "tr-band", y: M.t, height: PH, width: 0, visibility: "hidden"}, this.svg);
    this.overlay = el("rect", {"class": "tr-overlay", x: M.l, y: M.t, width: PW, height: PH}, this.svg);
    this.tip = el("div", {"class": "tr-tip", role: "tooltip"}, box);
    this.legend = el("div", {"class": "tr-legend"}, box);
    this.buildLegend();
    this.bind();
    this.draw();
  }

  Panel.prototype.color = function (s) {
    return this.byRun ? this.data.runs[s.run].color : PALETTE[this.keys.indexOf(s.label) % PALETTE.length];
  };
  Panel.prototype.dash = function (s) {
    return this.byRun ? DASHES[this.keys.indexOf(s.label) % DASHES.length] : "";
  };
  Panel.prototype.visible = function (s) { return !hiddenRuns[s.run] && !this.hiddenKeys[s.label]; };

  Panel.prototype.buildLegend = function () {
    var self = this;
    this.keys.forEach(function (key) {
      var s = self.spec.series.filter(function (x) { return x.label === key; })[0];
      var item = el("button", {"class": "tr-key", type: "button", "data-key": key, "aria-pressed": "true"}, self.legend);
      var sw = el("svg", {width: 26, height: 10}, item);
      el("line", {x1: 1, x2: 25, y1: 5, y2: 5, stroke: self.byRun ? "#333" : self.color(s), "stroke-width": 2,
                  "stroke-dasharray": self.dash(s)}, sw);
      el("span", {}, item, key);
      item.addEventListener("click", function () {
        self.hiddenKeys[key] = !self.hiddenKeys[key];
        item.setAttribute("aria-pressed", self.hiddenKeys[key] ? "false" : "true");
        self.draw();
      });
    });
  };

  Panel.prototype.extent = function () {
    var self = this, xs = [], ys = [], shown = this.spec.series.filter(function (s) { return self.visible(s); });
    this.spec.series.forEach(function (s) { s.pts.forEach(function (p) { xs.push(p[0]); }); });
    var x0 = this.zoom ? this.zoom[0] : Math.min.apply(null, xs), x1 = this.zoom ? this.zoom[1] : Math.max.apply(null, xs);
    if (this.spec.stacked) {
      var sums = {};
      shown.forEach(function (s) { s.pts.forEach(function (p) { sums[p[0]] = (sums[p[0]] || 0) + p[1]; }); });
      for (var k in sums) { if (+k >= x0 && +k <= x1) ys.push(sums[k]); }
      ys.push(0);
    } else {
      shown.forEach(function (s) {
        (s.raw || s.pts).concat(s.pts).forEach(function (p) { if (p[0] >= x0 && p[0] <= x1) ys.push(p[1]); });
      });
    }
    var y0 = ys.length ? Math.min.apply(null, ys) : 0, y1 = ys.length ? Math.max.apply(null, ys) : 1;
    if (y1 - y0 < 1e-12) { var pad = Math.abs(y0) * 0.1 || 0.5; y0 -= pad; y1 += pad; }
    else { var m = (y1 - y0) * 0.06; y0 -= this.spec.stacked ? 0 : m; y1 += m; }
    if (x1 - x0 < 1e-12) { x0 -= 0.5; x1 += 0.5; }
    if (this.spec.stacked) { x0 -= 0.5; x1 += 0.5; }
    return {x0: x0, x1: x1, y0: y0, y1: y1};
  };

  Panel.prototype.draw = function () {
    var self = this, e = this.extent();
    this.e = e;
    var sx = function (x) { return (x - e.x0) / (e.x1 - e.x0) * PW; };
    var sy = function (y) { return PH - (y - e.y0) / (e.y1 - e.y0) * PH; };
    this.sx = sx;
    while (this.grid.firstChild) this.grid.removeChild(this.grid.firstChild);
    while (this.plot.firstChild) this.plot.removeChild(this.plot.firstChild);
    ticks(e.y0, e.y1, 5, false).forEach(function (t) {
      var y = M.t + sy(t);
      el("line", {x1: M.l, x2: M.l + PW, y1: y, y2: y, "class": "tr-gridline"}, self.grid);
      el("text", {x: M.l - 6, y: y + 4, "text-anchor": "end", "class": "tr-tick"}, self.grid, fmt(t));
    });
    ticks(Math.ceil(e.x0), Math.floor(e.x1), 8, true).forEach(function (t) {
      var x = M.l + sx(t);
      el("line", {x1: x, x2: x, y1: M.t + PH, y2: M.t + PH + 4, "class": "tr-axis"}, self.grid);
      el("text", {x: x, y: M.t + PH + 16, "text-anchor": "middle", "class": "tr-tick"}, self.grid, String(t));
    });
    el("rect", {x: M.l, y: M.t, width: PW, height: PH, "class": "tr-frame"}, this.grid);
    el("text", {x: M.l + PW / 2, y: H - 3, "text-anchor": "middle", "class": "tr-xlabel"}, this.grid, "step");
    var clip = "tr-clip-" + panels.length + "-" + Math.random().toString(36).slice(2, 8);
    var defs = el("defs", {}, this.plot);
    el("rect", {x: 0, y: 0, width: PW, height: PH}, el("clipPath", {id: clip}, defs));
    var layer = el("g", {"clip-path": "url(#" + clip + ")"}, this.plot);
    var base = {};
    var barW = this.spec.stacked ? Math.max(2, PW / (e.x1 - e.x0) * 0.8) : 0;
    this.spec.series.forEach(function (s, i) {
      var g = el("g", {"class": "tr-series", "data-run": self.data.runs[s.run].name, "data-key": s.label}, layer);
      if (!self.visible(s)) { g.style.display = "none"; return; }
      var color = self.color(s);
      if (self.spec.stacked) {
        s.pts.forEach(function (p) {
          var b = base[p[0]] || 0;
          el("rect", {x: sx(p[0]) - barW / 2, width: barW, y: sy(b + p[1]), height: Math.max(0, sy(b) - sy(b + p[1])),
                      fill: color, "class": "tr-bar"}, g);
          base[p[0]] = b + p[1];
        });
        return;
      }
      var line = function (pts) {
        return pts.map(function (p, j) { return (j ? "L" : "M") + sx(p[0]).toFixed(1) + "," + sy(p[1]).toFixed(1); }).join("");
      };
      if (s.raw) el("path", {d: line(s.raw), stroke: color, "stroke-opacity": 0.25, fill: "none", "stroke-width": 1.2}, g);
      el("path", {d: line(s.pts), stroke: color, fill: "none", "stroke-width": 1.8, "stroke-dasharray": self.dash(s),
                  "class": "tr-line"}, g);
      if (s.pts.length < 40) {
        s.pts.forEach(function (p) { el("circle", {cx: sx(p[0]), cy: sy(p[1]), r: 2.6, fill: color, "class": "tr-dot"}, g); });
      }
    });
    if (this.zoom) this.resetBtn.removeAttribute("hidden"); else this.resetBtn.setAttribute("hidden", "");
  };

  Panel.prototype.dataX = function (evt) {
    var r = this.svg.getBoundingClientRect(), px = (evt.clientX - r.left) * W / r.width - M.l;
    return {px: Math.max(0, Math.min(PW, px)), x: this.e.x0 + Math.max(0, Math.min(PW, px)) / PW * (this.e.x1 - this.e.x0)};
  };

  Panel.prototype.hover = function (evt) {
    var self = this, at = this.dataX(evt), best = null;
    var shown = this.spec.series.filter(function (s) { return self.visible(s); });
    shown.forEach(function (s) {
      s.pts.forEach(function (p) {
        if (p[0] >= self.e.x0 && p[0] <= self.e.x1 && (best === null || Math.abs(p[0] - at.x) < Math.abs(best - at.x))) best = p[0];
      });
    });
    if (best === null) { this.leave(); return; }
    var gx = M.l + this.sx(best);
    this.guide.setAttribute("x1", gx); this.guide.setAttribute("x2", gx); this.guide.setAttribute("visibility", "visible");
    while (this.tip.firstChild) this.tip.removeChild(this.tip.firstChild);
    el("div", {"class": "tr-tip-step"}, this.tip, "step " + best);
    shown.forEach(function (s) {
      var p = s.pts.filter(function (q) { return q[0] === best; })[0];
      if (!p) return;
      var row = el("div", {"class": "tr-tip-row"}, self.tip);
      el("span", {"class": "tr-swatch", style: "background:" + self.color(s)}, row);
      var who = self.data.runs.length > 1 ? self.data.runs[s.run].name + ": " : "";
      el("span", {}, row, who + s.label + " ");
      el("b", {}, row, fmt(p[1]));
    });
    var r = this.svg.getBoundingClientRect(), left = gx * r.width / W + 12;
    this.tip.style.left = (left > r.width * 0.55 ? Math.max(0, left - this.tip.offsetWidth - 24) : left) + "px";
    this.tip.style.top = "34px";
    this.tip.classList.add("tr-show");
  };

  Panel.prototype.leave = function () {
    this.guide.setAttribute("visibility", "hidden");
    this.tip.classList.remove("tr-show");
  };

  Panel.prototype.bind = function () {
    var self = this, start = null;
    this.overlay.addEventListener("mousemove", function (evt) {
      self.hover(evt);
      if (start !== null) {
        var px = self.dataX(evt).px;
        self.band.setAttribute("x", M.l + Math.min(start.px, px));
        self.band.setAttribute("width", Math.abs(px - start.px));
        self.band.setAttribute("visibility", "visible");
      }
    });
    this.overlay.addEventListener("mouseleave", function () { self.leave(); });
    this.overlay.addEventListener("mousedown", function (evt) { evt.preventDefault(); start = self.dataX(evt); });
    window.addEventListener("mouseup", function (evt) {
      if (start === null) return;
      var end = self.dataX(evt), a = start;
      start = null;
      self.band.setAttribute("visibility", "hidden");
      if (Math.abs(end.px - a.px) > 6) { self.zoom = [Math.min(a.x, end.x), Math.max(a.x, end.x)]; self.draw(); }
    });
    this.overlay.addEventListener("dblclick", function () { self.zoom = null; self.draw(); });
    this.resetBtn.addEventListener("click", function () { self.zoom = null; self.draw(); });
  };

  function runToggles(data) {
    var bar = document.getElementById("run-toggles");
    if (!bar) return;
    el("span", {"class": "tr-runs-label"}, bar, data.runs.length > 1 ? "runs (click to hide / show):" : "run:");
    data.runs.forEach(function (run, i) {
      var b = el("button", {"class": "tr-run", type: "button", "data-run": run.name, "aria-pressed": "true"}, bar);
      el("span", {"class": "tr-swatch", style: "background:" + (data.colorBy === "run" ? run.color : "#555")}, b);
      el("span", {}, b, run.name);
      b.addEventListener("click", function () {
        hiddenRuns[i] = !hiddenRuns[i];
        b.setAttribute("aria-pressed", hiddenRuns[i] ? "false" : "true");
        panels.forEach(function (p) { p.draw(); });
      });
    });
  }

  function build() {
    var node = document.getElementById("report-data"), host = document.getElementById("plots");
    if (!node || !host) return;
    var data = JSON.parse(node.textContent);
    runToggles(data);
    data.figures.forEach(function (fig) {
      var f = el("div", {"class": "tr-fig", id: "fig-" + fig.id}, host);
      el("h3", {}, f, fig.title);
      var row = el("div", {"class": "tr-panels"}, f);
      fig.panels.forEach(function (spec) { panels.push(new Panel(row, spec, data)); });
      el("div", {"class": "cap"}, f, fig.caption);
    });
    document.body.setAttribute("data-plots-ready", String(panels.length));
  }

  if (document.readyState === "loading") document.addEventListener("DOMContentLoaded", build); else build();
})();
