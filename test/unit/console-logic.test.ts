/**
 * The console's pure functions (routes, ingress ports and URLs, paths, audit fields), run in Node.
 * The console is browser code that tsc does not emit (console/tsconfig.json only type-checks), so
 * esbuild bundles the modules under test into a temporary ES module first, as the build does.
 */
import { test, before } from 'node:test';
import assert from 'node:assert/strict';
import { loadConsoleModules } from '../support/console-modules.js';

interface Logic {
  parseRoute(hash: string): unknown;
  href(route: unknown): string;
  parseIngress(text: string): unknown;
  joinPath(dir: string, name: string): string;
  parentOf(path: string): string;
  decisionOf(audit: unknown): unknown;
}

let logic: Logic;

before(async () => {
  logic = await loadConsoleModules<Logic>([
    "export { parseRoute, href } from './router.js';",
    "export { parseIngress } from './views/runtimes.js';",
    "export { joinPath, parentOf } from './views/files.js';",
    "export { decisionOf } from './views/audits.js';",
  ]);
});

test('routes: the hash names a view; names are encoded both ways; an in-page link is no route', () => {
  assert.deepEqual(logic.parseRoute(''), { view: 'runtimes' });
  assert.deepEqual(logic.parseRoute('#/secrets'), { view: 'secrets' });
  assert.deepEqual(logic.parseRoute('#/runtimes/web.1/files'), { view: 'runtime', runtime: 'web.1', section: 'files' });
  assert.deepEqual(logic.parseRoute('#/runtimes/web.1'), { view: 'runtime', runtime: 'web.1', section: 'terminal' });
  assert.deepEqual(logic.parseRoute('#/runtimes/web.1/nonsense'), { view: 'runtime', runtime: 'web.1', section: 'terminal' });
  assert.deepEqual(logic.parseRoute('#/elsewhere'), { view: 'runtimes' });
  assert.equal(logic.parseRoute('#main'), null);
  const route = { view: 'runtime', runtime: 'a b/c', section: 'audits' };
  assert.equal(logic.href(route), '#/runtimes/a%20b%2Fc/audits');
  assert.deepEqual(logic.parseRoute(logic.href(route)), route);
});

test('ingress ports: http unless said, separated by commas or spaces; anything else is refused by name', () => {
  assert.deepEqual(logic.parseIngress(''), []);
  assert.deepEqual(logic.parseIngress(' 8000, 8443/HTTPS 3000 '), [
    { runtime_port: 8000, protocol: 'http' },
    { runtime_port: 8443, protocol: 'https' },
    { runtime_port: 3000, protocol: 'http' },
  ]);
  for (const bad of ['0', '65536', '80/ftp', 'http', '-1']) assert.throws(() => logic.parseIngress(bad), new RegExp(`'${bad.replace('/', '\\/')}' is not a port`));
});

test('paths: joined and climbed as absolute POSIX paths', () => {
  assert.equal(logic.joinPath('/', 'etc'), '/etc');
  assert.equal(logic.joinPath('/root', 'a.txt'), '/root/a.txt');
  assert.equal(logic.parentOf('/root/dir'), '/root');
  assert.equal(logic.parentOf('/root/'), '/');
  assert.equal(logic.parentOf('/root'), '/');
  assert.equal(logic.parentOf('/'), '/');
});

test('audits: what each kind says, in the columns the table shows', () => {
  const audit = (kind: string, fields: Record<string, unknown>) => ({ id: 'x', created_at: '2026-01-01T00:00:00.000Z', runtime_id: 'r', category: 'egress', payload: { egress: { kind, [kind]: fields } } });
  assert.deepEqual(logic.decisionOf(audit('http_request', { action: 'deny', host: 'denied.test', ip: '127.0.0.1', port: 80, reason: 'host_not_allowed', method: 'GET', path: '/x', status: 403, rule_ids: [] })), {
    kind: 'http_request',
    action: 'deny',
    host: 'denied.test',
    port: '80',
    request: 'GET /x 403',
    reason: 'host_not_allowed',
  });
  assert.deepEqual(logic.decisionOf(audit('tcp_connection', { action: 'allow', ip: '198.18.0.1', port: 5432, reason: 'address_pinned_by_dns' })), {
    kind: 'tcp_connection',
    action: 'allow',
    host: '198.18.0.1',
    port: '5432',
    request: '',
    reason: 'address_pinned_by_dns',
  });
  assert.deepEqual(logic.decisionOf(audit('icmp_drop', { action: 'deny', count: 3, reason: 'icmp_dropped' })), { kind: 'icmp_drop', action: 'deny', host: '', port: '', request: '3 packets', reason: 'icmp_dropped' });
});
