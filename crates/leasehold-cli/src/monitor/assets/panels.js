// Everything around the map: summary, members, the selected partition, the tooltip and the
// legend.

import { C, CH, colour, hexToRgb, nameIndex, names, naturalCompare, nodeColours, PALETTE, S, STATE_NAMES } from './state.js';
import { $, el, fmtAge, fmtNum, nodeLabel, tip, wrap } from './dom.js';
import { drawLook } from './canvas.js';
import { renderPlot } from './plot.js';
import { act } from './actions.js';

export function renderChrome() {
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

export function renderReadAge() {
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
    ...(m.reserved > 0 ? [stat('Reserved', fmtNum(m.reserved), warnIf(m.reservations_run_out),
      m.reservations_run_out > 0
        ? `${fmtNum(m.reservations_run_out)} reserved for a restart that did not come back in time`
        : 'Released partitions kept for nodes restarting in place')] : []),
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

export function tickMembers() {
  for (const row of memberRows.values()) {
    if (row.lastChange === null || row.lastChange === undefined) continue;
    row.cells.change.textContent = fmtAge(row.lastChange + (Date.now() - S.receivedAt));
    row.key.change = row.cells.change.textContent;
  }
}

function stateText(p) {
  const ch = String.fromCharCode(S.states[p]);
  if (ch === 'H' && S.owners[p] < 0) return 'held, no owner';
  if (ch === 'R' && S.owners[p] >= 0) return `reserved for ${names[S.owners[p]]} (${reservationLeft(p)})`;
  return STATE_NAMES[ch] || `unknown (${ch})`;
}

// How long the restart-in-place reservation of `p` has left, by the server's clock (the one
// its deadline was written by), aged since the read arrived.
function reservationLeft(p) {
  const until = S.reservedUntil.get(p);
  if (until === undefined) return 'restarting';
  const left = until - (S.readAt + (Date.now() - S.receivedAt));
  return left > 0 ? `restarting, ${Math.ceil(left / 1000)} s left` : `window passed ${Math.floor(-left / 1000)} s ago`;
}

function stateTag(p) {
  const ch = String.fromCharCode(S.states[p]);
  const cls = ch === 'H' ? (S.owners[p] >= 0 ? 'ok' : 'warn') : ch === 'R' ? 'dim' : ch === 'O' ? 'warn' : 'bad';
  return el('span', { class: `tag ${cls} state-tag` }, stateText(p));
}

// A reserved partition's countdown, redrawn in place every second: rebuilding the panel
// would replace its buttons under the pointer.
export function tickReservations() {
  const p = S.selected;
  if (p >= 0 && p < S.n && S.reservedUntil.has(p)) {
    const tag = document.querySelector('#detail .state-tag');
    if (tag) tag.textContent = stateText(p);
  }
  if (S.hover >= 0 && S.reservedUntil.has(S.hover) && !tip.hidden) showTip(S.hover);
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
export function renderDetail() {
  const box = $('detail');
  const p = S.selected;
  const key = p < 0 || p >= S.n ? '' : [p, S.states[p], S.owners[p], S.epochs[p], S.unrenewed.has(p),
    (S.prohibited.get(p) || []).join(','), S.reservedUntil.get(p), S.actions, S.staleAfterMs].join('|');
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

export function showTip(p) {
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

export function placeTip(clientX, clientY) {
  const r = wrap.getBoundingClientRect();
  let x = clientX - r.left + 14;
  let y = clientY - r.top + 14;
  if (x + tip.offsetWidth > r.width - 4) x = clientX - r.left - tip.offsetWidth - 14;
  if (y + tip.offsetHeight > r.height - 4) y = clientY - r.top - tip.offsetHeight - 14;
  tip.style.left = `${Math.max(4, x)}px`;
  tip.style.top = `${Math.max(4, y)}px`;
}

// ---------------------------------------------------------------- legend

export function renderLegend() {
  const items = [
    ["Held: the owner's colour", { fill: nodeColours[0] || colour(hexToRgb(PALETTE[0])), state: CH.H }],
    ['Released / unowned', { fill: C.released, state: CH.R }],
    ['Offline', { fill: C.offline, state: CH.O }],
    ['Missing', { fill: C.missing, state: CH.M }],
    ['Corrupt', { fill: C.corrupt, state: CH.C }],
    ['Unrenewed', { fill: C.released, state: CH.R, unrenewed: true }],
    ['Prohibited', { fill: C.released, state: CH.R, prohibited: true }],
    ['Reserved for a restarting node: its colour as a frame',
      { fill: C.released, state: CH.R, reservedFor: nodeColours[0] || colour(hexToRgb(PALETTE[0])) }],
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
