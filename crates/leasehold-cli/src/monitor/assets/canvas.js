// The map itself: the layout of cells on the canvas, drawing them, and which cell is under
// the pointer.

import { C, cellColour, CH, reservedColour, S } from './state.js';
import { $, canvas, ctx, hoverRing, selectRing, wrap } from './dom.js';

// Geometry in device pixels: cells are whole device pixels so that each one is a crisp
// square whose centre pixel carries exactly the cell's colour.
export const L = { dpr: 1, size: 1, gap: 0, pitch: 1, cols: 1, rows: 1, w: 1, h: 1 };

export function computeLayout() {
  const dpr = Math.min(Math.max(window.devicePixelRatio || 1, 1), 4);
  const style = getComputedStyle(wrap);
  const cssW = Math.max(120, wrap.clientWidth - parseFloat(style.paddingLeft) - parseFloat(style.paddingRight));
  const devW = Math.floor(cssW * dpr);
  const maxH = Math.max(180, window.innerHeight * 0.7) * dpr;
  const n = Math.max(S.n, 1);
  const maxS = Math.round(44 * dpr);
  const minS = Math.max(2, Math.round(2 * dpr));
  let pick = null;
  for (let s = maxS; s >= minS; s--) {
    const gap = s >= 10 ? Math.max(1, Math.round(dpr * (s >= 24 ? 2 : 1))) : s >= 5 ? 1 : 0;
    const pitch = s + gap;
    let cols = Math.max(1, Math.min(n, Math.floor((devW + gap) / pitch)));
    const rows = Math.ceil(n / cols);
    // Spread the cells evenly over the rows rather than leaving a short last row.
    cols = Math.ceil(n / rows);
    pick = { dpr, size: s, gap, pitch, cols, rows, w: cols * pitch - gap, h: rows * pitch - gap };
    // A map taller than the window only when even the smallest cells do not fit.
    if (pick.h <= maxH) break;
  }
  return pick;
}

export function layout() {
  Object.assign(L, computeLayout());
  canvas.width = L.w;
  canvas.height = L.h;
  canvas.style.width = `${L.w / L.dpr}px`;
  canvas.style.height = `${L.h / L.dpr}px`;
  $('map-caption').textContent = S.n
    ? `${S.n.toLocaleString()} · ${L.cols} per row`
    : '';
}

function cellOrigin(p) {
  return [(p % L.cols) * L.pitch, Math.floor(p / L.cols) * L.pitch];
}

// Marks stay in the corners and along the edges, never over the centre of the cell: down to
// two-pixel cells an unrenewed or prohibited partition still gets a corner pixel.
export function drawLook(g, x, y, s, look, dpr) {
  g.fillStyle = look.fill.css;
  g.fillRect(x, y, s, s);
  const lw = Math.max(1, Math.round(s / 14));
  if (s >= 8 && (look.state === CH.M || look.state === CH.O || look.state === CH.C)) {
    const line = look.state === CH.M ? C.missingLine : look.state === CH.O ? C.offlineLine : C.bg;
    g.strokeStyle = line.css;
    g.lineWidth = look.state === CH.M ? Math.max(1, Math.round(s / 10)) : lw;
    g.setLineDash(look.state === CH.M && s >= 16 ? [Math.max(2, s / 8), Math.max(2, s / 12)] : []);
    const inset = g.lineWidth / 2 + (look.state === CH.M ? 0 : lw);
    g.strokeRect(x + inset, y + inset, s - 2 * inset, s - 2 * inset);
    g.setLineDash([]);
    if (look.state === CH.O && s >= 24) {
      // Hatching reads as "out of service"; the lines run either side of the centre pixel
      // (at floor(s/2) + 0.5 on both axes), never through it, so it keeps the state colour.
      const step = Math.max(5, s / 3.5);
      const mid = 2 * Math.floor(s / 2) + 1;
      const inner = 2 * lw + 1;
      g.save();
      g.beginPath();
      g.rect(x + inner, y + inner, s - 2 * inner, s - 2 * inner);
      g.clip();
      g.beginPath();
      for (let c = mid - step / 2; c > 0; c -= step) {
        g.moveTo(x + c, y);
        g.lineTo(x, y + c);
      }
      for (let c = mid + step / 2; c < 2 * s; c += step) {
        g.moveTo(x + c, y);
        g.lineTo(x + c - s, y + s);
      }
      g.lineWidth = lw;
      g.stroke();
      g.restore();
    }
  }
  if (look.reservedFor) {
    // Released, waiting for its node to come back from a restart: a frame in that node's
    // colour around the released fill.
    const k = Math.max(1, Math.round(s / 6));
    g.fillStyle = look.reservedFor.css;
    g.fillRect(x, y, s, k);
    g.fillRect(x, y + s - k, s, k);
    g.fillRect(x, y, k, s);
    g.fillRect(x + s - k, y, k, s);
  }
  if (look.label !== undefined && s / dpr >= 30) {
    g.fillStyle = look.fill.ink;
    g.font = `${Math.round(9.5 * dpr)}px system-ui, sans-serif`;
    g.textBaseline = 'top';
    g.fillText(String(look.label), x + Math.round(3 * dpr), y + Math.round(3 * dpr));
  }
  if (look.unrenewed) {
    // Amber alone vanishes on the yellow and orange node colours: the outline carries it
    // there, and in cells too small for a triangle a dark corner does.
    if (s < 10) {
      const k = Math.max(1, Math.floor(s / 3));
      g.fillStyle = C.mark.css;
      g.fillRect(x + s - k, y, k, k);
    } else {
      const k = Math.floor(s * 0.42);
      const w = Math.max(1, Math.round(dpr));
      g.beginPath();
      g.moveTo(x + s - k, y);
      g.lineTo(x + s, y);
      g.lineTo(x + s, y + k);
      g.closePath();
      g.fillStyle = C.mark.css;
      g.fill();
      g.beginPath();
      g.moveTo(x + s - k + w * 2.4, y + w);
      g.lineTo(x + s - w, y + w);
      g.lineTo(x + s - w, y + k - w * 2.4);
      g.closePath();
      g.fillStyle = C.unrenewed.css;
      g.fill();
    }
  }
  if (look.prohibited) {
    if (s < 12) {
      const k = Math.max(1, Math.floor(s / 3));
      g.fillStyle = C.mark.css;
      g.fillRect(x, y + s - k, k, k);
    } else {
      // A small "no entry" sign in the bottom-left corner.
      const r = Math.max(3, s * 0.15);
      const cx = x + r + lw + 1;
      const cy = y + s - r - lw - 1;
      g.beginPath();
      g.arc(cx, cy, r, 0, Math.PI * 2);
      g.fillStyle = '#ffffff';
      g.fill();
      g.strokeStyle = '#111827';
      g.lineWidth = Math.max(1, r / 3);
      g.stroke();
      g.beginPath();
      g.moveTo(cx - r * 0.6, cy + r * 0.6);
      g.lineTo(cx + r * 0.6, cy - r * 0.6);
      g.stroke();
    }
  }
}

function lookOf(p) {
  return {
    fill: cellColour(p),
    state: S.states[p],
    unrenewed: S.unrenewed.has(p),
    prohibited: S.prohibited.has(p),
    reservedFor: reservedColour(p),
    label: p,
  };
}

function needsMarks(p) {
  return (L.size >= 8 && S.states[p] !== CH.H && S.states[p] !== CH.R) ||
    reservedColour(p) !== undefined ||
    S.unrenewed.has(p) || S.prohibited.has(p) || L.size / L.dpr >= 30;
}

export function drawCell(p) {
  if (p < 0 || p >= S.n) return;
  const [x, y] = cellOrigin(p);
  drawLook(ctx, x, y, L.size, lookOf(p), L.dpr);
}

// Fills all cells straight into an ImageData (tens of thousands of fillRect calls would cost
// far more), then draws the few cells with marks on top.
export function drawAll() {
  const { w, h, size: s, pitch, cols } = L;
  const img = ctx.createImageData(w, h);
  const buf = new Uint32Array(img.data.buffer);
  buf.fill(C.bg.u32);
  for (let p = 0; p < S.n; p++) {
    const u32 = cellColour(p).u32;
    let start = Math.floor(p / cols) * pitch * w + (p % cols) * pitch;
    for (let r = 0; r < s; r++, start += w) buf.fill(u32, start, start + s);
  }
  ctx.putImageData(img, 0, 0);
  for (let p = 0; p < S.n; p++) if (needsMarks(p)) drawCell(p);
}

export function cellAt(clientX, clientY) {
  const r = canvas.getBoundingClientRect();
  if (!r.width || !r.height) return -1;
  const dx = (clientX - r.left) * (canvas.width / r.width);
  const dy = (clientY - r.top) * (canvas.height / r.height);
  const col = Math.floor(dx / L.pitch);
  const row = Math.floor(dy / L.pitch);
  if (dx < 0 || dy < 0 || col >= L.cols || row >= L.rows) return -1;
  const p = row * L.cols + col;
  return p < S.n ? p : -1;
}

// The selected and hovered cells are outlined by elements laid over the canvas, so that even
// a two-pixel cell gets a visible ring and the canvas keeps only partition colours.
function placeRing(ring, p) {
  if (p < 0 || p >= S.n) {
    ring.hidden = true;
    return;
  }
  const c = cellCenter(p);
  const scale = canvas.clientWidth / canvas.width || 1 / L.dpr;
  const side = Math.max(L.size * scale + 6, 12);
  ring.style.left = `${canvas.offsetLeft + c.x - side / 2}px`;
  ring.style.top = `${canvas.offsetTop + c.y - side / 2}px`;
  ring.style.width = `${side}px`;
  ring.style.height = `${side}px`;
  ring.hidden = false;
}

export function placeRings() {
  placeRing(selectRing, S.selected);
  placeRing(hoverRing, S.hover === S.selected ? -1 : S.hover);
}

export function cellCenter(p) {
  const [x, y] = cellOrigin(p);
  const scale = canvas.clientWidth / canvas.width || 1 / L.dpr;
  return { x: (x + L.size / 2) * scale, y: (y + L.size / 2) * scale };
}

// A point inside a cell's edge, where a reserved cell's frame is drawn, in CSS pixels.
export function cellEdge(p) {
  const [x, y] = cellOrigin(p);
  const scale = canvas.clientWidth / canvas.width || 1 / L.dpr;
  return { x: (x + L.size / 2) * scale, y: (y + 0.5) * scale };
}
