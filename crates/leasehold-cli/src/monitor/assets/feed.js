// The feed of changes seen, newest first.

import { FEED_MAX, register, S } from './state.js';
import { $, el, fmtTime, nodeLabel } from './dom.js';

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

export function resetFeed(changes) {
  const feed = $('feed');
  const items = changes.slice(-FEED_MAX).reverse();
  feed.replaceChildren(...items.map(changeItem));
  S.feedMaxId = changes.reduce((m, c) => Math.max(m, c.id), -Infinity);
  if (!items.length) feed.append(el('li', { class: 'empty' }, 'No changes seen yet.'));
}

export function addChange(c) {
  if (!S.loaded || typeof c.id !== 'number' || c.id <= S.feedMaxId) return;
  S.feedMaxId = c.id;
  register([c.node, c.previous].filter(Boolean));
  const feed = $('feed');
  const empty = feed.querySelector('.empty');
  if (empty) empty.remove();
  feed.prepend(changeItem(c));
  while (feed.children.length > FEED_MAX) feed.lastElementChild.remove();
}
