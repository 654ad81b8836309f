// The live fleet map of `leasehold monitor`: one canvas cell per partition, coloured by its
// owner, kept current from the monitor's event stream (/api/events). Plain ES modules with
// no dependencies and no build step: the monitor embeds them as they are. This one wires
// them up: the page's own events, the once-a-second refresh, the hook browser tests read,
// and the start.

import { C, CH, nameIndex, names, nodeColours, readTheme, S } from './state.js';
import { canvas, tip, wrap } from './dom.js';
import { cellAt, cellCenter, cellEdge, computeLayout, drawAll, L, layout, placeRings } from './canvas.js';
import { renderPlot } from './plot.js';
import { placeTip, renderDetail, renderLegend, renderReadAge, showTip, tickMembers, tickReservations } from './panels.js';
import { connect } from './stream.js';

canvas.addEventListener('mousemove', (e) => {
  const p = cellAt(e.clientX, e.clientY);
  if (p !== S.hover) {
    S.hover = p;
    showTip(p);
    placeRings();
  }
  if (p >= 0) placeTip(e.clientX, e.clientY);
});
canvas.addEventListener('mouseleave', () => {
  S.hover = -1;
  tip.hidden = true;
  placeRings();
});
canvas.addEventListener('click', (e) => {
  const p = cellAt(e.clientX, e.clientY);
  S.selected = p === S.selected ? -1 : p;
  placeRings();
  renderDetail();
});
document.addEventListener('keydown', (e) => {
  if (e.key === 'Escape' && S.selected >= 0) {
    S.selected = -1;
    placeRings();
    renderDetail();
  }
});

let resizeTimer = 0;
new ResizeObserver(() => {
  clearTimeout(resizeTimer);
  resizeTimer = setTimeout(() => {
    if (!S.loaded) return;
    const next = computeLayout();
    if (next.cols !== L.cols || next.size !== L.size || next.dpr !== L.dpr) {
      layout();
      drawAll();
    }
    placeRings();
    renderPlot();
  }, 100);
}).observe(wrap);

window.matchMedia('(prefers-color-scheme: dark)').addEventListener('change', () => {
  readTheme();
  renderLegend();
  if (S.loaded) {
    drawAll();
    renderPlot();
  }
});

let ticks = 0;
setInterval(() => {
  ticks++;
  renderReadAge();
  tickMembers();
  tickReservations();
  if (ticks % 5 === 0) renderPlot();
}, 1000);

// The hook browser tests read; it reports what the canvas shows, not what was received.
window.leaseholdMap = {
  get sequence() { return S.sequence; },
  get drawnAt() { return S.drawnAt; },
  get partitions() { return S.n; },
  get connected() { return S.connected; },
  get actions() { return S.actions; },
  ownerOf(p) {
    return p >= 0 && p < S.n && S.states[p] === CH.H && S.owners[p] >= 0 ? names[S.owners[p]] : null;
  },
  stateOf(p) {
    return p >= 0 && p < S.n ? String.fromCharCode(S.states[p]) : null;
  },
  colorOf(node) {
    const i = nameIndex.get(node);
    return i === undefined ? null : nodeColours[i].rgb.slice();
  },
  // The colour at the centre of a cell in the given state (H meaning held with no owner).
  stateColor(state) {
    const c = { H: C.released, R: C.released, O: C.offline, M: C.missing, C: C.corrupt }[state];
    return c ? c.rgb.slice() : null;
  },
  get backgroundColor() { return C.bg.rgb.slice(); },
  // The node a released partition is reserved for while it restarts in place, if any.
  reservedFor(p) {
    return p >= 0 && p < S.n && S.states[p] === CH.R && S.owners[p] >= 0 ? names[S.owners[p]] : null;
  },
  cellCenter,
  cellEdge,
};

readTheme();
renderLegend();
connect();
