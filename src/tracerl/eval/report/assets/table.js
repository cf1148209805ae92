/* tracerl report: filters of the sample-episode table (#samples) by run, environment, terminal reason
 * and reward range. Each row carries data-run, data-env, data-ending and data-reward. */
(function () {
  "use strict";
  function build() {
    var table = document.getElementById("samples");
    if (!table) return;
    var rows = Array.prototype.slice.call(table.querySelectorAll("tbody tr"));
    var get = function (id) { return document.getElementById(id); };
    var count = get("f-count");
    function num(id) { var v = get(id) && get(id).value; return v === "" || v === undefined ? null : parseFloat(v); }
    function pick(id) { return get(id) ? get(id).value : ""; }
    function apply() {
      var run = pick("f-run"), env = pick("f-env"), ending = pick("f-ending"), lo = num("f-rmin"), hi = num("f-rmax");
      var shown = 0;
      rows.forEach(function (r) {
        var reward = parseFloat(r.getAttribute("data-reward"));
        var ok = (!run || r.getAttribute("data-run") === run) && (!env || r.getAttribute("data-env") === env) &&
                 (!ending || r.getAttribute("data-ending") === ending) &&
                 (lo === null || isNaN(lo) || reward >= lo) && (hi === null || isNaN(hi) || reward <= hi);
        r.style.display = ok ? "" : "none";
        if (ok) shown += 1;
      });
      if (count) count.textContent = shown + " of " + rows.length + " episodes";
    }
    ["f-run", "f-env", "f-ending", "f-rmin", "f-rmax"].forEach(function (id) {
      if (get(id)) { get(id).addEventListener("input", apply); get(id).addEventListener("change", apply); }
    });
    var reset = get("f-reset");
    if (reset) reset.addEventListener("click", function () {
      ["f-run", "f-env", "f-ending", "f-rmin", "f-rmax"].forEach(function (id) { if (get(id)) get(id).value = ""; });
      apply();
    });
    apply();
  }
  if (document.readyState === "loading") document.addEventListener("DOMContentLoaded", build); else build();
})();
