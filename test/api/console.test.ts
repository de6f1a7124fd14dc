/**
 * The web console's static serving (src/api/console.ts), through the real API: the files need no
 * token, every answer carries the strict Content-Security-Policy, the page has no inline script or
 * style for it to forbid, nothing outside the built folder is reachable, and the document the page
 * reads says where ingress listens. The console is built here into a folder of the test's own, by
 * the same function `npm run build:console` runs.
 */
import { test, before, after } from 'node:test';
import assert from 'node:assert/strict';
import { mkdtempSync, readdirSync, rmSync } from 'node:fs';
import { tmpdir } from 'node:os';
import { join } from 'node:path';
import { CONSOLE_CSP } from '../../src/api/console.js';
import { buildConsole } from '../../scripts/build-console.js';
import { apiHarness, type ApiHarness } from '../support/api-harness.js';

let built: string;
let h: ApiHarness;

before(async () => {
  built = mkdtempSync(join(tmpdir(), 'vessel-console-'));
  await buildConsole(built);
  h = await apiHarness({ console: { root: built } });
});

after(async () => {
  await h.close();
  rmSync(built, { recursive: true, force: true });
});

const get = (url: string, headers: Record<string, string> = {}) => h.app.inject({ method: 'GET', url, headers });

test('/console redirects to /console/, whose page is served without a token, under the strict CSP', async () => {
  const bare = await get('/console');
  assert.equal(bare.statusCode, 301);
  assert.equal(bare.headers.location, '/console/');

  const page = await get('/console/');
  assert.equal(page.statusCode, 200);
  assert.match(String(page.headers['content-type']), /^text\/html/);
  assert.equal(page.headers['content-security-policy'], CONSOLE_CSP);
  assert.equal(page.headers['x-content-type-options'], 'nosniff');
  assert.equal(page.headers['referrer-policy'], 'no-referrer');
  assert.equal(page.headers['cache-control'], 'no-cache');
  assert.ok(page.headers.etag, 'revalidated by ETag');
  for (const directive of ["default-src 'none'", "script-src 'self'", "style-src 'self'", "connect-src 'self'", "frame-ancestors 'none'", "form-action 'none'"]) {
    assert.ok(CONSOLE_CSP.split('; ').includes(directive), directive);
  }
  assert.doesNotMatch(CONSOLE_CSP, /unsafe-inline|unsafe-eval|\*/);
});

test('the page has no inline script, style or handler for the policy to refuse', async () => {
  const html = (await get('/console/')).body;
  const scripts = [...html.matchAll(/<script\b([^>]*)>([\s\S]*?)<\/script>/g)];
  assert.equal(scripts.length, 1);
  assert.match(scripts[0]![1]!, /\bsrc="main\.js"/);
  assert.equal(scripts[0]![2]!.trim(), '', 'no inline code');
  assert.doesNotMatch(html, /<style\b|\sstyle=|\son[a-z]+=|javascript:/i);
  assert.match(html, /<link rel="stylesheet" href="console\.css">/);
});

test('the bundle and stylesheet are served with their types, pre-compressed when the browser accepts it', async () => {
  const js = await get('/console/main.js');
  assert.equal(js.statusCode, 200);
  assert.match(String(js.headers['content-type']), /^(application|text)\/javascript/);
  assert.equal(js.headers['content-security-policy'], CONSOLE_CSP);
  assert.ok(js.body.includes('vessel.bearer.'), 'the SDK is in the bundle');
  const br = await get('/console/main.js', { 'accept-encoding': 'br, gzip' });
  assert.equal(br.headers['content-encoding'], 'br');
  assert.ok(br.rawPayload.length < js.rawPayload.length / 2, 'smaller compressed');
  const css = await get('/console/console.css', { 'accept-encoding': 'gzip' });
  assert.equal(css.statusCode, 200);
  assert.equal(css.headers['content-encoding'], 'gzip');
  assert.match(String(css.headers['content-type']), /^text\/css/);
  const head = await h.app.inject({ method: 'HEAD', url: '/console/console.css' });
  assert.equal(head.statusCode, 200);
  assert.equal(head.body, '');
});

test('nothing else is reachable: unknown files and escapes are 404 envelopes, other methods 405', async () => {
  for (const url of ['/console/nope.js', '/console/../package.json', '/console/%2e%2e/package.json', '/console/..%2f..%2fpackage.json', '/console/.hidden']) {
    const r = await get(url);
    assert.equal(r.statusCode, 404, url);
    assert.equal(JSON.parse(r.body).error.code, 'not_found', url);
  }
  const post = await h.app.inject({ method: 'POST', url: '/console/' });
  assert.equal(post.statusCode, 405);
  assert.equal(JSON.parse(post.body).error.code, 'invalid_argument');
});

test('the console is not in the OpenAPI document, and the API still wants its token', async () => {
  const doc = JSON.parse((await get('/openapi.json')).body) as { paths: Record<string, unknown> };
  assert.deepEqual(Object.keys(doc.paths).filter((p) => p.startsWith('/console')), []);
  assert.equal((await h.call('GET', '/v1/runtimes', undefined, null)).status, 401);
});

test('a service whose console was not built says so at /console/, in the envelope', async () => {
  const empty = mkdtempSync(join(tmpdir(), 'vessel-console-empty-'));
  const bare = await apiHarness({ console: { root: empty } });
  try {
    assert.deepEqual(readdirSync(empty), []);
    const r = await bare.app.inject({ method: 'GET', url: '/console/' });
    assert.equal(r.statusCode, 503);
    assert.equal(JSON.parse(r.body).error.code, 'unavailable');
    assert.match(JSON.parse(r.body).error.message, /npm run build:console/);
  } finally {
    await bare.close();
    rmSync(empty, { recursive: true, force: true });
  }
});
