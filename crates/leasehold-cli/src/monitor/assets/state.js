// The page's state: what the last map and deltas said, the node names in the order their
// colours were given, and the colours themselves.

// Twenty colours picked to stay apart from one another and from the state colours (grey for
// released, near-black for offline, red for missing and corrupt), so a fleet of up to twenty
// nodes never needs two similar hues. Beyond that, hues are spread by the golden angle.
export const PALETTE = [
  '#3a78c2', '#f28e2b', '#3f9e4a', '#9d62b5', '#e3b51b', '#2bb3b3', '#e377c2', '#8c5a3c',
  '#9ac03f', '#1d3f8f', '#6fc7f0', '#ffb48a', '#5d7d3a', '#c9a0e8', '#0d7a6f', '#7a4fd1',
  '#f7d26b', '#b3446c', '#5f9ea0', '#d9773f',
];
export const HISTORY_MS = 10 * 60 * 1000;
export const FEED_MAX = 200;
// Deltas can arrive several times a second; the plot keeps at most one sample per second
// of them between the monitor's own five-second samples.
export const SAMPLE_MIN_GAP_MS = 1000;
export const STATE_NAMES = { H: 'held', R: 'released', O: 'offline', M: 'missing', C: 'corrupt' };
export const CH = { H: 72, R: 82, O: 79, M: 77, C: 67 };
const LITTLE_ENDIAN = new Uint8Array(new Uint32Array([1]).buffer)[0] === 1;

// Everything the page knows, replaced by each `map` event and patched by each `delta`.
export const S = {
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
  reservedUntil: new Map(), // partition -> unix ms its restart-in-place reservation runs out
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
export const names = [];
export const nameIndex = new Map();
export const nodeColours = [];

// ---------------------------------------------------------------- colours

export function hexToRgb(hex) {
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

export function colour(rgb) {
  const [r, g, b] = rgb;
  const u32 = LITTLE_ENDIAN
    ? ((255 << 24) | (b << 16) | (g << 8) | r) >>> 0
    : ((r << 24) | (g << 16) | (b << 8) | 255) >>> 0;
  // Relative luminance decides whether labels drawn on the colour are dark or light.
  const lum = (0.2126 * r + 0.7152 * g + 0.0722 * b) / 255;
  return { rgb, css: `rgb(${r},${g},${b})`, u32, ink: lum > 0.55 ? 'rgba(0,0,0,.72)' : 'rgba(255,255,255,.9)' };
}

export const C = {}; // theme colours, read from style.css
export function readTheme() {
  const cs = getComputedStyle(document.documentElement);
  const v = (name) => colour(hexToRgb(cs.getPropertyValue(name)));
  Object.assign(C, {
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
  });
}

export function naturalCompare(a, b) {
  return a.localeCompare(b, undefined, { numeric: true, sensitivity: 'base' });
}

// Gives colours to names not seen before, in natural order among themselves, so that a fresh
// page on the same fleet colours node-1, node-2, node-3 the same way every time.
export function register(list) {
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

// The colour of the node a released partition is reserved for (its restart in place), if
// it is: the server names an owner of a released record only then.
export function reservedColour(p) {
  return S.states[p] === CH.R && S.owners[p] >= 0 ? nodeColours[S.owners[p]] : undefined;
}

export function cellColour(p) {
  switch (S.states[p]) {
    case CH.H: return S.owners[p] >= 0 ? nodeColours[S.owners[p]] : C.released;
    case CH.O: return C.offline;
    case CH.M: return C.missing;
    case CH.C: return C.corrupt;
    default: return C.released;
  }
}
