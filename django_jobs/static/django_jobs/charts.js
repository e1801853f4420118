/* django-jobs dashboard charts: the last hour, minute by minute, as inline SVG.

   Reads the JSON of the dashboard's timeseries view (django_jobs/timeseries.py)
   and redraws every few seconds without reloading the page. No library: bars
   and polylines in an SVG per chart, colours from admin.css (light and dark),
   and under each chart a table of the same numbers for screen readers and for
   anyone who would rather read them. */
(function () {
  "use strict";
  var SVG = "http://www.w3.org/2000/svg";
  var W = 640, H = 180, LEFT = 44, RIGHT = 8, TOP = 10, BOTTOM = 22;
  var CHARTS = [
    {key: "throughput", kind: "bars", unit: "",
     series: [["succeeded", "succeeded"], ["retried", "retried"], ["failed", "failed"], ["cancelled", "cancelled"]],
     values: function (d) { return d.throughput; }},
    {key: "failures", kind: "lines", unit: "",
     series: [["failed_attempts", "failed attempts"], ["failed_jobs", "jobs failed"]],
     values: function (d) {
       return {failed_attempts: d.throughput.retried.map(function (n, i) { return n + d.throughput.failed[i]; }),
               failed_jobs: d.failed_jobs};
     }},
    {key: "depth", kind: "lines", unit: "", series: [["depth", "due jobs waiting"]],
     values: function (d) { return {depth: d.depth}; }},
    /* Each latency is the upper bound of its histogram bucket (timeseries.LATENCY_BOUNDS). */
    {key: "latency", kind: "lines", unit: " s", bound: "≤ ", series: [["p50", "p50"], ["p95", "p95"], ["p99", "p99"]],
     values: function (d) { return d.latency; }}
  ];

  function el(name, attrs, parent, text) {
    var node = document.createElementNS(SVG, name);
    Object.keys(attrs).forEach(function (k) { node.setAttribute(k, attrs[k]); });
    if (text !== undefined) { node.textContent = text; }
    if (parent) { parent.appendChild(node); }
    return node;
  }

  function clock(iso) {
    var t = new Date(iso);
    return String(t.getHours()).padStart(2, "0") + ":" + String(t.getMinutes()).padStart(2, "0");
  }

  function number(v, unit, bound) {
    if (v === null || v === undefined) { return "–"; }
    var text = Math.abs(v) >= 100 ? String(Math.round(v)) : String(Number(v.toPrecision(2)));
    return (bound || "") + text + unit;
  }

  /* A ceiling a little above the highest value, on a 1-2-5 step. */
  function ceiling(max) {
    if (!(max > 0)) { return 1; }
    var step = Math.pow(10, Math.floor(Math.log10(max)));
    var nice = [1, 2, 5, 10].map(function (m) { return m * step; });
    return nice.find(function (n) { return n >= max; });
  }

  function axes(svg, top, minutes, unit) {
    var plotH = H - TOP - BOTTOM;
    [0, 0.5, 1].forEach(function (f) {
      var y = TOP + plotH * (1 - f);
      el("line", {x1: LEFT, x2: W - RIGHT, y1: y, y2: y, "class": "dj-grid"}, svg);
      el("text", {x: LEFT - 4, y: y + 4, "text-anchor": "end", "class": "dj-tick"}, svg, number(top * f, unit));
    });
    var step = (W - LEFT - RIGHT) / minutes.length;
    minutes.forEach(function (m, i) {
      if (i % 15 === 0 || i === minutes.length - 1) {
        var last = i === minutes.length - 1;
        el("text", {x: last ? W - RIGHT : LEFT + step * (i + 0.5), y: H - 6, "text-anchor": last ? "end" : "middle",
                    "class": "dj-tick"}, svg, clock(m));
      }
    });
  }

  function bars(svg, chart, values, minutes, top) {
    var plotH = H - TOP - BOTTOM, step = (W - LEFT - RIGHT) / minutes.length;
    minutes.forEach(function (m, i) {
      var g = el("g", {"class": "dj-bar", "data-minute": clock(m)}, svg);
      var y = TOP + plotH, parts = [], total = 0;
      chart.series.forEach(function (s) {
        var n = values[s[0]][i];
        total += n;
        if (n > 0) {
          var h = plotH * n / top;
          y -= h;
          el("rect", {x: LEFT + step * i + 1, y: y, width: Math.max(step - 2, 1), height: h,
                      "class": "dj-s-" + s[0], "data-series": s[0], "data-value": n}, g);
          parts.push(n + " " + s[1]);
        }
      });
      g.setAttribute("data-total", total);
      el("title", {}, g, clock(m) + ": " + (parts.join(", ") || "none"));
    });
  }

  function lines(svg, chart, values, minutes, top) {
    var plotH = H - TOP - BOTTOM, step = (W - LEFT - RIGHT) / minutes.length;
    chart.series.forEach(function (s) {
      var runs = [[]];
      values[s[0]].forEach(function (v, i) {
        if (v === null) { if (runs[runs.length - 1].length) { runs.push([]); } return; }
        runs[runs.length - 1].push((LEFT + step * (i + 0.5)).toFixed(1) + "," + (TOP + plotH * (1 - v / top)).toFixed(1));
      });
      runs.forEach(function (points) {
        if (!points.length) { return; }
        el("polyline", {points: points.join(" "), "class": "dj-line dj-s-" + s[0], "data-series": s[0]}, svg);
        if (points.length === 1) {  // a lone minute between gaps: a dot, or it would not show
          var xy = points[0].split(",");
          el("circle", {cx: xy[0], cy: xy[1], r: 2.5, "class": "dj-dot dj-s-" + s[0]}, svg);
        }
      });
    });
  }

  function latest(values, key) {
    var list = values[key];
    for (var i = list.length - 1; i >= 0; i--) { if (list[i] !== null) { return list[i]; } }
    return null;
  }

  function draw(figure, chart, data) {
    var values = chart.values(data), minutes = data.minutes;
    var max = 0;
    if (chart.kind === "bars") {
      minutes.forEach(function (_, i) {
        max = Math.max(max, chart.series.reduce(function (sum, s) { return sum + values[s[0]][i]; }, 0));
      });
    } else {
      chart.series.forEach(function (s) { values[s[0]].forEach(function (v) { if (v !== null) { max = Math.max(max, v); } }); });
    }
    var top = ceiling(max);
    var caption = figure.querySelector("figcaption");
    var summary = chart.series.map(function (s) {
      return s[1] + " " + number(chart.kind === "bars" ? values[s[0]][minutes.length - 1] : latest(values, s[0]),
                                 chart.unit, chart.bound);
    }).join(", ");
    var svg = el("svg", {viewBox: "0 0 " + W + " " + H, role: "img", "class": "dj-chart-svg",
                         "aria-labelledby": figure.id + "-title " + figure.id + "-desc"});
    el("title", {id: figure.id + "-title"}, svg, caption.textContent);
    el("desc", {id: figure.id + "-desc"}, svg, "Latest minute: " + summary + ".");
    axes(svg, top, minutes, chart.unit);
    (chart.kind === "bars" ? bars : lines)(svg, chart, values, minutes, top);
    var old = figure.querySelector("svg");
    if (old) { figure.replaceChild(svg, old); } else { figure.insertBefore(svg, caption.nextSibling); }
    figure.querySelector(".dj-now").textContent = summary;
    table(figure.querySelector("table"), chart, values, minutes);
  }

  function table(node, chart, values, minutes) {
    var head = "<thead><tr><th scope=\"col\">minute</th>" + chart.series.map(function (s) {
      return "<th scope=\"col\">" + s[1] + "</th>";
    }).join("") + "</tr></thead>";
    var rows = minutes.map(function (m, i) {
      return "<tr><th scope=\"row\">" + clock(m) + "</th>" + chart.series.map(function (s) {
        return "<td>" + number(values[s[0]][i], chart.unit, chart.bound) + "</td>";
      }).join("") + "</tr>";
    }).reverse();
    node.innerHTML = head + "<tbody>" + rows.join("") + "</tbody>";
  }

  function start(root) {
    var url = root.getAttribute("data-dj-timeseries");
    var every = 1000 * Number(root.getAttribute("data-dj-refresh") || 5);
    var status = root.querySelector(".dj-status");
    var timer = null, busy = false;
    function poll() {
      timer = null;
      busy = true;
      var began = Date.now();
      fetch(url, {credentials: "same-origin", headers: {Accept: "application/json"}})
        .then(function (r) {
          if (!r.ok) { throw new Error("the server answered " + r.status); }
          return r.json();
        })
        .then(function (data) {
          CHARTS.forEach(function (chart) {
            draw(root.querySelector("[data-chart=\"" + chart.key + "\"]"), chart, data);
          });
          root.setAttribute("data-updated", data.now);
          status.textContent = "Updated " + new Date(data.now).toLocaleTimeString() + ".";
          status.classList.remove("dj-bad");
        })
        .catch(function (error) {
          status.textContent = "Could not refresh: " + error.message + "; showing the last numbers.";
          status.classList.add("dj-bad");
        })
        .then(function () {
          busy = false;
          // A slow poll (a busy hour) waits four times as long as it took:
          // one open dashboard keeps the database busy a fifth of the time at most.
          var wait = Math.max(every, 4 * (Date.now() - began));
          if (!document.hidden) { timer = setTimeout(poll, wait); }
        });
    }
    document.addEventListener("visibilitychange", function () {
      if (!document.hidden && timer === null && !busy) { poll(); }
    });
    poll();
  }

  document.addEventListener("DOMContentLoaded", function () {
    document.querySelectorAll("[data-dj-timeseries]").forEach(start);
  });
})();
