// Small canvas charts (no libraries): lines over time, scatter, grouped bars.
'use strict';

const chartColors = ['#2563eb', '#d98e04', '#1e8e3e', '#c0392b', '#7c3aed', '#0891b2'];

// Grid, labels and text in the page's colours (app.css's variables), so dark mode's charts read too.
function chartTheme() {
  const css = getComputedStyle(document.documentElement);
  const v = (name, dflt) => css.getPropertyValue(name).trim() || dflt;
  return {line: v('--line', '#e2e2de'), muted: v('--muted', '#6b6f76'), ink: v('--ink', '#1d1f21')};
}

// Every chart's last drawing, drawn again when the window's width or the colour scheme changes
// (a chart on a hidden page has no width: it is drawn when its page shows and its data arrives).
const drawn = new Map();
function redrawCharts() {
  for (const [canvas, draw] of drawn) if (canvas.isConnected && canvas.clientWidth) draw();
}
let redrawTimer = null;
window.addEventListener('resize', () => { clearTimeout(redrawTimer); redrawTimer = setTimeout(redrawCharts, 100); });
window.matchMedia('(prefers-color-scheme: dark)').addEventListener('change', redrawCharts);

function niceMax(v) {
  if (!(v > 0)) return 1;
  const p = Math.pow(10, Math.floor(Math.log10(v)));
  for (const m of [1, 2, 2.5, 5, 10]) if (m * p >= v) return m * p;
  return 10 * p;
}

// A chart is as wide as its column (app.css) and as tall as its height attribute says. Its backing
// store follows the width it is laid out at: sizing the layout from the backing store instead kept a
// chart drawn at phone width (370 px) that narrow after the window grew.
function setupCanvas(canvas) {
  const dpr = window.devicePixelRatio || 1;
  if (!canvas.dataset.height) {
    canvas.dataset.height = canvas.getAttribute('height') || '200';
    canvas.style.height = canvas.dataset.height + 'px';
  }
  const w = canvas.clientWidth || canvas.width, h = Number(canvas.dataset.height);
  if (canvas.width !== Math.round(w * dpr) || canvas.height !== Math.round(h * dpr)) {
    canvas.width = Math.round(w * dpr);
    canvas.height = Math.round(h * dpr);
  }
  const ctx = canvas.getContext('2d');
  ctx.setTransform(dpr, 0, 0, dpr, 0, 0);
  ctx.clearRect(0, 0, w, h);
  ctx.font = '11px system-ui, sans-serif';
  return {ctx, w, h};
}

function drawAxes(ctx, box, xmax, ymax, xfmt, yfmt, xlabel) {
  const theme = chartTheme();
  ctx.strokeStyle = theme.line;
  ctx.fillStyle = theme.muted;
  ctx.lineWidth = 1;
  for (let i = 0; i <= 4; i++) {
    const y = box.y + box.h - (box.h * i) / 4;
    ctx.beginPath(); ctx.moveTo(box.x, y); ctx.lineTo(box.x + box.w, y); ctx.stroke();
    ctx.textAlign = 'right'; ctx.textBaseline = 'middle';
    ctx.fillText(yfmt((ymax * i) / 4), box.x - 4, y);
  }
  ctx.textAlign = 'center'; ctx.textBaseline = 'top';
  for (let i = 0; i <= 4; i++) ctx.fillText(xfmt((xmax * i) / 4), box.x + (box.w * i) / 4, box.y + box.h + 4);
  if (xlabel) { ctx.textAlign = 'right'; ctx.fillText(xlabel, box.x + box.w, box.y + box.h + 16); }
}

function legend(ctx, series, x, y) {
  ctx.textAlign = 'left'; ctx.textBaseline = 'middle';
  const ink = chartTheme().ink;
  series.forEach((s, i) => {
    ctx.fillStyle = s.color || chartColors[i % chartColors.length];
    ctx.fillRect(x, y + i * 14 - 4, 10, 8);
    ctx.fillStyle = ink;
    ctx.fillText(s.name, x + 14, y + i * 14);
  });
}

// series: [{name, points: [[x, y]...], color, labels}]; opts: {yfmt, xfmt, xlabel, scatter}.
// labels (one per point) draws each point with its label beside it (a sweep's levels).
function lineChart(canvas, series, opts = {}) {
  drawn.set(canvas, () => lineChart(canvas, series, opts));
  const {ctx, w, h} = setupCanvas(canvas);
  const box = {x: 56, y: 12, w: w - 70, h: h - 44};
  let xmax = opts.xmax || 0, ymax = opts.ymax || 0;
  for (const s of series) for (const [x, y] of s.points) { xmax = Math.max(xmax, x); ymax = Math.max(ymax, y); }
  xmax = xmax || 1; ymax = niceMax(ymax);
  const yfmt = opts.yfmt || (v => (v >= 100 ? v.toFixed(0) : v.toFixed(1)));
  const xfmt = opts.xfmt || (v => (xmax < 10 ? v.toFixed(1) : v.toFixed(0)));
  drawAxes(ctx, box, xmax, ymax, xfmt, yfmt, opts.xlabel);
  series.forEach((s, i) => {
    const color = s.color || chartColors[i % chartColors.length];
    ctx.strokeStyle = color; ctx.fillStyle = color; ctx.lineWidth = 2;
    const px = x => box.x + (box.w * x) / xmax, py = y => box.y + box.h - (box.h * y) / ymax;
    if (opts.scatter || s.scatter) {
      for (const [x, y] of s.points) { ctx.beginPath(); ctx.arc(px(x), py(y), 2.5, 0, 2 * Math.PI); ctx.fill(); }
    } else {
      ctx.beginPath();
      s.points.forEach(([x, y], j) => (j ? ctx.lineTo(px(x), py(y)) : ctx.moveTo(px(x), py(y))));
      ctx.stroke();
    }
    if (s.labels) {
      ctx.textBaseline = 'bottom';
      s.points.forEach(([x, y], j) => {
        ctx.beginPath(); ctx.arc(px(x), py(y), 3, 0, 2 * Math.PI); ctx.fill();
        // Right of the point, or left of it where the label would leave the plot.
        const right = px(x) + 4 + ctx.measureText(s.labels[j]).width <= box.x + box.w;
        ctx.textAlign = right ? 'left' : 'right';
        ctx.fillText(s.labels[j], px(x) + (right ? 4 : -4), py(y) - 2);
      });
    }
  });
  legend(ctx, series, box.x + 8, box.y + 8);
  if (!series.some(s => s.points.length)) {
    ctx.fillStyle = chartTheme().muted; ctx.textAlign = 'center'; ctx.fillText('no data yet', box.x + box.w / 2, box.y + box.h / 2);
  }
}

// labels: [..]; series: [{name, values: [..]}]
function barChart(canvas, labels, series, opts = {}) {
  drawn.set(canvas, () => barChart(canvas, labels, series, opts));
  const {ctx, w, h} = setupCanvas(canvas);
  const box = {x: 56, y: 12, w: w - 70, h: h - 44};
  let ymax = 0;
  for (const s of series) for (const v of s.values) ymax = Math.max(ymax, v);
  ymax = niceMax(ymax);
  const yfmt = opts.yfmt || (v => v.toFixed(0));
  drawAxes(ctx, box, 0, ymax, () => '', yfmt);
  const group = box.w / Math.max(1, labels.length), bw = (group * 0.7) / Math.max(1, series.length);
  labels.forEach((lab, i) => {
    series.forEach((s, k) => {
      const v = s.values[i] || 0, bh = (box.h * v) / ymax;
      ctx.fillStyle = s.color || chartColors[k % chartColors.length];
      ctx.fillRect(box.x + group * i + group * 0.15 + bw * k, box.y + box.h - bh, bw - 2, bh);
    });
    ctx.fillStyle = chartTheme().muted; ctx.textAlign = 'center'; ctx.textBaseline = 'top';
    ctx.fillText(lab, box.x + group * i + group / 2, box.y + box.h + 4);
  });
  legend(ctx, series, box.x + 8, box.y + 8);
}
