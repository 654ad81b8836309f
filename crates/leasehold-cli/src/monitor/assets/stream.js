// The monitor's event stream: a `map` replaces what the page knows, a `delta` patches it,
// and the connection's state shows in the badge and banner.

import { CH, HISTORY_MS, nameIndex, names, register, S, SAMPLE_MIN_GAP_MS } from './state.js';
import { $, fmtTime } from './dom.js';
import { drawAll, drawCell, layout, placeRings } from './canvas.js';
import { addChange, resetFeed } from './feed.js';
import { renderChrome, renderReadAge, showTip } from './panels.js';

function heldCount(p, delta) {
  if (S.states[p] === CH.H && S.owners[p] >= 0) S.held[S.owners[p]] += delta;
}

function toProhibited(pairs) {
  const m = new Map();
  for (const [p, node] of pairs || []) {
    if (!m.has(p)) m.set(p, []);
    m.get(p).push(node);
  }
  return m;
}

function applyMap(m) {
  register([...(m.nodes || []), ...(m.members || []).map((x) => x.node)]);
  const local = (m.nodes || []).map((name) => nameIndex.get(name));
  const n = Math.max(0, m.partitions_expected | 0);
  const resized = n !== S.n || !S.loaded;
  S.group = m.group || '';
  S.sequence = m.sequence;
  S.readAt = m.read_at_unix_ms || Date.now();
  S.receivedAt = Date.now();
  S.intervalMs = m.interval_ms || S.intervalMs;
  S.staleAfterMs = m.stale_after_ms || S.staleAfterMs;
  S.actions = !!m.actions;
  S.error = m.error || null;
  if (!S.error) S.goodAt = S.receivedAt;
  S.n = n;
  S.owners = new Int32Array(n);
  S.states = new Uint8Array(n);
  S.epochs = new Float64Array(n);
  S.held.fill(0);
  const owners = m.owners || [];
  const states = m.states || '';
  const epochs = m.epochs || [];
  for (let p = 0; p < n; p++) {
    const o = owners[p];
    S.owners[p] = o >= 0 && local[o] !== undefined ? local[o] : -1;
    S.states[p] = p < states.length ? states.charCodeAt(p) : CH.M;
    S.epochs[p] = epochs[p] || 0;
    heldCount(p, 1);
  }
  S.unrenewed = new Set(m.unrenewed || []);
  S.prohibited = toProhibited(m.prohibited);
  S.reservedUntil = new Map(m.reserved_until || []);
  S.members = m.members || [];
  S.summary = m.summary || {};
  if (S.selected >= n) S.selected = -1;
  S.history = (m.history || []).map((h) => ({ t: h.at_unix_ms, held: h.held || {} }));
  sample(true);
  S.loaded = true;

  if (resized) layout();
  drawAll();
  placeRings();
  resetFeed(m.changes || []);
  renderChrome();
  S.drawnAt = Date.now();
}

function applyDelta(d) {
  if (!S.loaded) return;
  // A delta older than the map on screen was overtaken by it.
  if (typeof d.sequence === 'number' && d.sequence <= S.sequence) return;
  register([...(d.nodes || []), ...(d.members || []).map((x) => x.node)]);
  const local = (d.nodes || []).map((name) => nameIndex.get(name));
  const dirty = new Set();
  for (const [p, o, st, epoch] of d.partitions || []) {
    if (p < 0 || p >= S.n) continue;
    heldCount(p, -1);
    S.owners[p] = o >= 0 && local[o] !== undefined ? local[o] : -1;
    S.states[p] = typeof st === 'string' && st.length ? st.charCodeAt(0) : CH.M;
    S.epochs[p] = epoch || 0;
    heldCount(p, 1);
    dirty.add(p);
  }
  if (d.unrenewed) {
    const next = new Set(d.unrenewed);
    for (const p of S.unrenewed) if (!next.has(p)) dirty.add(p);
    for (const p of next) if (!S.unrenewed.has(p)) dirty.add(p);
    S.unrenewed = next;
  }
  if (d.prohibited) {
    const next = toProhibited(d.prohibited);
    const key = (list) => (list ? list.join('\u0000') : '');
    for (const p of new Set([...S.prohibited.keys(), ...next.keys()])) {
      if (key(S.prohibited.get(p)) !== key(next.get(p))) dirty.add(p);
    }
    S.prohibited = next;
  }
  if (d.reserved_until) {
    const next = new Map(d.reserved_until);
    for (const p of new Set([...S.reservedUntil.keys(), ...next.keys()])) {
      if (S.reservedUntil.get(p) !== next.get(p)) dirty.add(p);
    }
    S.reservedUntil = next;
  }
  if (d.members) S.members = d.members;
  if (d.summary) S.summary = d.summary;
  if ('error' in d) S.error = d.error || null;
  S.sequence = d.sequence;
  S.readAt = d.read_at_unix_ms || S.readAt;
  S.receivedAt = Date.now();
  if (!S.error) S.goodAt = S.receivedAt;
  sample(false);

  for (const p of dirty) drawCell(p);
  renderChrome();
  if (dirty.has(S.hover)) showTip(S.hover);
  S.drawnAt = Date.now();
}

function heldByName() {
  const held = {};
  for (let i = 0; i < names.length; i++) if (S.held[i] > 0) held[names[i]] = S.held[i];
  return held;
}

function sample(fromMap) {
  const t = S.readAt;
  const held = heldByName();
  const last = S.history[S.history.length - 1];
  if (!fromMap && last && last.since !== undefined && t - last.since < SAMPLE_MIN_GAP_MS) {
    last.t = t;
    last.held = held;
  } else if (!last || t >= last.t) {
    S.history.push({ t, since: t, held });
  }
  let drop = 0;
  while (drop < S.history.length - 1 && S.history[drop].t < t - HISTORY_MS) drop++;
  if (drop) S.history.splice(0, drop);
}

// ---------------------------------------------------------------- connection

let downSince = 0;
function setConn(state) {
  S.connected = state === 'live';
  const b = $('conn');
  b.className = `badge badge-${state}`;
  b.textContent = state === 'live' ? 'live' : state === 'wait' ? 'connecting…' : 'disconnected';
  b.title = state === 'down' ? 'The event stream is down; reconnecting' : '';
  document.body.classList.toggle('stream-down', state === 'down');
  if (state === 'down' && !downSince) downSince = Date.now();
  if (state === 'live') downSince = 0;
  const banner = $('stream-banner');
  banner.hidden = !(state === 'down' && S.loaded);
  if (!banner.hidden) {
    banner.textContent = `Lost the connection to the monitor at ${fmtTime(downSince)}: ` +
      'what you see is frozen at that moment. Reconnecting…';
  }
}

function guarded(fn) {
  return (event) => {
    try {
      fn(JSON.parse(event.data));
    } catch (e) {
      console.error('leasehold monitor: cannot apply event', event.type, e);
    }
  };
}

let source = null;
export function connect() {
  setConn(S.loaded ? 'down' : 'wait');
  source = new EventSource('/api/events');
  source.addEventListener('map', guarded((m) => {
    applyMap(m);
    setConn('live');
  }));
  // Sent after a successful read that changed nothing.
  source.addEventListener('read', guarded(() => {
    S.goodAt = Date.now();
    renderReadAge();
  }));
  source.addEventListener('delta', guarded(applyDelta));
  source.addEventListener('change', guarded(addChange));
  source.addEventListener('error', () => {
    setConn('down');
    // EventSource retries by itself unless the server answered with something other than an
    // event stream; then it gives up and only a new one will do.
    if (source.readyState === EventSource.CLOSED) {
      source = null;
      setTimeout(connect, 3000);
    }
  });
}
