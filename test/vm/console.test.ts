/**
 * The web console end to end: Debian's Chromium (through playwright-core; nothing is downloaded)
 * against the real service and real VMs, used as a person would, mostly by keyboard. It signs in
 * (after a wrong token is refused), creates a runtime from the form, types `uname -a` into the
 * terminal, uploads a file and downloads it back, allows a host and runs curl through exec, finds
 * the audit of the denied request, captures a checkpoint and forks it, and stores and deletes a
 * secret. Throughout, the token never appears in a URL and the page breaks no CSP rule.
 *
 * Nothing waits on time: each step waits for what it expects to see, with timeouts generous
 * enough for VMs under TCG on a shared machine. The tests run in order, on one page.
 *
 * Screenshots of the main views are taken on the way; with VESSEL_SCREENSHOTS=1 they replace
 * docs/console/*.png (docs/console.md shows them), otherwise they go to a temporary folder.
 */
import { test, before, after } from 'node:test';
import assert from 'node:assert/strict';
import { createHash, randomBytes } from 'node:crypto';
import { existsSync, mkdirSync, mkdtempSync, readFileSync, rmSync } from 'node:fs';
import { tmpdir } from 'node:os';
import { join } from 'node:path';
import { chromium, type Browser, type Page } from 'playwright-core';
import { REPO_ROOT, Service } from '../support/service.js';
import { Upstreams } from '../support/upstream.js';

const CHROMIUM = '/usr/bin/chromium';
const skip = existsSync(CHROMIUM) ? false : 'Chromium is not installed (apt-get install chromium; .ci/run does)';
const KEEP_SHOTS = process.env.VESSEL_SCREENSHOTS === '1';
const SHOTS = KEEP_SHOTS ? join(REPO_ROOT, 'docs/console') : mkdtempSync(join(tmpdir(), 'vessel-console-shots-'));
/** A VM's create (the first one makes the system template), a checkpoint or a fork, under TCG. */
const VM_WAIT = 600_000;
const RT = 'console-e2e';
const FORK = 'console-fork';

const up = new Upstreams();
let svc: Service;
let browser: Browser;
let page: Page;
let HTTP = 0;
/** Every URL the page asked for: documents, scripts, API calls, WebSockets. */
const urls: string[] = [];
const pageErrors: string[] = [];
/** Content-Security-Policy violations the page reported, across its reloads. */
const violations: string[] = [];

before(async () => {
  if (skip !== false) return;
  await up.start();
  HTTP = up.port(up.http);
  // Both names resolve for the gateway; only the one the console allows is let through.
  up.setNames({ 'allowed.test': '127.0.0.1', 'denied.test': '127.0.0.1' });
  svc = new Service({ VESSEL_EGRESS_ALLOW_CIDRS: '127.0.0.0/8', VESSEL_DNS_OVERRIDES: up.overridesFile });
  await svc.start();
  mkdirSync(SHOTS, { recursive: true });
  browser = await chromium.launch({ executablePath: CHROMIUM, args: ['--no-sandbox', '--disable-dev-shm-usage'] });
  // A laptop's screen.
  const context = await browser.newContext({ viewport: { width: 1366, height: 768 }, acceptDownloads: true });
  context.setDefaultTimeout(120_000);
  page = await context.newPage();
  page.on('request', (request) => urls.push(request.url()));
  page.on('websocket', (socket) => urls.push(socket.url()));
  page.on('framenavigated', (frame) => urls.push(frame.url()));
  page.on('pageerror', (error) => pageErrors.push(error.message));
  page.on('dialog', (dialog) => void dialog.accept());
  await page.exposeFunction('reportViolation', (text: string) => violations.push(text));
  await page.addInitScript(() => {
    const report = (window as unknown as { reportViolation: (text: string) => void }).reportViolation;
    document.addEventListener('securitypolicyviolation', (e) => report(`${e.violatedDirective} ${e.blockedURI} ${e.sample}`));
  });
}, { timeout: 900_000 });

after(async () => {
  if (skip !== false) return;
  await browser?.close();
  await svc?.destroy();
  up.close();
  if (!KEEP_SHOTS) rmSync(SHOTS, { recursive: true, force: true });
});

const shoot = (name: string) => page.screenshot({ path: join(SHOTS, `${name}.png`) });

/** What a screen reader would call the focused element. */
const focusedName = (): Promise<string> =>
  page.evaluate(() => {
    const el = document.activeElement as HTMLElement | null;
    if (el === null || el === document.body) return '';
    const labelled = el.getAttribute('aria-label') ?? (el as HTMLInputElement).labels?.[0]?.textContent ?? el.textContent ?? '';
    return labelled.replace(/\s+/g, ' ').trim();
  });

/** The names Tab (or Shift+Tab) visits, `count` presses from where the focus is. */
async function tabOrder(count: number, key = 'Tab'): Promise<string[]> {
  const names: string[] = [];
  for (let i = 0; i < count; i++) {
    await page.keyboard.press(key);
    names.push(await focusedName());
  }
  return names;
}

/** Moves the focus by keyboard alone to the control named `name`, and activates it. */
async function keyboardTo(name: string, key: 'Tab' | 'Shift+Tab'): Promise<void> {
  const seen: string[] = [];
  for (let i = 0; i < 60; i++) {
    await page.keyboard.press(key);
    const focused = await focusedName();
    if (focused === name) return page.keyboard.press('Enter');
    seen.push(focused);
  }
  assert.fail(`${key} never reached '${name}'; it went through: ${seen.join(' | ')}`);
}

/** Waits until xterm's rows show text matching `re`. */
async function waitForScreen(re: RegExp): Promise<void> {
  await page
    .waitForFunction(({ source, flags }) => new RegExp(source, flags).test((document.querySelector('.xterm-rows')?.textContent ?? '').replace(/\u00a0/g, ' ')), { source: re.source, flags: re.flags }, { timeout: VM_WAIT })
    .catch(async (error: Error) => {
      const shown = await page.evaluate(() => document.querySelector('.xterm-rows')?.textContent ?? '(no terminal)');
      throw new Error(`${error.message}\nwaiting for ${re} on this screen:\n${shown}`);
    });
}

const section = (name: string) => page.getByRole('navigation', { name: 'Runtime sections' }).getByRole('link', { name, exact: true });

test('a wrong token is refused with an error, and nothing is kept', { skip, timeout: 300_000 }, async () => {
  await page.goto(`${svc.url}/console`);
  assert.equal(new URL(page.url()).pathname, '/console/', 'redirected to the folder');
  await page.getByLabel('Access token').fill('vsl_not-a-real-token');
  await page.keyboard.press('Enter');
  const alert = page.getByRole('alert').filter({ hasText: 'Could not sign in' });
  await alert.waitFor();
  assert.match((await alert.textContent()) ?? '', /not accepted \(unauthenticated, HTTP 401\)/);
  assert.equal(await page.evaluate(() => sessionStorage.length), 0);
  await shoot('sign-in');
});

test('signs in; from the top of the page, Tab reaches the navigation and the create form in order', { skip, timeout: 300_000 }, async () => {
  await page.getByLabel('Access token').fill(svc.token);
  await page.keyboard.press('Enter');
  await page.getByRole('heading', { name: 'Runtimes', level: 1 }).waitFor();
  assert.equal(await page.evaluate(() => sessionStorage.getItem('vessel.token')), svc.token, 'kept for this tab');
  assert.equal(await page.evaluate(() => localStorage.length), 0, 'and nowhere else');

  // A reload keeps the session and puts the focus back at the top of the document.
  await page.reload();
  await page.getByRole('heading', { name: 'Runtimes', level: 1 }).waitFor();
  assert.deepEqual(await tabOrder(9), ['Skip to content', 'Runtimes', 'Secrets', 'Sign out', 'Name', 'vCPUs', 'Memory (MiB)', 'Ingress ports', 'Create runtime']);
});

test('creates a runtime with the keyboard alone; its page opens on a terminal', { skip, timeout: VM_WAIT + 120_000 }, async () => {
  await page.keyboard.press('Shift+Tab'); // Ingress ports
  await page.keyboard.type('8000');
  for (let i = 0; i < 3; i++) await page.keyboard.press('Shift+Tab');
  assert.equal(await focusedName(), 'Name');
  await page.keyboard.type(RT);
  await keyboardTo('Create runtime', 'Tab');
  await page.getByRole('heading', { name: RT, level: 1 }).waitFor({ timeout: VM_WAIT });
  await page.getByRole('status').filter({ hasText: `Connected to ${RT}.` }).waitFor({ timeout: VM_WAIT });
  assert.equal((await svc.call('GET', `/v1/runtimes/${RT}`)).body.data.status, 'running');
});

test('types uname -a into the terminal and sees the output; F6 leaves the terminal', { skip, timeout: VM_WAIT }, async () => {
  assert.equal(await focusedName(), 'Terminal input', 'the terminal has the focus once connected');
  await page.keyboard.type('uname -a');
  await page.keyboard.press('Enter');
  await waitForScreen(new RegExp(`Linux ${RT} \\S+ .*GNU/Linux`));
  await shoot('terminal');

  await page.keyboard.press('F6');
  assert.equal(await focusedName(), 'Disconnect');
  // Backwards from the terminal's toolbar: the sections, then the lifecycle buttons.
  assert.deepEqual(await tabOrder(12, 'Shift+Tab'), ['Checkpoints', 'Audits', 'Ingress', 'Egress', 'Exec', 'Files', 'Terminal', 'Delete', 'Resume', 'Pause', 'Stop', 'Start']);
});

test('uploads a file into the runtime and downloads it back, byte for byte', { skip, timeout: 300_000 }, async () => {
  await keyboardTo('Files', 'Tab');
  await page.getByRole('heading', { name: 'Files', level: 2 }).waitFor();
  await page.getByRole('table').getByText('Contents of /root').waitFor();
  const bytes = Buffer.concat([Buffer.from(Array.from({ length: 256 }, (_, i) => i)), randomBytes(300 * 1024)]);
  await page.getByLabel('Upload files into this folder').setInputFiles({ name: 'console-upload.bin', mimeType: 'application/octet-stream', buffer: bytes });
  await page.getByRole('row', { name: /console-upload\.bin/ }).waitFor();
  await shoot('files');

  const sha = createHash('sha256').update(bytes).digest('hex');
  const inGuest = await svc.call('POST', `/v1/runtimes/${RT}/exec`, { command: 'sha256sum /root/console-upload.bin' });
  assert.equal(inGuest.body.data.stdout.split(' ')[0], sha, 'the guest has the same bytes');

  const [download] = await Promise.all([page.waitForEvent('download'), page.getByRole('button', { name: 'Download console-upload.bin' }).click()]);
  assert.equal(download.suggestedFilename(), 'console-upload.bin');
  assert.ok(readFileSync(await download.path()).equals(bytes), 'downloaded back as uploaded');
});

test('allows a host; through exec the VM reaches it, and the audit of a denied request shows', { skip, timeout: 300_000 }, async () => {
  await section('Egress').click();
  await page.getByLabel('Host or pattern').fill('allowed.test');
  await page.getByRole('button', { name: 'Add host' }).click();
  await page.getByRole('list', { name: 'Allowed hosts' }).getByText('allowed.test', { exact: true }).waitFor();
  assert.deepEqual((await svc.call('GET', `/v1/runtimes/${RT}`)).body.data.egress_policy, { enabled: true, allowed_hosts: ['allowed.test'] });
  await shoot('egress');

  await section('Exec').click();
  // denied.test is refused by the gateway's DNS, so its request is sent to the allowed name's
  // address: the gateway reads the Host, denies it and audits it.
  const curl = (args: string) => `curl -sS -m 8 -o /dev/null ${args}`;
  await page
    .getByLabel('Command')
    .fill(`${curl(`-w 'allowed %{http_code}\\n' http://allowed.test:${HTTP}/from-console`)}; ${curl(`-w 'denied %{http_code}\\n' -H 'Host: denied.test' http://allowed.test:${HTTP}/denied-from-console`)}`);
  await page.getByRole('button', { name: 'Run', exact: true }).click();
  await page.getByRole('status').filter({ hasText: 'Exit status 0' }).waitFor();
  const output = (await page.getByLabel('Output').textContent()) ?? '';
  assert.match(output, /allowed 200/);
  assert.match(output, /denied 403/);
  assert.equal(up.hits('/denied-from-console').length, 0, 'the denied request never left the gateway');
  await shoot('exec');

  await section('Audits').click();
  await page.getByLabel('Decision').selectOption({ label: 'Denied' });
  const denied = page.getByRole('row').filter({ hasText: 'denied.test' });
  await denied.filter({ hasText: 'host_not_allowed' }).waitFor();
  assert.match((await denied.first().textContent()) ?? '', /http_request.*deny.*denied\.test.*GET \/denied-from-console 403.*host_not_allowed/);
  assert.equal(await page.getByRole('row').filter({ hasText: 'allowed.test' }).count(), 0, 'the filter hides what was allowed');
  await page.getByLabel('Host contains').fill('denied');
  await shoot('audits');
  await page.getByLabel('Decision').selectOption({ label: 'Allowed' });
  await page.getByLabel('Host contains').fill('');
  await page.getByRole('row').filter({ hasText: 'GET /from-console 200' }).waitFor();
});

test('shows the ingress URL of the port given at creation', { skip, timeout: 120_000 }, async () => {
  await section('Ingress').click();
  const id = (await svc.call('GET', `/v1/runtimes/${RT}`)).body.data.id as string;
  await page.getByRole('link', { name: `http://8000-${id}.localhost:${svc.ingressPort}/` }).waitFor();
});

test('captures a checkpoint, forks it into a runtime that has the uploaded file, then deletes both', { skip, timeout: 3 * VM_WAIT }, async () => {
  await section('Checkpoints').click();
  await page.getByLabel('Checkpoint name').fill('console-cp');
  await page.getByRole('button', { name: 'Create checkpoint' }).click();
  await page.getByRole('row').filter({ hasText: 'console-cp' }).filter({ hasText: 'ready' }).waitFor({ timeout: VM_WAIT });
  await page.getByRole('button', { name: 'Fork console-cp…' }).click();
  assert.equal(await focusedName(), 'New runtime name');
  await page.keyboard.type(FORK);
  await shoot('checkpoints');
  await page.keyboard.press('Enter');
  await page.getByRole('heading', { name: FORK, level: 1 }).waitFor({ timeout: VM_WAIT });
  await page.getByRole('status').filter({ hasText: `Connected to ${FORK}.` }).waitFor({ timeout: VM_WAIT });
  await page.keyboard.type('sha256sum /root/console-upload.bin');
  await page.keyboard.press('Enter');
  const sha = (await svc.call('POST', `/v1/runtimes/${RT}/exec`, { command: 'sha256sum /root/console-upload.bin' })).body.data.stdout.split(' ')[0] as string;
  await waitForScreen(new RegExp(`${sha}  /root/console-upload\\.bin`));

  await section('Checkpoints').click();
  await page.getByRole('button', { name: 'Delete console-cp' }).click();
  await page.getByRole('row').filter({ hasText: 'console-cp' }).waitFor({ state: 'detached' });
  assert.equal((await svc.call('GET', '/v1/checkpoints/console-cp')).status, 404);

  await page.getByRole('button', { name: 'Delete', exact: true }).click();
  await page.getByRole('heading', { name: 'Runtimes', level: 1 }).waitFor();
  await page.getByRole('link', { name: RT, exact: true }).waitFor();
  assert.equal(await page.getByRole('link', { name: FORK, exact: true }).count(), 0);
  assert.equal((await svc.call('GET', `/v1/runtimes/${FORK}`)).status, 404);
  await page.getByRole('row').filter({ hasText: RT }).filter({ hasText: 'running' }).waitFor();
  await shoot('runtimes');
});

test('stores a secret and deletes it; its value is never on the page', { skip, timeout: 120_000 }, async () => {
  const value = `sk-console-${randomBytes(12).toString('hex')}`;
  await page.getByRole('navigation', { name: 'Console' }).getByRole('link', { name: 'Secrets' }).click();
  await page.getByLabel('Name').fill('console-secret');
  await page.getByLabel('Value').fill(value);
  await page.getByRole('button', { name: 'Store secret' }).click();
  await page.getByRole('row').filter({ hasText: 'console-secret' }).waitFor();
  const everything = await page.evaluate(() => document.documentElement.outerHTML + [...document.querySelectorAll('input')].map((i) => i.value).join('\n'));
  assert.ok(!everything.includes(value), 'the value is not shown, nor left in a field');
  assert.equal((await svc.call('GET', '/v1/secrets/console-secret')).body.data.display_name, 'console-secret');
  await shoot('secrets');

  await page.getByRole('button', { name: 'Delete secret console-secret' }).click();
  await page.getByRole('row').filter({ hasText: 'console-secret' }).waitFor({ state: 'detached' });
  assert.equal((await svc.call('GET', '/v1/secrets/console-secret')).status, 404);
});

test('signs out; the token was never in a URL, and the page broke no CSP rule', { skip, timeout: 120_000 }, async () => {
  await page.getByRole('button', { name: 'Sign out' }).click();
  await page.getByRole('heading', { name: 'Sign in to Vessel' }).waitFor();
  assert.equal(await page.evaluate(() => sessionStorage.length), 0);
  assert.ok(urls.some((u) => u.includes('/terminal?')), 'the terminal sockets were seen');
  assert.ok(urls.length > 20);
  for (const url of urls) assert.ok(!url.includes(svc.token) && !url.includes('vessel.bearer'), `token in ${url}`);
  assert.deepEqual(violations, []);
  assert.deepEqual(pageErrors, []);
});
