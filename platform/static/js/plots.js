/* The console's plots: reads a page's series (JSON from the control plane's fixed Prometheus queries) and draws
   them with uPlot, served from our own static files. One <section data-series-url> per page; a range picker and
   auto-refresh. When the series cannot be read the section says why and the rest of the page is untouched. */
(function () {
  "use strict";
  var COLORS = ["#2f6fde", "#1f9d55", "#d97706", "#c0392b", "#7c3aed"];
  var REFRESH_MS = 30000;
  var TOTALS = [["published", "Published"], ["delivered", "Delivered"], ["acked", "Acked"],
                ["redelivered", "Redelivered"], ["dead_lettered", "Dead-lettered"]];

  function fmt(value) {
    if (value == null) return "—";
    if (Math.abs(value) >= 100) return Math.round(value).toLocaleString();
    return (Math.round(value * 100) / 100).toString();
  }

  function init(section) {
    var url = section.getAttribute("data-series-url");
    var select = section.querySelector("[data-testid=plot-range]");
    var refresh = section.querySelector("[data-testid=plot-refresh]");
    var error = section.querySelector("[data-testid=plot-error]");
    var grid = section.querySelector("[data-testid=plot-panels]");
    var totalsCard = section.querySelector("[data-testid=plot-totals-card]");
    var totals = section.querySelector("[data-testid=plot-totals]");
    var updated = section.querySelector("[data-testid=plot-updated]");
    var plots = [];
    var seq = 0;

    function clear() {
      plots.forEach(function (p) { p.destroy(); });
      plots = [];
      grid.textContent = "";
    }

    function fail(message) {
      clear();
      totalsCard.hidden = true;
      error.textContent = "No plots: " + message + " The rest of this page does not depend on it.";
      error.hidden = false;
      section.setAttribute("data-state", "error");
    }

    function draw(data) {
      clear();
      error.hidden = true;
      data.panels.forEach(function (panel) {
        var box = document.createElement("div");
        box.className = "card plot-panel";
        box.setAttribute("data-panel", panel.id);
        var title = document.createElement("h3");
        title.textContent = panel.title + " (" + panel.unit + ")";
        box.appendChild(title);
        grid.appendChild(box);
        var width = Math.max(260, box.clientWidth - 40);
        var series = [{}].concat(panel.series.map(function (s, i) {
          return {label: s.name, stroke: COLORS[i % COLORS.length], width: 2, spanGaps: false,
                  value: function (u, v) { return fmt(v); }};
        }));
        var opts = {width: width, height: 180, series: series, scales: {x: {time: true}},
                    axes: [{}, {size: 60, values: function (u, vals) { return vals.map(fmt); }}]};
        plots.push(new uPlot(opts, [data.times].concat(panel.series.map(function (s) { return s.values; })), box));
      });
      totals.textContent = "";
      TOTALS.forEach(function (t) {
        var dt = document.createElement("dt"), dd = document.createElement("dd");
        dt.textContent = t[1];
        dd.textContent = fmt(data.totals[t[0]]) + " (about " + fmt(data.in_range[t[0]]) + " in this range)";
        dd.setAttribute("data-total", t[0]);
        totals.appendChild(dt);
        totals.appendChild(dd);
      });
      totalsCard.hidden = false;
      updated.textContent = "updated " + new Date().toLocaleTimeString();
      section.setAttribute("data-range", data.range);
      section.setAttribute("data-state", "drawn");
    }

    function load() {
      var mine = ++seq;  // a slow answer for an older range never overwrites a newer one
      section.setAttribute("data-state", "loading");
      fetch(url + "?range=" + encodeURIComponent(select.value),
            {credentials: "same-origin", headers: {Accept: "application/json"}})
        .then(function (response) {
          return response.json().then(function (body) { return {ok: response.ok, body: body}; },
                                      function () { return {ok: false, body: {message: "the control plane answered " + response.status + "."}}; });
        })
        .then(function (answer) {
          if (mine !== seq) return;
          if (!answer.ok) { fail(answer.body.message || "the series could not be read."); return; }
          draw(answer.body);
        }, function (err) { if (mine === seq) fail("the control plane did not answer (" + err.message + ")."); });
    }

    select.addEventListener("change", load);
    setInterval(function () { if (refresh.checked && !document.hidden) load(); }, REFRESH_MS);
    load();
  }

  document.querySelectorAll("section[data-series-url]").forEach(init);
})();
