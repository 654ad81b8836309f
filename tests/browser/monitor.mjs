// Browser test of the `leasehold monitor` page: real `leasehold` processes on a SQLite store,
// the page in Debian's Chromium, and checks on the pixels the canvas actually shows.
//
//   node tests/browser/monitor.mjs      (scripts/browser-test.sh installs what it needs first)
//
// LEASEHOLD_BIN     the binary (default: $CARGO_TARGET_DIR or target, then debug/leasehold)
// LEASEHOLD_BROWSER_OUT  where screenshots go (default: the target directory's browser/)
// CHROMIUM          the browser (default /usr/bin/chromium)
import { spawn } from 'node:child_process';
import fs from 'node:fs';
import os from 'node:os';
import path from 'node:path';
import readline from 'node:readline';
import { fileURLToPath } from 'node:url';
import { chromium } from 'playwright-core';

const root = path.resolve(path.dirname(fileURLToPath(import.meta.url)), '..', '..');
const targetDir = process.env.CARGO_TARGET_DIR
  ? path.resolve(process.env.CARGO_TARGET_DIR)
  : path.join(root, 'target');
const bin = process.env.LEASEHOLD_BIN
  ? path.resolve(process.env.LEASEHOLD_BIN)
  : path.join(targetDir, 'debug', 'leasehold');
const outDir = process.env.LEASEHOLD_BROWSER_OUT
  ? path.resolve(process.env.LEASEHOLD_BROWSER_OUT)
  : path.join(targetDir, 'browser');
const chromiumPath = process.env.CHROMIUM || '/usr/bin/chromium';

// Generous: a debug build on a busy two-core machine, and takeovers that wait out
// acquire_after by design.
const WAIT_MS = 60_000;
const VIEWPORT = { width: 1440, height: 1000 };

function log(line) {
  console.log(`browser-test: ${line}`);
}

class Failure extends Error {}

// ------------------------------------------------------------------ processes

const processes = [];

// Starts a leasehold process in its own process group, keeping the tail of its output for
// the failure report.
function start(name, args, options = {}) {
  const child = spawn(bin, args, {
    cwd: options.cwd,
    detached: true,
    stdio: ['ignore', 'pipe', 'pipe'],
    env: { ...process.env, NO_COLOR: '1' },
  });
  const proc = { name, child, tail: [], exited: null };
  const keep = (stream) => {
    readline.createInterface({ input: stream }).on('line', (line) => {
      proc.tail.push(line);
      if (proc.tail.length > 40) proc.tail.shift();
      for (const listener of proc.listeners || []) listener(line);
    });
  };
  keep(child.stdout);
  keep(child.stderr);
  proc.done = new Promise((resolve) => {
    child.on('exit', (code, signal) => {
      proc.exited = { code, signal };
      resolve(proc.exited);
    });
    child.on('error', (error) => {
      proc.exited = { code: null, signal: null, error };
      proc.tail.push(`cannot start: ${error.message}`);
      resolve(proc.exited);
    });
  });
  processes.push(proc);
  return proc;
}

// Runs a leasehold command to the end; fails the test unless it exits 0.
async function run(name, args, options = {}) {
  const proc = start(name, args, options);
  const timer = setTimeout(() => killGroup(proc, 'SIGKILL'), options.timeoutMs || 300_000);
  const exited = await proc.done;
  clearTimeout(timer);
  if (exited.code !== 0) {
    throw new Failure(`${name} exited with ${exited.signal || exited.code}`);
  }
  return proc;
}

function killGroup(proc, signal) {
  if (proc.exited || !proc.child.pid) return;
  try {
    process.kill(-proc.child.pid, signal);
  } catch (error) {
    if (error.code !== 'ESRCH') throw error;
  }
}

async function stopAll() {
  for (const proc of processes) killGroup(proc, 'SIGKILL');
  await Promise.all(processes.map((proc) => proc.done));
}

// Waits for the monitor to report the address it bound.
function listeningUrl(proc, timeoutMs = WAIT_MS) {
  return new Promise((resolve, reject) => {
    const seen = (line) => {
      const m = /listening on (http:\/\/\S+)/.exec(line);
      if (m) {
        clearTimeout(timer);
        resolve(m[1].endsWith('/') ? m[1] : `${m[1]}/`);
      }
    };
    proc.listeners = [seen];
    proc.tail.forEach(seen);
    const timer = setTimeout(() => reject(new Failure(`${proc.name} printed no "listening on" line in ${timeoutMs / 1000} s`)), timeoutMs);
    proc.done.then((exited) => {
      clearTimeout(timer);
      reject(new Failure(`${proc.name} exited (${exited.signal || exited.code}) before listening`));
    });
  });
}

function report() {
  for (const proc of processes) {
    if (!proc.tail.length) continue;
    const state = proc.exited ? `exited ${proc.exited.signal || proc.exited.code}` : 'running';
    console.error(`\n---- ${proc.name} (${state}), last ${proc.tail.length} lines ----`);
    for (const line of proc.tail) console.error(line);
  }
}

// ------------------------------------------------------------------ the page

const pageErrors = [];
// Pages whose monitor this test stopped on purpose: the browser logs the failed reconnections.
const monitorGone = new WeakSet();

async function openPage(browser, url, { deviceScaleFactor = 1 } = {}) {
  const context = await browser.newContext({ viewport: VIEWPORT, deviceScaleFactor, colorScheme: 'light' });
  const page = await context.newPage();
  page.on('pageerror', (error) => pageErrors.push(`page error: ${error.message}`));
  page.on('console', (message) => {
    if (message.type() !== 'error') return;
    if (monitorGone.has(page) && /^Failed to load resource: net::ERR_/.test(message.text())) return;
    pageErrors.push(`console error: ${message.text()}`);
  });
  await page.goto(url);
  await poll('the page to receive the map', page, () => window.leaseholdMap && window.leaseholdMap.partitions > 0);
  return page;
}

function checkPageErrors() {
  if (pageErrors.length) throw new Failure(`the page reported errors:\n  ${pageErrors.join('\n  ')}`);
}

// Polls `fn` in the page until it returns an object with ok true (or any truthy non-object),
// failing on a page error or at the deadline with the last answer as the reason.
async function poll(what, page, fn, arg, timeoutMs = WAIT_MS) {
  const deadline = Date.now() + timeoutMs;
  let last = null;
  for (;;) {
    checkPageErrors();
    last = await page.evaluate(fn, arg);
    if (last && (typeof last !== 'object' || last.ok)) return last;
    if (Date.now() > deadline) {
      throw new Failure(`timed out after ${timeoutMs / 1000} s waiting for ${what}; last seen: ${JSON.stringify(last)}`);
    }
    await new Promise((resolve) => setTimeout(resolve, 200));
  }
}

// In the page: reads every cell's centre pixel from the canvas and compares it with what the
// cell should show. `expect` is 'owners' (each cell the colour of its owner) or a state char.
function sampleCells({ expect, tolerance }) {
  const map = window.leaseholdMap;
  const canvas = document.getElementById('map');
  const data = canvas.getContext('2d').getImageData(0, 0, canvas.width, canvas.height).data;
  const scale = canvas.width / canvas.clientWidth;
  const near = (a, b) => Math.abs(a[0] - b[0]) <= tolerance && Math.abs(a[1] - b[1]) <= tolerance && Math.abs(a[2] - b[2]) <= tolerance;
  const pixels = {};
  const owners = {};
  const wrong = [];
  const want = expect === 'owners' ? null : map.stateColor(expect);
  for (let p = 0; p < map.partitions; p++) {
    const c = map.cellCenter(p);
    const x = Math.floor(c.x * scale);
    const y = Math.floor(c.y * scale);
    const i = (y * canvas.width + x) * 4;
    const px = [data[i], data[i + 1], data[i + 2]];
    let target = want;
    if (expect === 'owners') {
      const owner = map.ownerOf(p);
      if (owner === null) {
        if (wrong.length < 5) wrong.push({ p, owner: null, state: map.stateOf(p) });
        continue;
      }
      owners[owner] = (owners[owner] || 0) + 1;
      target = map.colorOf(owner);
    }
    if (!near(px, target)) {
      if (wrong.length < 5) wrong.push({ p, pixel: px, want: target });
      continue;
    }
    const key = px.join(',');
    pixels[key] = (pixels[key] || 0) + 1;
  }
  return { partitions: map.partitions, sequence: map.sequence, owners, pixels, wrong, cell: map.cellCenter(0) };
}

async function cells(page, expect) {
  return page.evaluate(sampleCells, { expect, tolerance: 2 });
}

async function waitForCells(what, page, expect, accept, timeoutMs = WAIT_MS) {
  const deadline = Date.now() + timeoutMs;
  let last = null;
  for (;;) {
    checkPageErrors();
    last = await cells(page, expect);
    if (last.partitions > 0 && last.wrong.length === 0 && accept(last)) return last;
    if (Date.now() > deadline) {
      throw new Failure(`timed out after ${timeoutMs / 1000} s waiting for ${what}; last seen: ${JSON.stringify(last)}`);
    }
    await new Promise((resolve) => setTimeout(resolve, 250));
  }
}

async function screenshot(page, name) {
  fs.mkdirSync(outDir, { recursive: true });
  const file = path.join(outDir, name);
  await page.mouse.move(0, 0);
  await page.screenshot({ path: file, fullPage: true });
  log(`screenshot ${file}`);
}

// ------------------------------------------------------------------ the cases

async function threeNodes(browser, dir) {
  log('case 1: three nodes on 24 partitions, one killed');
  const store = ['--store', `sqlite:${path.join(dir, 'fleet.db')}`, '--group', 'web'];
  await run('init', [...store, 'init', '--partitions', '24'], { cwd: dir });
  const monitor = start('monitor', [...store, 'monitor', '--listen', '127.0.0.1:0', '--interval', '250ms'], { cwd: dir });
  const url = await listeningUrl(monitor);
  log(`monitor at ${url}`);
  const nodes = [1, 2, 3].map((i) => start(`node-${i}`, [...store, 'node', '--id', `node-${i}`,
    '--heartbeat', '500ms', '--validity', '2s', '--acquire-after', '3s', '--scan-interval', '500ms'], { cwd: dir }));

  // A device pixel ratio of 2 checks that cellCenter and the canvas agree off the 1:1 case.
  const page = await openPage(browser, url, { deviceScaleFactor: 2 });
  const spread = await waitForCells('all 24 cells drawn in the colours of three owners', page, 'owners',
    (s) => Object.keys(s.owners).length === 3 && Object.keys(s.pixels).length === 3 &&
      Object.values(s.owners).reduce((a, b) => a + b, 0) === 24);
  log(`all 24 cells show their owner's colour: ${JSON.stringify(spread.owners)}`);
  const colours = await page.evaluate(() => ['node-1', 'node-2', 'node-3'].map((n) => window.leaseholdMap.colorOf(n)));
  if (new Set(colours.map(String)).size !== 3) throw new Failure(`the three nodes do not have three colours: ${JSON.stringify(colours)}`);

  const readOnly = await page.evaluate(() => ({
    buttons: document.querySelectorAll('button').length,
    token: !document.getElementById('token-box').hidden,
    actions: window.leaseholdMap.actions,
  }));
  if (readOnly.actions || readOnly.buttons || readOnly.token) {
    throw new Failure(`a monitor without --token-file shows action controls: ${JSON.stringify(readOnly)}`);
  }

  // Hovering a cell names its partition and owner.
  const probe = 5;
  const center = await page.evaluate((p) => window.leaseholdMap.cellCenter(p), probe);
  const box = await page.locator('#map').boundingBox();
  await page.mouse.move(box.x + center.x, box.y + center.y);
  const tipText = await page.locator('#tip').innerText();
  const probeOwner = await page.evaluate((p) => window.leaseholdMap.ownerOf(p), probe);
  if (!tipText.includes(`Partition ${probe}`) || !tipText.includes(probeOwner)) {
    throw new Failure(`hovering partition ${probe} shows ${JSON.stringify(tipText)}, expected its number and ${probeOwner}`);
  }
  await page.mouse.click(box.x + center.x, box.y + center.y);
  const detail = await page.locator('#detail').innerText();
  if (!detail.includes(String(probe)) || !detail.includes(probeOwner)) {
    throw new Failure(`selecting partition ${probe} shows ${JSON.stringify(detail)}`);
  }
  log(`hover and selection of partition ${probe} show its owner ${probeOwner}`);

  const victim = nodes[1];
  const victimColour = await page.evaluate((n) => window.leaseholdMap.colorOf(n), victim.name);
  log(`SIGKILL ${victim.name} (it held ${spread.owners[victim.name] || 0}; its colour ${victimColour})`);
  const killedAt = Date.now();
  killGroup(victim, 'SIGKILL');
  await victim.done;
  const after = await waitForCells(`no cell in ${victim.name}'s colour and all 24 in the other two`, page, 'owners',
    (s) => !s.owners[victim.name] && !s.pixels[victimColour.join(',')] &&
      Object.keys(s.owners).length === 2 && Object.keys(s.pixels).length === 2 &&
      Object.values(s.owners).reduce((a, b) => a + b, 0) === 24);
  log(`after ${((Date.now() - killedAt) / 1000).toFixed(1)} s every cell shows a survivor: ${JSON.stringify(after.owners)}`);

  await screenshot(page, 'monitor-3-nodes.png');
  checkPageErrors();

  // With its monitor gone the page must say so rather than show a frozen map as live.
  monitorGone.add(page);
  killGroup(monitor, 'SIGKILL');
  await monitor.done;
  await poll('the page to show "disconnected"', page, () => {
    const badge = document.getElementById('conn').textContent;
    const banner = document.getElementById('stream-banner');
    return badge === 'disconnected' && !banner.hidden && { ok: true };
  });
  log('with the monitor killed the page shows "disconnected"');
  checkPageErrors();
  await page.context().close();

  await actions(browser, dir, store, nodes.filter((node) => node !== victim).map((node) => node.name));
}

// The same fleet through a second monitor that has a token: the page's buttons must reach the
// store, and the map must show what they did.
async function actions(browser, dir, store, [keep, drained]) {
  log('case 1b: actions from the page of a monitor with --token-file');
  const tokenFile = path.join(dir, 'token');
  const token = 'browser-test-token';
  fs.writeFileSync(tokenFile, `${token}\n`);
  const monitor = start('monitor (token)', [...store, 'monitor', '--listen', '127.0.0.1:0', '--interval', '250ms', '--token-file', tokenFile], { cwd: dir });
  const url = await listeningUrl(monitor);
  log(`monitor with actions at ${url}`);
  const page = await openPage(browser, url);
  const dialogs = [];
  page.on('dialog', (dialog) => {
    dialogs.push(dialog.message());
    dialog.accept();
  });
  if (!await page.evaluate(() => window.leaseholdMap.actions)) throw new Failure('the map of a monitor with --token-file says actions: false');
  await page.locator('#token').fill(token);
  const stored = await page.evaluate(() => Object.values(sessionStorage));
  if (!stored.includes(token)) throw new Failure('the token is not kept in sessionStorage');

  const toast = async (what, pattern) => {
    await page.locator('#toast').waitFor({ state: 'visible' });
    const text = await page.locator('#toast').innerText();
    if (!pattern.test(text) || await page.locator('#toast.bad').count()) throw new Failure(`${what}: the page says ${JSON.stringify(text)}`);
    await page.evaluate(() => { document.getElementById('toast').hidden = true; });
    return text;
  };
  const pixelOf = (p) => page.evaluate((q) => {
    const canvas = document.getElementById('map');
    const c = window.leaseholdMap.cellCenter(q);
    const scale = canvas.width / canvas.clientWidth;
    return Array.from(canvas.getContext('2d').getImageData(Math.floor(c.x * scale), Math.floor(c.y * scale), 1, 1).data.slice(0, 3));
  }, p);
  const same = (a, b) => a && b && a.every((v, i) => Math.abs(v - b[i]) <= 2);

  // Offline, then online, one partition through the selected-partition panel.
  const p = 7;
  const center = await page.evaluate((q) => window.leaseholdMap.cellCenter(q), p);
  const box = await page.locator('#map').boundingBox();
  await page.mouse.click(box.x + center.x, box.y + center.y);
  await page.locator('#detail button', { hasText: 'Offline' }).click();
  log(`offline ${p}: ${await toast(`offline ${p}`, /offline/)}`);
  const offline = await page.evaluate(() => window.leaseholdMap.stateColor('O'));
  for (const deadline = Date.now() + WAIT_MS; !same(await pixelOf(p), offline);) {
    checkPageErrors();
    if (Date.now() > deadline) throw new Failure(`partition ${p} not drawn offline after the button: ${await pixelOf(p)}`);
    await new Promise((resolve) => setTimeout(resolve, 200));
  }
  await page.locator('#detail button', { hasText: 'Online' }).click();
  log(`online ${p}: ${await toast(`online ${p}`, /online/)}`);
  await waitForCells(`partition ${p} owned again after online`, page, 'owners',
    (s) => Object.values(s.owners).reduce((a, b) => a + b, 0) === 24);
  log(`partition ${p} went offline and came back, as the cells show`);

  // Drain a node from its row in the members table: its colour leaves the map; undrain it and
  // it takes partitions again.
  const row = page.locator('#members-body tr', { hasText: drained });
  await row.locator('button', { hasText: 'Drain' }).click();
  log(`drain ${drained}: ${await toast(`drain ${drained}`, /draining/)}`);
  await waitForCells(`every cell in ${keep}'s colour after draining ${drained}`, page, 'owners',
    (s) => s.owners[keep] === 24);
  await row.locator('button', { hasText: 'Undrain' }).click();
  log(`undrain ${drained}: ${await toast(`undrain ${drained}`, /again/)}`);
  const back = await waitForCells(`${drained} holding partitions again after undrain`, page, 'owners',
    (s) => s.owners[drained] > 0 && Object.values(s.owners).reduce((a, b) => a + b, 0) === 24);
  log(`drain moved every cell to ${keep}; undrain gave ${drained} ${back.owners[drained]} back`);
  if (dialogs.length !== 4 || !dialogs.every((d) => /partition|drain/i.test(d))) {
    throw new Failure(`expected one confirmation per action, saw ${JSON.stringify(dialogs)}`);
  }
  checkPageErrors();
  await page.context().close();
}

async function scale(browser, dir) {
  const n = 65536;
  const probe = 40000;
  log(`case 2: ${n} partitions, monitor only`);
  const store = ['--store', `sqlite:${path.join(dir, 'big.db')}`, '--group', 'web'];
  const initStart = Date.now();
  await run('init', [...store, 'init', '--partitions', String(n)], { cwd: dir });
  log(`init of ${n} partitions took ${((Date.now() - initStart) / 1000).toFixed(1)} s`);
  const monitor = start('monitor', [...store, 'monitor', '--listen', '127.0.0.1:0', '--interval', '250ms'], { cwd: dir });
  const url = await listeningUrl(monitor);
  log(`monitor at ${url}`);

  const opened = Date.now();
  const page = await openPage(browser, url);
  const [released, background] = await page.evaluate(() => [window.leaseholdMap.stateColor('R'), window.leaseholdMap.backgroundColor]);
  if (released.every((v, i) => Math.abs(v - background[i]) <= 2)) {
    throw new Failure(`released cells ${released} would not stand out from the background ${background}`);
  }
  // Every centre pixel in the released colour: no cell left undrawn (background) or misplaced.
  const all = await waitForCells(`all ${n} cells drawn as released`, page, 'R', (s) => s.partitions === n);
  const geometry = await page.evaluate(() => {
    const c = document.getElementById('map');
    const a = window.leaseholdMap.cellCenter(0);
    const b = window.leaseholdMap.cellCenter(1);
    return { width: c.clientWidth, height: c.clientHeight, pitch: b.x - a.x };
  });
  log(`all ${n} cell centres show the released colour ${Object.keys(all.pixels)[0]} ` +
    `(${geometry.width}x${geometry.height} CSS px, ${geometry.pitch} px per cell), ${Date.now() - opened} ms after opening`);

  // Watch for the change in the page itself, so that the figure is not the round trip of
  // this process's polling.
  await page.evaluate((p) => {
    const map = window.leaseholdMap;
    const canvas = document.getElementById('map');
    const g = canvas.getContext('2d');
    const want = map.stateColor('O');
    const scale = canvas.width / canvas.clientWidth;
    window.__offlineSeen = null;
    const timer = setInterval(() => {
      const c = map.cellCenter(p);
      const px = g.getImageData(Math.floor(c.x * scale), Math.floor(c.y * scale), 1, 1).data;
      if (Math.abs(px[0] - want[0]) <= 2 && Math.abs(px[1] - want[1]) <= 2 && Math.abs(px[2] - want[2]) <= 2) {
        window.__offlineSeen = { seenAt: Date.now(), drawnAt: map.drawnAt, state: map.stateOf(p) };
        clearInterval(timer);
      }
    }, 2);
  }, probe);
  await run('offline', [...store, 'offline', String(probe)], { cwd: dir, timeoutMs: WAIT_MS });
  const exitedAt = Date.now();
  const seen = await poll(`partition ${probe} to be drawn offline`, page,
    () => window.__offlineSeen && { ok: true, ...window.__offlineSeen });
  const drawn = seen.drawnAt >= exitedAt && seen.drawnAt <= seen.seenAt ? seen.drawnAt : seen.seenAt;
  console.log(`monitor redraw after a store change at ${n} partitions: ${drawn - exitedAt} ms`);

  // Nothing else moved: the other cells still show released.
  const rest = await cells(page, 'R');
  if (rest.wrong.length !== 1 || rest.wrong[0].p !== probe) {
    throw new Failure(`after offline ${probe}, cells other than it changed: ${JSON.stringify(rest.wrong)}`);
  }
  // Selected, so that the picture shows where it is.
  const center = await page.evaluate((p) => window.leaseholdMap.cellCenter(p), probe);
  const box = await page.locator('#map').boundingBox();
  await page.mouse.click(box.x + center.x, box.y + center.y);
  const detail = await page.locator('#detail').innerText();
  if (!detail.includes(String(probe)) || !/offline/.test(detail)) throw new Failure(`partition ${probe} selected shows ${JSON.stringify(detail)}`);
  await screenshot(page, 'monitor-65536.png');
  checkPageErrors();
  await page.context().close();
}

// ------------------------------------------------------------------ main

// A node restarting in place: its cells keep the released fill, framed in its colour, until
// it is back and fills them again; the other node's cells never change hands.
async function restartInPlace(browser, dir) {
  log('case 3: a node restarting in place on 8 partitions');
  const store = ['--store', `sqlite:${path.join(dir, 'restart.db')}`, '--group', 'restart'];
  await run('init', [...store, 'init', '--partitions', '8', '--validity', '2s', '--acquire-after', '10s'], { cwd: dir });
  await run('window', [...store, 'timings', '--restart-window', '40s'], { cwd: dir });
  const monitor = start('monitor', [...store, 'monitor', '--listen', '127.0.0.1:0', '--interval', '250ms'], { cwd: dir });
  const url = await listeningUrl(monitor);
  const flags = ['--heartbeat', '500ms', '--validity', '2s', '--acquire-after', '10s', '--scan-interval', '500ms',
    '--restart-in-place'];
  const node = (name) => start(name, [...store, 'node', '--id', name, ...flags], { cwd: dir });
  const restarting = node('node-a');
  node('node-b');
  const page = await openPage(browser, url);
  const before = await waitForCells('four cells for each node', page, 'owners',
    (s) => s.owners['node-a'] === 4 && s.owners['node-b'] === 4);
  const ofA = await page.evaluate(() => [...Array(8).keys()].filter((p) => window.leaseholdMap.ownerOf(p) === 'node-a'));
  const colourA = await page.evaluate(() => window.leaseholdMap.colorOf('node-a'));
  const released = await page.evaluate(() => window.leaseholdMap.stateColor('R'));
  log(`node-a holds ${ofA.join(' ')} (${JSON.stringify(before.owners)}); SIGTERM, restarting in place`);
  killGroup(restarting, 'SIGTERM');
  await restarting.done;
  const pixel = (p, where) => page.evaluate(([q, w]) => {
    const canvas = document.getElementById('map');
    const c = w === 'edge' ? window.leaseholdMap.cellEdge(q) : window.leaseholdMap.cellCenter(q);
    const scale = canvas.width / canvas.clientWidth;
    return Array.from(canvas.getContext('2d').getImageData(Math.floor(c.x * scale), Math.floor(c.y * scale), 1, 1).data.slice(0, 3));
  }, [p, where]);
  const same = (a, b) => a && b && a.every((v, i) => Math.abs(v - b[i]) <= 2);
  const framed = async () => {
    for (const p of ofA) {
      const reserved = await page.evaluate((q) => window.leaseholdMap.reservedFor(q), p);
      if (reserved !== 'node-a' || !same(await pixel(p, 'centre'), released) || !same(await pixel(p, 'edge'), colourA)) {
        return false;
      }
    }
    return true;
  };
  for (const deadline = Date.now() + WAIT_MS; !(await framed());) {
    checkPageErrors();
    if (Date.now() > deadline) {
      throw new Failure(`node-a's cells not drawn reserved: centre ${await pixel(ofA[0], 'centre')}, edge ${await pixel(ofA[0], 'edge')}`);
    }
    await new Promise((r) => setTimeout(r, 100));
  }
  const detail = await (async () => {
    const c = await page.evaluate((q) => window.leaseholdMap.cellCenter(q), ofA[0]);
    const box = await page.locator('#map').boundingBox();
    await page.mouse.click(box.x + c.x, box.y + c.y);
    return page.locator('#detail').innerText();
  })();
  // The window is 40 s and node-a comes back at once: the panel counts the time left down.
  const left = (text) => Number((/reserved for node-a \(restarting, (\d+) s left\)/.exec(text) || [])[1]);
  if (!(left(detail) > 0)) throw new Failure(`the panel of a reserved partition says ${JSON.stringify(detail)}`);
  await new Promise((r) => setTimeout(r, 2500));
  const later = await page.locator('#detail').innerText();
  if (!(left(later) < left(detail))) {
    throw new Failure(`the countdown did not move: ${JSON.stringify(detail)}, then ${JSON.stringify(later)}`);
  }
  const bar = await page.locator('#summary').innerText();
  if (!/Reserved\s+4\b/i.test(bar)) throw new Failure(`the summary bar says ${JSON.stringify(bar)}`);
  await screenshot(page, 'monitor-restart-in-place.png');
  log(`node-a's ${ofA.length} cells framed in its colour ${colourA} on the released fill; the panel says reserved with its time left`);
  node('node-a');
  const after = await waitForCells('node-a back on its four cells', page, 'owners',
    (s) => s.owners['node-a'] === 4 && s.owners['node-b'] === 4);
  const back = await page.evaluate(() => [...Array(8).keys()].filter((p) => window.leaseholdMap.ownerOf(p) === 'node-a'));
  if (back.join() !== ofA.join()) throw new Failure(`node-a came back to ${back.join(' ')}, not ${ofA.join(' ')}`);
  log(`node-a back on the same cells ${back.join(' ')}: ${JSON.stringify(after.owners)}`);
  checkPageErrors();
  await page.context().close();
}

async function main() {
  if (!fs.existsSync(bin)) throw new Failure(`no leasehold binary at ${bin} (build it, or set LEASEHOLD_BIN)`);
  if (!fs.existsSync(chromiumPath)) throw new Failure(`no browser at ${chromiumPath} (install Debian's chromium)`);
  const dir = fs.mkdtempSync(path.join(os.tmpdir(), 'leasehold-browser-'));
  log(`binary ${bin}, browser ${chromiumPath}, scratch ${dir}`);
  const browser = await chromium.launch({ executablePath: chromiumPath });
  let failed = false;
  try {
    await threeNodes(browser, dir);
    await stopAll();
    await restartInPlace(browser, dir);
    await stopAll();
    await scale(browser, dir);
  } catch (error) {
    failed = true;
    console.error(`browser-test: FAILED: ${error instanceof Failure ? error.message : error.stack}`);
    report();
  } finally {
    await browser.close().catch(() => {});
    await stopAll();
    fs.rmSync(dir, { recursive: true, force: true });
  }
  if (failed) process.exit(1);
  log('passed');
}

for (const signal of ['SIGINT', 'SIGTERM']) {
  process.on(signal, () => {
    for (const proc of processes) killGroup(proc, 'SIGKILL');
    process.exit(130);
  });
}

main().catch((error) => {
  console.error(`browser-test: FAILED: ${error instanceof Failure ? error.message : error.stack}`);
  for (const proc of processes) killGroup(proc, 'SIGKILL');
  process.exit(1);
});
