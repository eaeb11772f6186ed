// tpuq dashboard: charts (Chart.js, vendored) and the live log tail (server-sent events).
// Everything is drawn from data the server put in the page; no request leaves this site.
"use strict";

function readJSON(id) {
  const el = document.getElementById(id);
  return el ? JSON.parse(el.textContent) : null;
}

function timeLabel(ms) {
  const d = new Date(ms);
  return d.toLocaleDateString([], {weekday: "short"}) + " " +
    d.toLocaleTimeString([], {hour: "2-digit", minute: "2-digit"});
}

function freeChart() {
  const data = readJSON("free-data"), canvas = document.getElementById("free-chart");
  if (!data || !canvas) return;
  new Chart(canvas, {
    type: "bar",
    data: {
      labels: data.map(k => k.type),
      datasets: [
        {label: "free", data: data.map(k => k.free), backgroundColor: "#3a9d5d"},
        {label: "used", data: data.map(k => k.used), backgroundColor: "#4a78c2"},
        {label: "out of service", data: data.map(k => k.out), backgroundColor: "#b9b9b9"},
      ],
    },
    options: {indexAxis: "y", animation: false, maintainAspectRatio: false,
      scales: {x: {stacked: true, ticks: {precision: 0}}, y: {stacked: true}}},
  });
}

function burnCharts() {
  const data = readJSON("burn-data");
  if (!data) return;
  document.querySelectorAll("canvas.burn-chart").forEach(canvas => {
    const team = data[canvas.dataset.team];
    if (!team) return;
    const points = team.series.map(p => ({x: p[0], y: p[1]}));
    new Chart(canvas, {
      type: "line",
      data: {datasets: [
        {label: "chip-hours left", data: points, borderColor: "#4a78c2", pointRadius: 0, tension: 0},
        {label: "budget", data: [{x: points[0].x, y: team.budget}, {x: team.resets, y: team.budget}],
         borderColor: "#b9b9b9", borderDash: [4, 4], pointRadius: 0},
      ]},
      options: {animation: false, parsing: false, scales: {
        x: {type: "linear", ticks: {callback: timeLabel, maxTicksLimit: 8}},
        y: {beginAtZero: true}}},
    });
  });
}

const COLOURS = {running: "#3a9d5d", succeeded: "#4a78c2", failed: "#c24a4a", timeout: "#c24a4a",
  cancelled: "#c2a14a", preempted: "#e08a2e", lost: "#e08a2e", requeued: "#9a6ac2",
  host_error: "#8a8a8a"};
const MARKS = {maintenance: "triangle", preemption: "circle", failure: "crossRot"};

function ganttChart() {
  const g = readJSON("gantt-data"), canvas = document.getElementById("gantt-chart");
  if (!g || !canvas) return;
  const bars = {label: "attempts", type: "bar", data: g.bars.map(b => ({x: [b.from, b.to], y: b.host, b})),
    backgroundColor: g.bars.map(b => COLOURS[b.outcome] || "#999"), barPercentage: 0.8,
    categoryPercentage: 1.0, grouped: false};
  const marks = Object.keys(MARKS).map(kind => ({
    label: kind, type: "scatter", pointStyle: MARKS[kind], pointRadius: 7, borderColor: "#222",
    backgroundColor: "#ffd34d",
    data: g.marks.filter(m => m.kind === kind).map(m => ({x: m.at, y: m.host, m}))}));
  new Chart(canvas, {
    data: {labels: g.hosts, datasets: [bars, ...marks]},
    options: {indexAxis: "y", animation: false, maintainAspectRatio: false,
      scales: {x: {type: "linear", min: g.from, max: g.to, ticks: {callback: timeLabel, maxTicksLimit: 8}},
               y: {type: "category", labels: g.hosts}},
      plugins: {legend: {labels: {filter: item => item.text !== "attempts"}},
        tooltip: {callbacks: {label: ctx => {
        const r = ctx.raw.b || ctx.raw.m;
        return r.outcome ? `job ${r.job} #${r.attempt} (${r.owner}): ${r.outcome}` : `${r.kind}: job ${r.job}`;
      }}}}},
  });
  canvas.dataset.drawn = "yes";
}

function logTail() {
  const pre = document.getElementById("log");
  if (!pre) return;
  const stateLine = document.getElementById("log-state");
  const source = new EventSource(pre.dataset.src);
  source.onmessage = ev => {
    const atBottom = pre.scrollTop + pre.clientHeight >= pre.scrollHeight - 4;
    pre.textContent += JSON.parse(ev.data);
    if (atBottom) pre.scrollTop = pre.scrollHeight;
  };
  source.addEventListener("end", ev => {
    stateLine.textContent = "ended: " + JSON.parse(ev.data);
    source.close();
  });
  source.onerror = () => { if (source.readyState === EventSource.CLOSED) stateLine.textContent = "output not available"; };
}

document.addEventListener("DOMContentLoaded", () => {
  for (const draw of [freeChart, burnCharts, ganttChart]) {
    try { draw(); } catch (e) { console.error(e); }
  }
  logTail();
});
