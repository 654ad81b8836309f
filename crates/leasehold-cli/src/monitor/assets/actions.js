// Operator actions (drain, kick, offline…) sent with the monitor's token.

import { S } from './state.js';
import { $, tokenInput } from './dom.js';

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

export async function act(kind, body, question) {
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
