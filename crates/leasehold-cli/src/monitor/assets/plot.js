// The history plot: partitions held per node over the last ten minutes.

import { C, HISTORY_MS, nameIndex, naturalCompare, nodeColours, S } from './state.js';
import { $, plot } from './dom.js';
import { L } from './canvas.js';

export function renderPlot() {
  const dpr = L.dpr || 1;
  const cssW = plot.clientWidth;
  const cssH = plot.clientHeight;
  if (!cssW || !cssH) return;
  if (plot.width !== Math.round(cssW * dpr) || plot.height !== Math.round(cssH * dpr)) {
    plot.width = Math.round(cssW * dpr);
    plot.height = Math.round(cssH * dpr);
  }
  const g = plot.getContext('2d');
  g.setTransform(dpr, 0, 0, dpr, 0, 0);
  g.clearRect(0, 0, cssW, cssH);
  const now = S.readAt + (Date.now() - S.receivedAt);
  // A young monitor has little history: the window grows with it up to ten minutes, so
  // the first minutes are not squeezed against the right edge.
  const first = S.history.length ? S.history[0].t : now;
  const span = Math.min(HISTORY_MS, Math.max(60000, now - first));
  const from = now - span;
  const inMinutes = span >= 120000;
  const spanText = (ms) => (inMinutes ? `${+(ms / 60000).toFixed(1)} min` : `${Math.round(ms / 1000)} s`);
  $('plot-caption').textContent = `last ${spanText(span)}`;
  g.font = '11px system-ui, sans-serif';
  const right = 8;
  const top = 8;
  const bottom = 20;
  const ph = cssH - top - bottom;
  const hist = S.history.filter((h, i, a) => h.t >= from || (a[i + 1] && a[i + 1].t >= from));
  let max = 1;
  const series = new Set();
  for (const h of hist) {
    for (const [node, v] of Object.entries(h.held)) {
      series.add(node);
      if (v > max) max = v;
    }
  }
  const step = niceStep(max / 4);
  const top_ = Math.ceil(max / step) * step;
  const left = Math.ceil(g.measureText(top_.toLocaleString()).width) + 12;
  const pw = cssW - left - right;
  const X = (t) => left + ((Math.max(t, from) - from) / span) * pw;
  const Y = (v) => top + ph - (v / top_) * ph;

  g.lineWidth = 1;
  g.strokeStyle = C.line;
  g.fillStyle = C.muted;
  g.textAlign = 'right';
  g.textBaseline = 'middle';
  for (let v = 0; v <= top_ + 1e-9; v += step) {
    const y = Math.round(Y(v)) + 0.5;
    g.beginPath();
    g.moveTo(left, y);
    g.lineTo(left + pw, y);
    g.stroke();
    g.fillText(v.toLocaleString(), left - 6, y);
  }
  g.textAlign = 'center';
  g.textBaseline = 'alphabetic';
  for (const [at, align, label] of [[0, 'left', `−${spanText(span)}`], [0.5, 'center', `−${spanText(span / 2)}`], [1, 'right', 'now']]) {
    g.textAlign = align;
    g.fillText(label, left + at * pw, cssH - 5);
  }
  if (!series.size) {
    g.textAlign = 'center';
    g.textBaseline = 'middle';
    g.fillText('No partitions held in this window', left + pw / 2, top + ph / 2);
    return;
  }
  g.lineWidth = 1.75;
  g.lineJoin = 'round';
  for (const node of [...series].sort(naturalCompare)) {
    const i = nameIndex.get(node);
    g.strokeStyle = i === undefined ? C.muted : nodeColours[i].css;
    g.beginPath();
    // Counts are steps: each holds until the next sample.
    let prev = null;
    for (const h of hist) {
      const v = h.held[node] || 0;
      const x = X(h.t);
      if (prev === null) g.moveTo(x, Y(v));
      else {
        g.lineTo(x, Y(prev));
        g.lineTo(x, Y(v));
      }
      prev = v;
    }
    g.lineTo(left + pw, Y(prev));
    g.stroke();
  }
}

function niceStep(raw) {
  const p = Math.pow(10, Math.floor(Math.log10(Math.max(raw, 1))));
  for (const m of [1, 2, 5, 10]) if (m * p >= raw) return m * p;
  return 10 * p;
}
