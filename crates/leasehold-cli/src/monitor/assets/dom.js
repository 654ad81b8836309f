// The page's elements, and small helpers to build and format them.

import { nameIndex, nodeColours } from './state.js';

export const $ = (id) => document.getElementById(id);
export const canvas = $('map');
export const ctx = canvas.getContext('2d', { alpha: false });
export const wrap = $('map-wrap');
export const tip = $('tip');
export const selectRing = $('ring-selected');
export const hoverRing = $('ring-hover');
export const plot = $('plot');
export const tokenInput = $('token');

export function el(tag, attrs, ...children) {
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

export function nodeLabel(name) {
  return el('span', { class: 'node' }, swatch(name), name);
}

export function fmtAge(ms) {
  if (ms === null || ms === undefined || !isFinite(ms)) return '—';
  const s = Math.max(0, ms) / 1000;
  if (s < 60) return `${Math.floor(s)} s ago`;
  if (s < 3600) return `${Math.floor(s / 60)} min ${Math.floor(s % 60)} s ago`;
  return `${Math.floor(s / 3600)} h ${Math.floor((s % 3600) / 60)} min ago`;
}

export function fmtTime(ms) {
  const d = new Date(ms);
  return [d.getHours(), d.getMinutes(), d.getSeconds()].map((v) => String(v).padStart(2, '0')).join(':');
}

export function fmtNum(v) {
  // `+ 0` turns a negative zero (a sum of nothing, say) into the zero people expect.
  return typeof v === 'number' ? (v + 0).toLocaleString() : '—';
}
