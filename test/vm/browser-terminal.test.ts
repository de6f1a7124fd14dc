/**
 * The terminal with xterm.js in a real headless Chromium (Debian's package, driven by
 * playwright-core; nothing is downloaded): the page authenticates with the bearer subprotocol,
 * as a browser must, and keystrokes go through xterm.js's own input handling.
 *
 * Nothing waits on time: each step waits for the text it expects on xterm's screen.
 */
import { test, before, after } from 'node:test';
import assert from 'node:assert/strict';
import { existsSync } from 'node:fs';
import { createRequire } from 'node:module';
import { chromium, type Browser, type Page } from 'playwright-core';
import { bearerProtocol, WEBSOCKET_PROTOCOL } from '../../src/api/websocket-auth.js';
import { Service } from '../support/service.js';

const CHROMIUM = '/usr/bin/chromium';
const skip = existsSync(CHROMIUM) ? false : 'Chromium is not installed (apt-get install chromium; .ci/run does)';
const svc = new Service();
const RT = 'browser-term';
const SCREEN_WAIT = { timeout: 120_000 };
let browser: Browser;
let page: Page;

before(async () => {
  if (skip !== false) return;
  await svc.start();
  const r = await svc.call('POST', '/v1/runtimes', { display_name: RT });
  assert.equal(r.status, 201, JSON.stringify(r.body));
  browser = await chromium.launch({ executablePath: CHROMIUM, args: ['--no-sandbox', '--disable-dev-shm-usage'] });
  page = await browser.newPage();
  const xterm = createRequire(import.meta.url).resolve('@xterm/xterm');
  await page.setContent('<!doctype html><html><body><div id="terminal"></div></body></html>');
  await page.addStyleTag({ path: xterm.replace(/lib\/xterm\.js$/, 'css/xterm.css') });
  await page.addScriptTag({ path: xterm });
}, { timeout: 900_000 });

after(async () => {
  if (skip !== false) return;
  await browser?.close();
  await svc.destroy();
});

/** What xterm.js shows: its active buffer's lines, as text. */
const screen = (): Promise<string> =>
  page.evaluate(() => {
    const buffer = (window as any).term.buffer.active;
    const lines: string[] = [];
    for (let i = 0; i < buffer.length; i++) lines.push(buffer.getLine(i).translateToString(true));
    return lines.join('\n');
  });

/** Waits until xterm's screen matches `re` (each command echoes a distinct marker). */
async function waitForScreen(re: RegExp): Promise<void> {
  await page
    .waitForFunction(
    ({ source, flags }) => {
      const buffer = (window as any).term.buffer.active;
      let text = '';
      for (let i = 0; i < buffer.length; i++) text += buffer.getLine(i).translateToString(true) + '\n';
      return new RegExp(source, flags).test(text);
    },
      { source: re.source, flags: re.flags },
      SCREEN_WAIT,
    )
    .catch(async (err: Error) => {
      throw new Error(`${err.message}\nwaiting for ${re} on this screen:\n${await screen()}`);
    });
}

test('xterm.js in Chromium: a shell through the bearer subprotocol, keystrokes, resize, Ctrl-C and exit', { skip, timeout: 600_000 }, async () => {
  const url = `${svc.url.replace('http:', 'ws:')}/v1/runtimes/${RT}/terminal?rows=24&cols=80`;
  await page.evaluate(
    ({ url, protocols }) => {
      const w = window as any;
      const term = new w.Terminal({ rows: 24, cols: 80 });
      term.open(document.getElementById('terminal'));
      w.term = term;
      w.closeCode = null;
      const ws = new WebSocket(url, protocols);
      ws.binaryType = 'arraybuffer';
      w.protocol = new Promise((resolve) => ws.addEventListener('open', () => resolve(ws.protocol)));
      ws.onmessage = (m) => {
        if (typeof m.data === 'string') w.control = JSON.parse(m.data);
        else term.write(new Uint8Array(m.data));
      };
      ws.onclose = (e) => (w.closeCode = e.code);
      term.onData((d: string) => ws.send(new TextEncoder().encode(d)));
      term.onResize(({ rows, cols }: { rows: number; cols: number }) => ws.send(JSON.stringify({ type: 'resize', rows, cols })));
      term.focus();
    },
    { url, protocols: [WEBSOCKET_PROTOCOL, bearerProtocol(svc.token)] },
  );
  assert.equal(await page.evaluate(() => (window as any).protocol), WEBSOCKET_PROTOCOL, 'the server selects vessel.v1, not the token');

  // Typed as keys into xterm.js, which turns them into the bytes a terminal sends.
  await page.keyboard.type('echo "size $(stty size) ok$((6*7))"');
  await page.keyboard.press('Enter');
  await waitForScreen(/size 24 80 ok42/);

  await page.evaluate(() => (window as any).term.resize(120, 40));
  await page.keyboard.type('echo "size $(stty size) ok$((7*7))"');
  await page.keyboard.press('Enter');
  await waitForScreen(/size 40 120 ok49/);

  // Ctrl-C reaches the foreground job: the prompt comes back and $? says SIGINT.
  await page.keyboard.type("sh -c 'echo sleeping; exec sleep 1000'");
  await page.keyboard.press('Enter');
  await waitForScreen(/^sleeping$/m);
  await page.keyboard.press('Control+C');
  await page.keyboard.type('echo "status $?"');
  await page.keyboard.press('Enter');
  await waitForScreen(/status 130/);

  await page.keyboard.type('exit 3');
  await page.keyboard.press('Enter');
  await page.waitForFunction(() => (window as any).closeCode !== null, undefined, SCREEN_WAIT);
  assert.equal(await page.evaluate(() => (window as any).closeCode), 1000);
  assert.deepEqual(await page.evaluate(() => (window as any).control), { type: 'exit', exit_code: 3, signal: null });
  assert.doesNotMatch(await screen(), /vessel\.bearer|vsl_/, 'the token is nowhere on the screen');
});
