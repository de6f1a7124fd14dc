/**
 * `vessel token` through the API and on a data directory, which of the two each invocation
 * picks, and `vessel logs`: the compiled CLI as a child process against the real API (fake
 * driver) over a real store.
 */
import { test, before, after, describe } from 'node:test';
import assert from 'node:assert/strict';
import { existsSync, mkdtempSync, rmSync } from 'node:fs';
import type { AddressInfo } from 'node:net';
import { tmpdir } from 'node:os';
import { join } from 'node:path';
import { apiHarness, type ApiHarness } from '../support/api-harness.js';
import { cliUser, type CliUser } from '../support/cli.js';
import type { FakeDriver } from '../support/fake-driver.js';
import { tokenTarget } from '../../src/cli/commands/token.js';
import { SqliteStore } from '../../src/store/sqlite-store.js';
import { sqliteFile } from '../../src/store/open-store.js';

let h: ApiHarness;
let url: string;
let admin: CliUser;

before(async () => {
  h = await apiHarness();
  await h.app.listen({ port: 0, host: '127.0.0.1' });
  url = `http://127.0.0.1:${(h.app.server.address() as AddressInfo).port}`;
  admin = cliUser({ VESSEL_URL: url, VESSEL_TOKEN: h.admin });
});
after(() => h.close());

const json = (r: { out: string }) => JSON.parse(r.out);

describe('through the API', () => {
  test('create prints the value once; ls, get and revoke never; the revoked token is refused', async () => {
    const made = await admin.run(['token', 'create', '--tenant', 'acme', '--scopes', 'runtimes:read,exec', '--name', 'ci', '--json']);
    assert.equal(made.status, 0, made.err);
    const created = json(made);
    assert.match(created.token, /^vsl_/);
    assert.deepEqual([created.tenant, created.name, created.scopes], ['acme', 'ci', ['runtimes:read', 'exec']]);
    assert.equal((await h.call('GET', '/v1/runtimes', undefined, created.token)).status, 200);

    const ls = await admin.run(['token', 'ls', '--tenant', 'acme', '--json']);
    assert.equal(ls.status, 0, ls.err);
    assert.deepEqual(json(ls).map((t: { id: string }) => t.id), [created.id]);
    const table = await admin.run(['token', 'ls']);
    assert.match(table.out, /^ID\s+TENANT\s+NAME\s+SCOPES\s+AGE\s+STATE\n/);
    assert.match(table.out, new RegExp(`${created.id}\\s+acme\\s+ci\\s+runtimes:read,exec\\s+\\S+\\s+active`));
    const human = await admin.run(['token', 'get', created.id]);
    assert.match(human.out, /^id:\s+\S+\ntenant:\s+acme\n/);
    for (const r of [ls, table, human]) assert.ok(!r.out.includes(created.token));

    const revoked = await admin.run(['token', 'revoke', created.id]);
    assert.equal(revoked.status, 0, revoked.err);
    assert.equal(revoked.out, `revoked ${created.id}\n`);
    assert.equal((await h.call('GET', '/v1/runtimes', undefined, created.token)).status, 401);
    assert.match((await admin.run(['token', 'get', created.id])).out, /state:\s+revoked/);
  });

  test('the human create shows the value, and errors have their exit statuses', async () => {
    const made = await admin.run(['token', 'create', '--tenant', 'acme', '--scopes', 'exec']);
    assert.equal(made.status, 0, made.err);
    assert.match(made.out, /^token:\s+vsl_[A-Za-z0-9_-]{43}\nid:/);
    const badScope = await admin.run(['token', 'create', '--tenant', 'acme', '--scopes', 'root']);
    assert.equal(badScope.status, 2);
    assert.match(badScope.err, /invalid_argument/);
    assert.equal((await admin.run(['token', 'get', 'nope'])).status, 3);
    const tenantUser = cliUser({ VESSEL_URL: url, VESSEL_TOKEN: await h.token('acme', ['runtimes:read', 'runtimes:write', 'exec']) });
    const denied = await tenantUser.run(['token', 'ls']);
    assert.equal(denied.status, 4);
    assert.match(denied.err, /permission_denied/);
  });
});

describe('on a data directory', () => {
  test('--data-dir works without the API; create prints one JSON line with the value', async () => {
    const dir = mkdtempSync(join(tmpdir(), 'vessel-cli-data-'));
    try {
      // A configured token does not matter when --data-dir names a directory.
      const made = await admin.run(['token', 'create', '--data-dir', dir, '--tenant', 'local', '--scopes', 'admin']);
      assert.equal(made.status, 0, made.err);
      const created = JSON.parse(made.out);
      assert.match(created.token, /^vsl_/);
      assert.equal(created.tenant, 'local');
      assert.equal((await h.call('GET', `/v1/tokens/${created.id}`)).status, 404, 'not in the API service\'s store');
      const store = new SqliteStore(sqliteFile(dir));
      try {
        assert.equal((await store.tokens.findById(created.id))?.tenantId, 'local');
      } finally {
        await store.close();
      }
      const ls = await admin.run(['token', 'ls', '--data-dir', dir]);
      assert.deepEqual(ls.out.trim().split('\n').map((l) => JSON.parse(l).id), [created.id]);
      assert.ok(!ls.out.includes(created.token));
      assert.equal((await admin.run(['token', 'revoke', '--data-dir', dir, created.id])).status, 0);
      assert.notEqual(JSON.parse((await admin.run(['token', 'get', '--data-dir', dir, created.id])).out).revoked_at, null);
    } finally {
      rmSync(dir, { recursive: true, force: true });
    }
  });

  test('a service named without a token is a usage error, not a new database here', async () => {
    const lost = cliUser({ VESSEL_URL: url });
    const r = await lost.run(['token', 'ls']);
    assert.equal(r.status, 2);
    assert.match(r.err, /no token/);
    assert.ok(!existsSync(join(lost.home, 'data')));
  });

  test('with no service or token configured, ./data is used, as on a fresh host', async () => {
    const fresh = cliUser();
    const made = await fresh.run(['token', 'create', '--tenant', 'acme', '--scopes', 'exec']);
    assert.equal(made.status, 0, made.err);
    assert.ok(existsSync(sqliteFile(join(fresh.home, 'data'))));
  });

  test('which place each invocation picks', () => {
    const none = { HOME: '/nonexistent', XDG_CONFIG_HOME: '/nonexistent' };
    assert.equal(tokenTarget('/d', { ...none, VESSEL_TOKEN: 't', VESSEL_DATA_DIR: '/e' }), '/d');
    assert.equal(tokenTarget(undefined, { ...none, VESSEL_TOKEN: 't', VESSEL_DATA_DIR: '/e' }), '/e');
    assert.equal(tokenTarget(undefined, { ...none, VESSEL_TOKEN: 't' }), null);
    assert.equal(tokenTarget(undefined, { ...none, VESSEL_URL: 'http://vessel.example' }), null);
    assert.equal(tokenTarget(undefined, none), './data');
  });
});

describe('vessel logs', () => {
  test("prints the end of a runtime's console; --bytes bounds it, --json gives the API's object", async () => {
    const rt = (await h.call('POST', '/v1/runtimes', { display_name: 'cli-logs' })).body.data;
    (h.driver as FakeDriver).consoleLogs.set(rt.id, Buffer.from('Linux version 6\nboot \x1b]0;pwned\x07 done\n'));
    const all = await admin.run(['logs', 'cli-logs']);
    assert.equal(all.status, 0, all.err);
    // The guest's control characters are shown, not obeyed (test/unit/cli-guest-text.test.ts).
    assert.equal(all.out, 'Linux version 6\nboot ^[]0;pwned^G done\n');
    assert.equal(all.err, '');
    const end = await admin.run(['logs', 'cli-logs', '--bytes', '5']);
    assert.equal(end.out, 'done\n'.slice(-5));
    assert.match(end.err, /earlier output not shown/);
    assert.deepEqual(json(await admin.run(['logs', 'cli-logs', '--bytes', '5', '--json'])), { output: 'done\n'.slice(-5), bytes: 5, truncated: true });
    assert.equal((await admin.run(['logs', 'missing'])).status, 3);
    assert.equal((await admin.run(['logs', 'cli-logs', '--bytes', '0'])).status, 2);
  });
});
