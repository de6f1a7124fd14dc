/**
 * The E2B facade (src/e2b, docs/e2b.md) over the fake driver: E2B's own SDK, unmodified and
 * configured only through its options, against the real API on a real port; and the mapping of
 * E2B's sandboxes onto runtimes, read back through Vessel's own API.
 */
import { test, before, after } from 'node:test';
import assert from 'node:assert/strict';
import type { AddressInfo } from 'node:net';
import { AuthenticationError, CommandExitError, FileNotFoundError, Sandbox, SandboxError, SandboxNotFoundError, TimeoutError } from 'e2b';
import { apiHarness, type ApiHarness } from '../support/api-harness.js';

let api: ApiHarness;
let base: string;
/** A token of tenant `acme` with the scopes a user of E2B's SDK needs. */
let key: string;

before(async () => {
  api = await apiHarness();
  await api.app.listen({ host: '127.0.0.1', port: 0 });
  base = `http://127.0.0.1:${(api.app.server.address() as AddressInfo).port}`;
  key = await api.token('acme', ['runtimes:read', 'runtimes:write', 'exec', 'files:read', 'files:write']);
});
after(() => api.close());

/** The SDK's connection options, as a user sets them (E2B_API_URL, E2B_SANDBOX_URL, E2B_API_KEY). */
const opts = (apiKey = key) => ({ apiUrl: `${base}/e2b`, sandboxUrl: `${base}/e2b-envd`, apiKey });

const listAll = async (o: Parameters<typeof Sandbox.list>[0]) => {
  const paginator = Sandbox.list(o);
  const items = [];
  while (paginator.hasNext) items.push(...(await paginator.nextItems()));
  return items;
};

test('the SDK creates a sandbox, runs a command in it, writes and reads a file, lists and kills it', async () => {
  const sbx = await Sandbox.create({ ...opts(), metadata: { team: 'blue', note: 'a&b=c d%' }, timeoutMs: 120_000 });
  // The fake guest answers a command with its command line: the SDK runs each through bash -l -c.
  const run = await sbx.commands.run('echo hi');
  assert.equal(run.exitCode, 0);
  assert.equal(run.stdout, '/bin/bash -l -c echo hi');
  // Naming a user puts it in an Authorization header of its own (Basic): the access token still counts.
  assert.equal((await sbx.commands.run('whoami', { user: 'root' })).exitCode, 0);
  await sbx.files.write('/tmp/as-root.txt', 'x', { user: 'root' });

  const info = await sbx.files.write('/tmp/note.txt', 'hello vessel');
  assert.deepEqual({ path: info.path, name: info.name }, { path: '/tmp/note.txt', name: 'note.txt' });
  assert.equal(await sbx.files.read('/tmp/note.txt'), 'hello vessel');
  // A relative path is in the home of the user commands run as.
  await sbx.files.write('rel.txt', 'r');
  assert.equal(await sbx.files.read('/root/rel.txt'), 'r');
  await assert.rejects(sbx.files.read('/tmp/absent'), FileNotFoundError);

  const listed = await listAll({ ...opts(), query: { metadata: { team: 'blue' } } });
  assert.deepEqual(listed.map((s) => [s.sandboxId, s.state, s.metadata]), [[sbx.sandboxId, 'running', { team: 'blue', note: 'a&b=c d%' }]]);
  // The SDK encodes each key and value, then the query: a value with & = and % comes through.
  assert.equal((await listAll({ ...opts(), query: { metadata: { note: 'a&b=c d%', team: 'blue' } } })).length, 1);
  assert.deepEqual(await listAll({ ...opts(), query: { metadata: { team: 'red' } } }), []);

  assert.equal((await sbx.getInfo()).sandboxId, sbx.sandboxId);
  await sbx.setTimeout(600_000);
  assert.equal(await sbx.isRunning(), true);

  await sbx.kill();
  assert.deepEqual(await listAll(opts()), []);
  await assert.rejects(Sandbox.getInfo(sbx.sandboxId, opts()), SandboxNotFoundError);
  // After the kill, envd's calls find no sandbox: E2B's SDK reads that as the sandbox gone.
  await assert.rejects(sbx.commands.run('true'), SandboxNotFoundError);
  await assert.rejects(sbx.files.read('/tmp/note.txt'), TimeoutError);
  assert.equal(await Sandbox.kill(sbx.sandboxId, opts()), false);
});

test('a command that cannot start is the SDK\'s SandboxError, not an exit of the command', async () => {
  const sbx = await Sandbox.create(opts());
  try {
    // A nonexistent working directory is refused before the command starts.
    await assert.rejects(sbx.commands.run('true', { cwd: '/nowhere' }), (err: unknown) => err instanceof SandboxError && !(err instanceof CommandExitError));
  } finally {
    await sbx.kill();
  }
});

test('a wrong API key is the SDK\'s AuthenticationError, on the control plane and on envd', async () => {
  await assert.rejects(Sandbox.create(opts('vsl_not-a-real-token')), AuthenticationError);
  await assert.rejects(listAll(opts('nope')), AuthenticationError);
  const sbx = await Sandbox.create(opts());
  try {
    // The access token envd checks is a Vessel token: a sandbox object holding another is refused.
    const forged = new (Sandbox as unknown as new (o: object) => Sandbox)({ ...opts(), sandboxId: sbx.sandboxId, envdVersion: '0.5.7', envdAccessToken: 'vsl_wrong' });
    await assert.rejects(forged.commands.run('true'), AuthenticationError);
    await assert.rejects(forged.files.read('/etc/hostname'), AuthenticationError);
  } finally {
    await sbx.kill();
  }
});

test('unknown sandboxes are the SDK\'s not-found answers', async () => {
  await assert.rejects(Sandbox.getInfo('no-such-sandbox', opts()), SandboxNotFoundError);
  await assert.rejects(Sandbox.connect('no-such-sandbox', opts()), SandboxNotFoundError);
  await assert.rejects(Sandbox.setTimeout('no-such-sandbox', 60_000, opts()), SandboxNotFoundError);
  assert.equal(await Sandbox.kill('no-such-sandbox', opts()), false);
});

test('another tenant\'s sandbox does not exist for a caller, on either plane', async () => {
  const sbx = await Sandbox.create(opts());
  try {
    const other = await api.token('globex', ['runtimes:read', 'runtimes:write', 'exec', 'files:read', 'files:write']);
    await assert.rejects(Sandbox.getInfo(sbx.sandboxId, opts(other)), SandboxNotFoundError);
    assert.equal(await Sandbox.kill(sbx.sandboxId, opts(other)), false);
    const theirs = new (Sandbox as unknown as new (o: object) => Sandbox)({ ...opts(other), sandboxId: sbx.sandboxId, envdVersion: '0.5.7', envdAccessToken: other });
    await assert.rejects(theirs.commands.run('true'), SandboxNotFoundError);
    assert.deepEqual(await listAll(opts(other)), []);
  } finally {
    await sbx.kill();
  }
});

test('a token\'s scopes apply: a read-only key lists but cannot create, and cannot run commands', async () => {
  const reader = await api.token('acme', ['runtimes:read']);
  await assert.rejects(Sandbox.create(opts(reader)), (err: unknown) => err instanceof SandboxError && /lacks the 'runtimes:write' scope/.test(err.message));
  const sbx = await Sandbox.create(opts());
  try {
    const readOnly = new (Sandbox as unknown as new (o: object) => Sandbox)({ ...opts(reader), sandboxId: sbx.sandboxId, envdVersion: '0.5.7', envdAccessToken: reader });
    // A refusal before the stream starts reaches Connect's client as its HTTP status only (403).
    await assert.rejects(readOnly.commands.run('true'), (err: unknown) => err instanceof SandboxError && /permission_denied/.test(err.message));
    await assert.rejects(readOnly.files.write('/tmp/x', 'x'), (err: unknown) => err instanceof SandboxError && /lacks the 'files:write' scope/.test(err.message));
  } finally {
    await sbx.kill();
  }
});

test('a sandbox is a runtime: metadata are its labels, the timeout its idle timeout, and the kill its delete', async () => {
  const created = await api.call('POST', '/e2b/v2/sandboxes', { templateID: 'base', timeout: 90, metadata: { owner: 'e2b' } }, key);
  assert.equal(created.status, 201);
  const id = created.body.sandboxID as string;
  assert.equal(created.body.templateID, 'base');
  // The envd access token is the caller's own key: it grants nothing the caller has not.
  assert.equal(created.body.envdAccessToken, key);

  const rt = await api.call('GET', `/v1/runtimes/${id}`, undefined, key);
  assert.equal(rt.status, 200);
  assert.deepEqual(rt.body.data.labels, { owner: 'e2b' });
  assert.deepEqual(rt.body.data.lifecycle, { idle_timeout_secs: 90, on_idle: 'stop', auto_delete_secs: 0 });

  assert.equal((await api.call('POST', `/e2b/sandboxes/${id}/timeout`, { timeout: 30 }, key)).status, 204);
  assert.equal((await api.call('GET', `/v1/runtimes/${id}`, undefined, key)).body.data.lifecycle.idle_timeout_secs, 30);

  // A runtime created on Vessel's API is a sandbox too.
  const native = await api.call('POST', '/v1/runtimes', { display_name: 'native', labels: { owner: 'vessel' } }, key);
  const v1 = await api.call('GET', '/e2b/sandboxes?metadata=owner%3Dvessel', undefined, key);
  assert.deepEqual(v1.body.map((s: { sandboxID: string }) => s.sandboxID), [native.body.data.id]);

  // Paused on Vessel's API, it is a paused sandbox; connect resumes it (201, as E2B answers a resume).
  assert.equal((await api.call('POST', `/v1/runtimes/${id}/pause`, undefined, key)).status, 200);
  const paused = await api.call('GET', '/e2b/v2/sandboxes?state=paused', undefined, key);
  assert.deepEqual(paused.body.map((s: { sandboxID: string; state: string }) => [s.sandboxID, s.state]), [[id, 'paused']]);
  assert.deepEqual((await api.call('GET', '/e2b/sandboxes', undefined, key)).body.map((s: { sandboxID: string }) => s.sandboxID), [native.body.data.id], 'v1 lists running sandboxes');
  const resumed = await api.call('POST', `/e2b/v2/sandboxes/${id}/connect`, { timeout: 60 }, key);
  assert.equal(resumed.status, 201);
  assert.equal((await api.call('GET', `/e2b/sandboxes/${id}`, undefined, key)).body.state, 'running');
  assert.equal((await api.call('POST', `/e2b/v2/sandboxes/${id}/connect`, {}, key)).status, 200);
  assert.equal((await api.call('GET', `/v1/runtimes/${id}`, undefined, key)).body.data.lifecycle.idle_timeout_secs, 60);

  // Pages of E2B's list: a limit, and the next page's token in x-next-token.
  const first = await api.call('GET', '/e2b/v2/sandboxes?limit=1', undefined, key);
  assert.equal(first.body.length, 1);
  const token = first.headers['x-next-token'] as string;
  const second = await api.call('GET', `/e2b/v2/sandboxes?limit=1&nextToken=${encodeURIComponent(token)}`, undefined, key);
  assert.equal(second.body.length, 1);
  assert.notEqual(second.body[0].sandboxID, first.body[0].sandboxID);

  assert.equal((await api.call('DELETE', `/e2b/sandboxes/${id}`, undefined, key)).status, 204);
  assert.equal((await api.call('GET', `/v1/runtimes/${id}`, undefined, key)).status, 404);
  await api.call('DELETE', `/v1/runtimes/${native.body.data.id}`, undefined, key);
});

test('errors come in E2B\'s envelope, with the HTTP status as their code', async () => {
  const missing = await api.call('GET', '/e2b/sandboxes/no-such-sandbox', undefined, key);
  assert.equal(missing.status, 404);
  assert.deepEqual(missing.body, { code: 404, message: "sandbox 'no-such-sandbox' not found" });
  const template = await api.call('POST', '/e2b/v2/sandboxes', { templateID: 'python' }, key);
  assert.equal(template.status, 400);
  assert.equal(template.body.code, 400);
  assert.match(template.body.message, /template 'python' is not served/);
  // What would change the sandbox's network is refused, not ignored.
  const offline = await api.call('POST', '/e2b/v2/sandboxes', { templateID: 'base', allow_internet_access: false }, key);
  assert.deepEqual([offline.status, offline.body.code], [400, 400]);
  assert.equal((await api.call('GET', '/v1/runtimes', undefined, key)).body.data.length, 0);
  const anonymous = await api.call('GET', '/e2b/v2/sandboxes', undefined, null);
  assert.equal(anonymous.status, 401);
  assert.equal(anonymous.body.code, 401);
  const badState = await api.call('GET', '/e2b/v2/sandboxes?state=gone', undefined, key);
  assert.deepEqual([badState.status, badState.body.code], [400, 400]);
});
