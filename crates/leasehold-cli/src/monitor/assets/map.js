// The live fleet map of `leasehold monitor`: one canvas cell per partition, coloured by its
// owner, kept current from the monitor's event stream (/api/events). Plain script, no
// dependencies: the monitor embeds this file as it is.
'use strict';

(function () {
  // Twenty colours picked to stay apart from one another and from the state colours (grey for
  // released, near-black for offline, red for missing and corrupt), so a fleet of up to twenty
  // nodes never needs two similar hues. Beyond that, hues are spread by the golden angle.
  const PALETTE = [
    '#3a78c2', '#f28e2b', '#3f9e4a', '#9d62b5', '#e3b51b', '#2bb3b3', '#e377c2', '#8c5a3c',
    '#9ac03f', '#1d3f8f', '#6fc7f0', '#ffb48a', '#5d7d3a', '#c9a0e8', '#0d7a6f', '#7a4fd1',
    '#f7d26b', '#b3446c', '#5f9ea0', '#d9773f',
  ];
  const HISTORY_MS = 10 * 60 * 1000;
  const FEED_MAX = 200;
  // Deltas can arrive several times a second; the plot keeps at most one sample per second
  // of them between the monitor's own five-second samples.
  const SAMPLE_MIN_GAP_MS = 1000;
  const STATE_NAMES = { H: 'held', R: 'released', O: 'offline', M: 'missing', C: 'corrupt' };
  const CH = { H: 72, R: 82, O: 79, M: 77, C: 67 };
  const LITTLE_ENDIAN = new Uint8Array(new Uint32Array([1]).buffer)[0] === 1;

  const $ = (id) => document.getElementById(id);
  const canvas = $('map');
  const ctx = canvas.getContext('2d', { alpha: false });
  const wrap = $('map-wrap');
  const tip = $('tip');
  const selectRing = $('ring-selected');
  const hoverRing = $('ring-hover');
  const plot = $('plot');
  const tokenInput = $('token');

  // Everything the page knows, replaced by each `map` event and patched by each `delta`.
  const S = {
    loaded: false,
    group: '',
    sequence: -1,
    readAt: 0,
    receivedAt: 0,
    goodAt: 0, // when a map or delta without a read error arrived
    intervalMs: 1000,
    staleAfterMs: 15000,
    actions: false,
    error: null,
    n: 0,
    owners: new Int32Array(0), // index into `names` below, -1 for none
    states: new Uint8Array(0), // one char code per partition
    epochs: new Float64Array(0),
    unrenewed: new Set(),
    prohibited: new Map(), // partition -> [node]
    members: [],
    summary: {},
    held: [], // per index into `names`: held records owned
    history: [], // {t, held: {node: count}}, server clock
    selected: -1,
    hover: -1,
    feedMaxId: -Infinity,
    drawnAt: 0,
    connected: false,
  };

  // Node names seen since the page loaded, in the order their colours were given. The server's
  // `nodes` table is translated into these indices so that a colour never changes while the
  // page is open, even if a later `map` orders the table differently.
  const names = [];
  const nameIndex = new Map();
  const nodeColours = [];

  // ---------------------------------------------------------------- colours

  function hexToRgb(hex) {
    let h = hex.trim().replace('#', '');
    if (h.length === 3) h = h.split('').map((c) => c + c).join('');
    const v = parseInt(h, 16);
    return [(v >> 16) & 255, (v >> 8) & 255, v & 255];
  }

  function hslToRgb(h, s, l) {
    const a = s * Math.min(l, 1 - l);
    const f = (n) => {
      const k = (n + h / 30) % 12;
      return Math.round(255 * (l - a * Math.max(-1, Math.min(k - 3, 9 - k, 1))));
    };
    return [f(0), f(8), f(4)];
  }

  function colour(rgb) {
    const [r, g, b] = rgb;
    const u32 = LITTLE_ENDIAN
      ? ((255 << 24) | (b << 16) | (g << 8) | r) >>> 0
      : ((r << 24) | (g << 16) | (b << 8) | 255) >>> 0;
    // Relative luminance decides whether labels drawn on the colour are dark or light.
    const lum = (0.2126 * r + 0.7152 * g + 0.0722 * b) / 255;
    return { rgb, css: `rgb(${r},${g},${b})`, u32, ink: lum > 0.55 ? 'rgba(0,0,0,.72)' : 'rgba(255,255,255,.9)' };
  }

  let C = {}; // theme colours, read from style.css
  function readTheme() {
    const cs = getComputedStyle(document.documentElement);
    const v = (name) => colour(hexToRgb(cs.getPropertyValue(name)));
    C = {
      bg: v('--map-bg'),
      released: v('--cell-released'),
      offline: v('--cell-offline'),
      offlineLine: v('--cell-offline-line'),
      missing: v('--cell-missing'),
      missingLine: v('--cell-missing-line'),
      corrupt: v('--cell-corrupt'),
      unrenewed: v('--mark-unrenewed'),
      mark: v('--mark-dark'),
      text: cs.getPropertyValue('--text').trim(),
      muted: cs.getPropertyValue('--muted').trim(),
      line: cs.getPropertyValue('--line').trim(),
    };
  }

  function naturalCompare(a, b) {
    return a.localeCompare(b, undefined, { numeric: true, sensitivity: 'base' });
  }

  // Gives colours to names not seen before, in natural order among themselves, so that a fresh
  // page on the same fleet colours node-1, node-2, node-3 the same way every time.
  function register(list) {
    const fresh = [...new Set(list)].filter((name) => typeof name === 'string' && !nameIndex.has(name));
    fresh.sort(naturalCompare);
    for (const name of fresh) {
      const i = names.length;
      names.push(name);
      nameIndex.set(name, i);
      S.held.push(0);
      const rgb = i < PALETTE.length
        ? hexToRgb(PALETTE[i])
        : hslToRgb(((i - PALETTE.length) * 137.508 + 17) % 360, 0.62, 0.5);
      nodeColours.push(colour(rgb));
    }
  }

  function cellColour(p) {
    switch (S.states[p]) {
      case CH.H: return S.owners[p] >= 0 ? nodeColours[S.owners[p]] : C.released;
      case CH.O: return C.offline;
      case CH.M: return C.missing;
      case CH.C: return C.corrupt;
      default: return C.released;
    }
  }

  // ---------------------------------------------------------------- layout and drawing

  // Geometry in device pixels: cells are whole device pixels so that each one is a crisp
  // square whose centre pixel carries exactly the cell's colour.
  let L = { dpr: 1, size: 1, gap: 0, pitch: 1, cols: 1, rows: 1, w: 1, h: 1 };

  function computeLayout() {
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

  function layout() {
    L = computeLayout();
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
  function drawLook(g, x, y, s, look, dpr) {
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
      label: p,
    };
  }

  function needsMarks(p) {
    return (L.size >= 8 && S.states[p] !== CH.H && S.states[p] !== CH.R) ||
      S.unrenewed.has(p) || S.prohibited.has(p) || L.size / L.dpr >= 30;
  }

  function drawCell(p) {
    if (p < 0 || p >= S.n) return;
    const [x, y] = cellOrigin(p);
    drawLook(ctx, x, y, L.size, lookOf(p), L.dpr);
  }

  // Fills all cells straight into an ImageData (tens of thousands of fillRect calls would cost
  // far more), then draws the few cells with marks on top.
  function drawAll() {
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

  function cellAt(clientX, clientY) {
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

  function placeRings() {
    placeRing(selectRing, S.selected);
    placeRing(hoverRing, S.hover === S.selected ? -1 : S.hover);
  }

  function cellCenter(p) {
    const [x, y] = cellOrigin(p);
    const scale = canvas.clientWidth / canvas.width || 1 / L.dpr;
    return { x: (x + L.size / 2) * scale, y: (y + L.size / 2) * scale };
  }

  // ---------------------------------------------------------------- applying the stream

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

  // ---------------------------------------------------------------- page chrome

  function el(tag, attrs, ...children) {
    const e = document.createElement(tag);
    for (const [k, v] of Object.entries(attrs || {})) {
      if (v === undefined || v === null || v === false) continue;
      if (k === 'class') e.className = v;
      else if (k === 'style') e.style.cssText = v;
      else if (k.startsWith('on')) e.addEventListener(k.slice(2), v);
      else e.setAttribute(k, v === true ? '' : v);
    }
    for (const c of children.flat()) {
      if (c === null || c === undefined || c === false) continue;
      e.append(c instanceof Node ? c : document.createTextNode(String(c)));
    }
    return e;
  }

  function swatch(name) {
    const i = nameIndex.get(name);
    const css = i === undefined ? 'transparent' : nodeColours[i].css;
    return el('span', { class: 'sw', style: `background:${css}` });
  }

  function nodeLabel(name) {
    return el('span', { class: 'node' }, swatch(name), name);
  }

  function fmtAge(ms) {
    if (ms === null || ms === undefined || !isFinite(ms)) return '—';
    const s = Math.max(0, ms) / 1000;
    if (s < 60) return `${Math.floor(s)} s ago`;
    if (s < 3600) return `${Math.floor(s / 60)} min ${Math.floor(s % 60)} s ago`;
    return `${Math.floor(s / 3600)} h ${Math.floor((s % 3600) / 60)} min ago`;
  }

  function fmtTime(ms) {
    const d = new Date(ms);
    return [d.getHours(), d.getMinutes(), d.getSeconds()].map((v) => String(v).padStart(2, '0')).join(':');
  }

  function fmtNum(v) {
    return typeof v === 'number' ? v.toLocaleString() : '—';
  }

  function renderChrome() {
    document.title = `${S.group || 'leasehold'} · leasehold monitor`;
    $('group').textContent = S.group || '—';
    $('token-box').hidden = !S.actions;
    const banner = $('error-banner');
    banner.hidden = !S.error;
    if (S.error) {
      banner.replaceChildren('Latest read of the table failed: ', el('code', {}, S.error));
    }
    renderSummary();
    renderMembers();
    renderDetail();
    renderPlot();
    $('footer').textContent = `sequence ${S.sequence} · read every ${S.intervalMs} ms · ` +
      `unrenewed after ${S.staleAfterMs / 1000} s · ${S.actions ? 'actions enabled' : 'read-only'}`;
  }

  function stat(key, value, level, title) {
    return el('div', { class: `stat ${level || ''}`, title },
      el('span', { class: 'k' }, key), el('span', { class: 'v' }, value));
  }

  function readAgeMs() {
    // A delta comes only when a read changed something; on a quiet fleet the `read` event
    // after every read says when the table was last read.
    const at = S.goodAt || 0;
    return at ? Date.now() - at : null;
  }

  function renderReadAge() {
    const age = readAgeMs();
    const node = $('stat-read');
    if (!node) return;
    node.querySelector('.v').textContent = age === null ? '—' : fmtAge(age);
    const late = age !== null && age > Math.max(3 * S.intervalMs, 5000);
    node.className = `stat ${S.error ? 'bad' : late ? 'warn' : ''}`;
  }

  function renderSummary() {
    const m = S.summary || {};
    const warnIf = (v) => (v > 0 ? 'warn' : '');
    const badIf = (v) => (v > 0 ? 'bad' : '');
    const read = stat('Last read', '', '', 'Age of the monitor\'s latest successful read of the table');
    read.id = 'stat-read';
    $('summary').replaceChildren(
      stat('Partitions', fmtNum(S.n)),
      stat('Held', fmtNum(m.held)),
      stat('Unowned', fmtNum(m.unowned), warnIf(m.unowned), 'Released, or held with no owner'),
      stat('Offline', fmtNum(m.offline), warnIf(m.offline)),
      stat('Missing', fmtNum(m.missing), badIf(m.missing), 'Partitions below the count with no record'),
      stat('Corrupt', fmtNum(m.corrupt), badIf(m.corrupt)),
      stat('Unrenewed', fmtNum(m.unrenewed), warnIf(m.unrenewed),
        typeof m.oldest_unrenewed_s === 'number' ? `Oldest unrenewed: ${m.oldest_unrenewed_s.toFixed(1)} s` : undefined),
      stat('Spillover', fmtNum(m.spillover), badIf(m.spillover), 'Unowned partitions no live, permitted member can take'),
      stat('Load over ceilings', fmtNum(m.load_spillover), badIf(m.load_spillover),
        'Load live members carry above their max_load, summed'),
      stat('Members', `${fmtNum(m.live_members)} live · ${fmtNum(m.draining_members)} draining` +
        (m.dead_members > 0 ? ` · ${fmtNum(m.dead_members)} dead` : ''),
      m.live_members === 0 ? 'bad' : m.dead_members > 0 ? 'warn' : ''),
      ...(S.error ? [stat('Read', 'failing', 'bad', S.error)] : []),
      read,
    );
    renderReadAge();
  }

  // Rows are kept per node and patched in place so that a button under the pointer is not
  // replaced between mousedown and click by a delta arriving in between.
  const memberRows = new Map();
  function renderMembers() {
    const body = $('members-body');
    $('members-act-head').hidden = !S.actions;
    const byName = new Map(S.members.map((m) => [m.node, m]));
    // Owners without a member record (crashed and forgotten) still hold partitions: list them.
    for (let i = 0; i < names.length; i++) {
      if (S.held[i] > 0 && !byName.has(names[i])) byName.set(names[i], null);
    }
    const order = [...byName.keys()].sort(naturalCompare);
    let live = 0;
    for (const [position, name] of order.entries()) {
      const m = byName.get(name);
      let row = memberRows.get(name);
      if (!row) {
        const cells = {};
        const tr = el('tr', {});
        for (const k of ['node', 'held', 'target', 'weight', 'draining', 'live', 'load', 'change', 'act']) {
          cells[k] = el('td', { class: ['held', 'target', 'weight', 'load'].includes(k) ? 'num' : k === 'act' ? 'act' : '' });
          tr.append(cells[k]);
        }
        cells.node.append(nodeLabel(name));
        row = { tr, cells, key: {} };
        memberRows.set(name, row);
      }
      const i = nameIndex.get(name);
      const held = i === undefined ? 0 : S.held[i];
      const set = (k, value) => {
        const text = value instanceof Node ? value.outerHTML : String(value);
        if (row.key[k] === text) return;
        row.key[k] = text;
        row.cells[k].replaceChildren(value);
      };
      if (m) {
        live += m.live ? 1 : 0;
        set('held', fmtNum(typeof m.held === 'number' ? m.held : held));
        set('target', fmtNum(m.target));
        set('weight', fmtNum(m.weight));
        set('draining', m.draining ? el('span', { class: 'tag warn' }, 'draining') : el('span', { class: 'muted' }, 'no'));
        set('live', m.live ? el('span', { class: 'tag ok' }, 'live') : el('span', { class: 'tag bad' }, 'dead'));
        set('load', m.load === null || m.load === undefined ? '—' : typeof m.load === 'number' ? m.load.toLocaleString(undefined, { maximumFractionDigits: 3 }) : String(m.load));
        row.lastChange = typeof m.last_change_ms_ago === 'number' ? m.last_change_ms_ago : null;
        set('change', fmtAge(row.lastChange === null ? null : row.lastChange + (Date.now() - S.receivedAt)));
        row.tr.className = m.live ? '' : 'gone';
      } else {
        set('held', fmtNum(held));
        for (const k of ['target', 'weight', 'draining', 'load']) set(k, '—');
        set('live', el('span', { class: 'tag dim', title: 'Holds partitions but has no member record' }, 'no record'));
        row.lastChange = null;
        set('change', '—');
        row.tr.className = 'gone';
      }
      const actKey = S.actions && m ? (m.draining ? 'undrain' : 'drain') : '';
      if (row.actKey !== actKey) {
        row.actKey = actKey;
        row.cells.act.replaceChildren();
        if (actKey === 'drain') {
          row.cells.act.append(el('button', { type: 'button', class: 'danger', onclick: () => act('drain', { node: name }, `Drain ${name}: hand all its partitions off`) }, 'Drain'));
        } else if (actKey === 'undrain') {
          row.cells.act.append(el('button', { type: 'button', onclick: () => act('undrain', { node: name }, `Undrain ${name}: let it take partitions again`) }, 'Undrain'));
        }
      }
      row.cells.act.hidden = !S.actions;
      // Moved only when out of place, so rows stay put under the pointer.
      if (body.children[position] !== row.tr) body.insertBefore(row.tr, body.children[position] || null);
    }
    for (const [name, row] of memberRows) {
      if (!byName.has(name)) {
        row.tr.remove();
        memberRows.delete(name);
      }
    }
    let empty = body.querySelector('.empty-row');
    if (!byName.size && !empty) {
      empty = el('tr', { class: 'empty-row' }, el('td', { colspan: 9, class: 'muted' }, 'No member records: no node has joined the group.'));
      body.append(empty);
    } else if (byName.size && empty) {
      empty.remove();
    }
    $('members-caption').textContent = `${S.members.length} · ${live} live`;
  }

  function tickMembers() {
    for (const row of memberRows.values()) {
      if (row.lastChange === null || row.lastChange === undefined) continue;
      row.cells.change.textContent = fmtAge(row.lastChange + (Date.now() - S.receivedAt));
      row.key.change = row.cells.change.textContent;
    }
  }

  function stateText(p) {
    const ch = String.fromCharCode(S.states[p]);
    if (ch === 'H' && S.owners[p] < 0) return 'held, no owner';
    return STATE_NAMES[ch] || `unknown (${ch})`;
  }

  function stateTag(p) {
    const ch = String.fromCharCode(S.states[p]);
    const cls = ch === 'H' ? (S.owners[p] >= 0 ? 'ok' : 'warn') : ch === 'R' ? 'dim' : ch === 'O' ? 'warn' : 'bad';
    return el('span', { class: `tag ${cls}` }, stateText(p));
  }

  function partitionFacts(p) {
    const owner = S.owners[p] >= 0 ? names[S.owners[p]] : null;
    const held = S.states[p] === CH.H;
    return [
      ['Owner', owner && held ? nodeLabel(owner) : el('span', { class: 'muted' }, 'none')],
      ['Epoch', fmtNum(S.epochs[p])],
      ['State', stateTag(p)],
      ['Renewal', S.unrenewed.has(p) ? el('span', { class: 'tag warn' }, `unrenewed > ${S.staleAfterMs / 1000} s`) : held ? 'renewing' : '—'],
      ['Prohibited', S.prohibited.has(p) ? el('span', {}, ...S.prohibited.get(p).flatMap((n, i) => [i ? ' ' : '', nodeLabel(n)])) : el('span', { class: 'muted' }, 'none')],
    ];
  }

  // Rebuilt only when what it shows changed: deltas arrive several times a second and a
  // button replaced under the pointer loses its click.
  let detailKey = '';
  function renderDetail() {
    const box = $('detail');
    const p = S.selected;
    const key = p < 0 || p >= S.n ? '' : [p, S.states[p], S.owners[p], S.epochs[p], S.unrenewed.has(p),
      (S.prohibited.get(p) || []).join(','), S.actions, S.staleAfterMs].join('|');
    if (key === detailKey && box.childElementCount) return;
    detailKey = key;
    if (p < 0 || p >= S.n) {
      box.replaceChildren(el('p', { class: 'muted' }, 'Click a cell to select a partition.'));
      return;
    }
    const facts = partitionFacts(p);
    const dl = el('dl', { class: 'kv' },
      el('dt', {}, 'Partition'), el('dd', {}, el('b', { class: 'p' }, String(p))),
      ...facts.flatMap(([k, v]) => [el('dt', {}, k), el('dd', {}, v)]));
    const children = [dl];
    if (S.actions) {
      const st = S.states[p];
      const buttons = [];
      if (st === CH.H) buttons.push(el('button', { type: 'button', class: 'danger', onclick: () => act('kick', { partition: p }, `Kick partition ${p}: make its holder drop it`) }, 'Kick'));
      if (st !== CH.O) buttons.push(el('button', { type: 'button', class: 'danger', onclick: () => act('offline', { partition: p }, `Take partition ${p} offline: nobody holds it until online`) }, 'Offline'));
      if (st === CH.O) buttons.push(el('button', { type: 'button', onclick: () => act('online', { partition: p }, `Put partition ${p} back online`) }, 'Online'));
      children.push(el('div', { class: 'actions' }, buttons));
    }
    box.replaceChildren(...children);
  }

  function showTip(p) {
    if (p < 0 || p >= S.n) {
      tip.hidden = true;
      return;
    }
    const owner = S.states[p] === CH.H && S.owners[p] >= 0 ? names[S.owners[p]] : null;
    const rows = [
      ['owner', owner ? nodeLabel(owner) : '—'],
      ['epoch', fmtNum(S.epochs[p])],
      ['state', stateText(p)],
    ];
    if (S.unrenewed.has(p)) rows.push(['renewal', 'unrenewed']);
    if (S.prohibited.has(p)) rows.push(['prohibited', S.prohibited.get(p).join(', ')]);
    tip.replaceChildren(el('b', {}, `Partition ${p}`),
      ...rows.map(([k, v]) => el('div', { class: 'row' }, el('span', {}, k), el('span', {}, v))));
    tip.hidden = false;
  }

  function placeTip(clientX, clientY) {
    const r = wrap.getBoundingClientRect();
    let x = clientX - r.left + 14;
    let y = clientY - r.top + 14;
    if (x + tip.offsetWidth > r.width - 4) x = clientX - r.left - tip.offsetWidth - 14;
    if (y + tip.offsetHeight > r.height - 4) y = clientY - r.top - tip.offsetHeight - 14;
    tip.style.left = `${Math.max(4, x)}px`;
    tip.style.top = `${Math.max(4, y)}px`;
  }

  // ---------------------------------------------------------------- history plot

  function renderPlot() {
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

  // ---------------------------------------------------------------- feed

  const KIND_CLASS = {
    acquired: 'k-good', joined: 'k-good', alive: 'k-good', online: 'k-good', undrained: 'k-good', allowed: 'k-good',
    released: 'k-info',
    lost: 'k-bad', kicked: 'k-bad', dead: 'k-bad', left: 'k-bad',
    offline: 'k-warn', prohibited: 'k-warn', draining: 'k-warn',
  };

  function changeItem(c) {
    const what = [];
    if (c.partition !== null && c.partition !== undefined) what.push(el('span', { class: 'p' }, `p${c.partition}`), ' ');
    if (c.node) what.push(nodeLabel(c.node));
    if (c.previous) what.push(el('span', { class: 'muted', title: 'from' }, ' ← '), nodeLabel(c.previous));
    if (c.epoch !== null && c.epoch !== undefined) what.push(el('span', { class: 'muted', title: 'epoch' }, ` e${c.epoch}`));
    return el('li', { 'data-id': c.id },
      el('time', { datetime: new Date(c.at_unix_ms).toISOString() }, fmtTime(c.at_unix_ms)),
      el('span', { class: `kind ${KIND_CLASS[c.kind] || ''}` }, c.kind),
      el('span', { class: 'what' }, what));
  }

  function resetFeed(changes) {
    const feed = $('feed');
    const items = changes.slice(-FEED_MAX).reverse();
    feed.replaceChildren(...items.map(changeItem));
    S.feedMaxId = changes.reduce((m, c) => Math.max(m, c.id), -Infinity);
    if (!items.length) feed.append(el('li', { class: 'empty' }, 'No changes seen yet.'));
  }

  function addChange(c) {
    if (!S.loaded || typeof c.id !== 'number' || c.id <= S.feedMaxId) return;
    S.feedMaxId = c.id;
    register([c.node, c.previous].filter(Boolean));
    const feed = $('feed');
    const empty = feed.querySelector('.empty');
    if (empty) empty.remove();
    feed.prepend(changeItem(c));
    while (feed.children.length > FEED_MAX) feed.lastElementChild.remove();
  }

  // ---------------------------------------------------------------- legend

  function renderLegend() {
    const items = [
      ["Held: the owner's colour", { fill: nodeColours[0] || colour(hexToRgb(PALETTE[0])), state: CH.H }],
      ['Released / unowned', { fill: C.released, state: CH.R }],
      ['Offline', { fill: C.offline, state: CH.O }],
      ['Missing', { fill: C.missing, state: CH.M }],
      ['Corrupt', { fill: C.corrupt, state: CH.C }],
      ['Unrenewed', { fill: C.released, state: CH.R, unrenewed: true }],
      ['Prohibited', { fill: C.released, state: CH.R, prohibited: true }],
    ];
    const dpr = Math.min(Math.max(window.devicePixelRatio || 1, 1), 4);
    $('legend').replaceChildren(...items.map(([label, look]) => {
      const c = el('canvas', {});
      const s = Math.round(16 * dpr);
      c.width = s;
      c.height = s;
      drawLook(c.getContext('2d'), 0, 0, s, look, dpr);
      return el('span', {}, c, label);
    }));
  }

  // ---------------------------------------------------------------- actions

  const TOKEN_KEY = 'leasehold.monitor.token';
  try {
    tokenInput.value = sessionStorage.getItem(TOKEN_KEY) || '';
  } catch (e) {
    // Storage can be off (private modes); the field still works for this page.
  }
  $('token-box').addEventListener('submit', (e) => e.preventDefault());
  tokenInput.addEventListener('input', () => {
    try {
      sessionStorage.setItem(TOKEN_KEY, tokenInput.value);
    } catch (e) {
      // As above.
    }
  });

  let toastTimer = 0;
  function toast(text, bad) {
    const t = $('toast');
    t.textContent = text;
    t.className = `toast${bad ? ' bad' : ''}`;
    t.hidden = false;
    clearTimeout(toastTimer);
    toastTimer = setTimeout(() => { t.hidden = true; }, bad ? 9000 : 5000);
  }

  async function act(kind, body, question) {
    if (!S.actions) return;
    const token = tokenInput.value.trim();
    if (!token) {
      toast('Enter the monitor\'s token first.', true);
      tokenInput.focus();
      return;
    }
    if (!window.confirm(`${question}?`)) return;
    let reply = null;
    let status = 0;
    try {
      const r = await fetch(`/api/actions/${kind}`, {
        method: 'POST',
        headers: { 'Content-Type': 'application/json', Authorization: `Bearer ${token}` },
        body: JSON.stringify(body),
      });
      status = r.status;
      try {
        reply = await r.json();
      } catch (e) {
        reply = null;
      }
      if (r.ok) toast((reply && reply.message) || `${kind}: done`);
      else toast(`${kind} refused (${status}): ${(reply && reply.error) || r.statusText}`, true);
    } catch (e) {
      toast(`${kind} failed: ${e.message}`, true);
    }
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
  function connect() {
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

  // ---------------------------------------------------------------- events on the page

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
    cellCenter,
  };

  readTheme();
  renderLegend();
  connect();
})();
