// The pool page's charts (uPlot), drawn from the page's own data: <script id="pool-data">.
// Nights are points in time (their ISO date); failing nights get a red marker series, the
// baseline and the pass threshold (tolerance x baseline) are flat lines.
(function () {
  "use strict";
  var el = document.getElementById("pool-data");
  if (!el || typeof uPlot === "undefined") { return; }
  var data = JSON.parse(el.textContent);
  var nights = data.nights || [];
  // uPlot wants ascending x: two runs on one date are a second apart
  var xs = nights.map(function (n, i) { return Date.parse(n.night) / 1000 + i; });
  function col(key) { return nights.map(function (n) { return n[key] == null ? null : n[key]; }); }
  function flat(v) { return nights.map(function () { return v == null ? null : v; }); }
  // a failing night's marker sits on its figure; a night that failed without one (it could not
  // finish) sits at 0 where the figure is a throughput, and is left out where it is a latency
  function failed(key, atZero) {
    return nights.map(function (n) {
      if (n.passed) { return null; }
      return n[key] == null ? (atZero ? 0 : null) : n[key];
    });
  }
  function width(id) { return Math.max(document.getElementById(id).clientWidth || 0, 480); }
  function line(label, stroke, dash) {
    // uPlot draws a line's points while there is room for them: a night or two still shows
    return { label: label, stroke: stroke, width: 1.5, dash: dash };
  }
  function marks(label) {
    return { label: label, stroke: "#c1121f", width: 0, paths: function () { return null; },
             points: { show: true, size: 9, fill: "#c1121f", stroke: "#c1121f" } };
  }
  function chart(id, title, unit, series, values) {
    var target = document.getElementById(id);
    if (!target || !nights.length) { return; }
    var opts = {
      title: title, width: width(id), height: 240,
      scales: { x: { time: true } },
      series: [{}].concat(series),
      axes: [{}, { label: unit, size: 60 }],
    };
    target.uplot = new uPlot(opts, [xs].concat(values), target);
  }
  chart("busbw-chart", "Bus bandwidth per night (large messages)", "GB/s", [
    line("busbw", "#1d3557"), line("baseline", "#555", [6, 4]),
    line("pass threshold", "#e76f51", [2, 3]), marks("failed night"),
  ], [col("busbw_gbps"), flat(data.baseline_gbps), flat(data.tolerance_gbps),
      failed("busbw_gbps", true)]);
  chart("latency-chart", "Small-message latency per night", "us", [
    line("latency", "#6a4c93"), marks("failed night"),
  ], [col("small_latency_us"), failed("small_latency_us", false)]);
  chart("lustre-chart", "Lustre throughput per night", "MB/s", [
    line("read", "#2a9d8f"), line("write", "#264653"),
    line("expected", "#555", [6, 4]),
  ], [col("read_mb_s"), col("write_mb_s"), flat(data.expected_mb_s)]);
})();
