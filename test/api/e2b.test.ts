/**
 * The E2B facade (src/e2b, docs/e2b.md) over the fake driver: E2B's own SDK, unmodified and
 * configured only through its options, against the real API on a real port, its envd calls
 * through the real ingress as on a single host; and the mapping of E2B's sandboxes onto runtimes,
 * read back through Vessel's own API.
 */
import { test, before, after } from 'node:test';
import assert from 'node:assert/strict';
import { execFile } from 'node:child_process';
import { join } from 'node:path';
import { request as httpRequest } from 'node:http';
import { request as httpsRequest } from 'node:https';
import type { AddressInfo } from 'node:net';
import { promisify } from 'node:util';
import { AuthenticationError, CommandExitError, FileNotFoundError, InvalidArgumentError, NotFoundError, Sandbox, SandboxError, SandboxNotFoundError, TimeoutError } from 'e2b';
import type { GatewayHooks } from '../../src/core/ports.js';
import type { ProcessSpec } from '../../src/core/types.js';
import { E2B_ENVD_PREFIX, ENVD_PORT } from '../../src/e2b/addresses.js';
import { CertificateAuthority } from '../../src/net/certificate-authority.js';
import { Ingress } from '../../src/net/ingress.js';
import { RuntimeNet, RuntimeRegistry } from '../../src/net/runtime-registry.js';
import { apiHarness, silentLog, type ApiHarness } from '../support/api-harness.js';
import { REPO_ROOT, freePort } from '../support/service.js';

let api: ApiHarness;
let base: string;
/** The ingress, as `vessel serve` wires it on a single host: envd's port goes to the API. */
let ingress: Ingress;
let ingressUrl: string;
let ca: CertificateAuthority;
const registry = new RuntimeRegistry();
/** A token of tenant `acme` with the scopes a user of E2B's SDK needs. */
let key: string;

before(async () => {
  api = await apiHarness();
  await api.app.listen({ host: '127.0.0.1', port: 0 });
  const apiPort = (api.app.server.address() as AddressInfo).port;
  base = `http://127.0.0.1:${apiPort}`;
  key = await api.token('acme', ['runtimes:read', 'runtimes:write', 'exec', 'files:read', 'files:write']);
  ca = await CertificateAuthority.loadOrCreate(api.dir);
  // No runtime exposes a port of its own here: only envd's routes, which need no ingress spec.
  const hooks = { ingressTarget: async () => null, activity: () => undefined } as unknown as GatewayHooks;
  const envd = { host: '127.0.0.1', port: apiPort, pathPrefix: E2B_ENVD_PREFIX, runtimePort: ENVD_PORT };
  ingress = new Ingress({ domain: 'localhost', registry, ca, hooks: () => hooks, log: silentLog, envd });
  const port = await freePort();
  await ingress.listen('127.0.0.1', port);
  ingressUrl = `http://127.0.0.1:${port}`;
});
after(async () => {
  await ingress.close();
  await api.close();
});

/** The SDK's connection options, as a user sets them (E2B_API_URL, E2B_SANDBOX_URL, E2B_API_KEY). */
const opts = (apiKey = key) => ({ apiUrl: `${base}/e2b`, sandboxUrl: ingressUrl, apiKey });

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

test('envd is served on the API port too, under /e2b-envd', async () => {
  const sbx = await Sandbox.create({ ...opts(), sandboxUrl: `${base}/e2b-envd` });
  try {
    assert.equal((await sbx.commands.run('echo api')).stdout, '/bin/bash -l -c echo api');
  } finally {
    await sbx.kill();
  }
});

test('the ingress routes envd by E2B\'s headers or by 49983-<id>.<domain>, and nothing else of the request', async () => {
  const sbx = await Sandbox.create(opts());
  try {
    // node:http, not fetch: fetch sets the Host from the URL.
    const envdCall = (host: string, headers: Record<string, string>, token = key) =>
      new Promise<{ status: number; json: () => Promise<unknown> }>((resolve, reject) => {
        const req = httpRequest(`${ingressUrl}/health`, { headers: { host, 'x-access-token': token, ...headers } }, (res) => {
          const chunks: Buffer[] = [];
          res.on('data', (c: Buffer) => chunks.push(c)).on('end', () => resolve({ status: res.statusCode ?? 0, json: async () => JSON.parse(Buffer.concat(chunks).toString()) }));
        });
        req.on('error', reject).end();
      });
    // By Host, as E2B_DOMAIN has the SDK name it: no headers needed.
    assert.equal((await envdCall(`${ENVD_PORT}-${sbx.sandboxId}.localhost:80`, {})).status, 204);
    // The Host wins over a header naming another sandbox: the ingress sets E2b-Sandbox-Id itself.
    assert.equal((await envdCall(`${ENVD_PORT}-${sbx.sandboxId}.localhost`, { 'e2b-sandbox-id': '00000000-0000-4000-8000-000000000000', 'e2b-sandbox-port': String(ENVD_PORT) })).status, 204);
    // Another port of the sandbox is the guest's, and this one exposes none.
    assert.equal((await envdCall(`8000-${sbx.sandboxId}.localhost`, {})).status, 404);
    // Headers naming no runtime id, or another port, route nowhere.
    assert.equal((await envdCall('127.0.0.1', { 'e2b-sandbox-id': 'not-an-id', 'e2b-sandbox-port': String(ENVD_PORT) })).status, 404);
    assert.equal((await envdCall('127.0.0.1', { 'e2b-sandbox-id': sbx.sandboxId, 'e2b-sandbox-port': '8000' })).status, 404);
    // A sandbox that is no caller's is E2B's "gone" (502), and a wrong token E2B's 401.
    const unknown = await envdCall('127.0.0.1', { 'e2b-sandbox-id': '00000000-0000-4000-8000-000000000000', 'e2b-sandbox-port': String(ENVD_PORT) });
    assert.deepEqual([unknown.status, ((await unknown.json()) as { code: number }).code], [502, 502]);
    const forged = await envdCall('127.0.0.1', { 'e2b-sandbox-id': sbx.sandboxId, 'e2b-sandbox-port': String(ENVD_PORT) }, 'vsl_wrong');
    assert.deepEqual([forged.status, ((await forged.json()) as { code: number }).code], [401, 401]);
  } finally {
    await sbx.kill();
  }
});

test('https on the ingress: the SDK trusts the service CA through NODE_EXTRA_CA_CERTS, and 49983-<id>.<domain> has a leaf', async () => {
  const sbx = await Sandbox.create(opts());
  const httpsUrl = ingressUrl.replace('http://127.0.0.1', 'https://localhost');
  try {
    // NODE_EXTRA_CA_CERTS is read when Node starts: the SDK runs in a process of its own.
    const script = `import { Sandbox } from 'e2b';
      const sbx = await Sandbox.connect(process.env.SANDBOX_ID);
      await sbx.files.write('/tmp/tls.txt', 'over tls');
      const run = await sbx.commands.run('echo tls');
      console.log(JSON.stringify({ stdout: run.stdout, read: await sbx.files.read('/tmp/tls.txt') }));`;
    const env = { ...process.env, NODE_EXTRA_CA_CERTS: join(api.dir, 'ca.crt'), E2B_API_URL: `${base}/e2b`, E2B_SANDBOX_URL: httpsUrl, E2B_API_KEY: key, SANDBOX_ID: sbx.sandboxId };
    const { stdout } = await promisify(execFile)(process.execPath, ['--input-type=module', '-e', script], { cwd: REPO_ROOT, env });
    assert.deepEqual(JSON.parse(stdout), { stdout: '/bin/bash -l -c echo tls', read: 'over tls' });

    // By name, as E2B_DOMAIN has the SDK call it (this host resolves no *.localhost: the name goes in SNI and Host).
    const host = `${ENVD_PORT}-${sbx.sandboxId}.localhost`;
    const byName = (name: string) =>
      new Promise<number>((resolve, reject) => {
        const req = httpsRequest(`${httpsUrl}/health`, { servername: name, headers: { host: name, 'x-access-token': key }, ca: ca.certPem }, (res) => {
          res.resume();
          resolve(res.statusCode ?? 0);
        });
        req.on('error', reject).end();
      });
    // No leaf for a runtime this host does not hold: the handshake is refused.
    await assert.rejects(byName(host));
    registry.add(new RuntimeNet({ runtimeId: sbx.sandboxId, tenantId: 'acme', policy: { enabled: true, allowed_hosts: [] }, rules: [] }, 'vsl-e2b', '127.0.0.1'));
    assert.equal(await byName(host), 204);
  } finally {
    await registry.remove(sbx.sandboxId);
    await sbx.kill();
  }
});

test('files: list (with depth), makeDir, exists, getInfo and remove are envd\'s filesystem service over the guest\'s', async () => {
  const sbx = await Sandbox.create(opts());
  try {
    assert.equal(await sbx.files.makeDir('/work/a'), true);
    // An existing directory is not made again: the SDK answers false.
    assert.equal(await sbx.files.makeDir('/work/a'), false);
    await sbx.files.write('/work/a/b.txt', 'bee');
    await sbx.files.write('/work/top.txt', 'top');
    const shallow = await sbx.files.list('/work');
    assert.deepEqual(shallow.map((e) => [e.name, e.type, e.path]).sort(), [['a', 'dir', '/work/a'], ['top.txt', 'file', '/work/top.txt']]);
    const deep = await sbx.files.list('/work', { depth: 2 });
    assert.deepEqual(deep.map((e) => e.path).sort(), ['/work/a', '/work/a/b.txt', '/work/top.txt']);
    const info = await sbx.files.getInfo('/work/top.txt');
    assert.deepEqual([info.name, info.type, info.size, info.permissions.length], ['top.txt', 'file', 3, 10]);
    assert.equal(await sbx.files.exists('/work/a/b.txt'), true);
    assert.equal(await sbx.files.exists('/work/nothing'), false);
    await assert.rejects(sbx.files.getInfo('/work/nothing'), NotFoundError);
    await sbx.files.remove('/work/a');
    assert.equal(await sbx.files.exists('/work/a/b.txt'), false);
    // Hostile input: a listing too deep, and a path with NUL, are the SDK's InvalidArgumentError.
    await assert.rejects(sbx.files.list('/work', { depth: 1000 }), InvalidArgumentError);
    await assert.rejects(sbx.files.getInfo('/work/\0x'), InvalidArgumentError);
    // Removing the root, under any spelling, is refused.
    await assert.rejects(sbx.files.remove('/tmp/..'), InvalidArgumentError);
  } finally {
    await sbx.kill();
  }
});

test('processes: background commands with stdin, list, connect, close stdin and kill; a PTY made, resized, written and killed', async () => {
  const sbx = await Sandbox.create(opts());
  try {
    // The fake guest's process with stdin open runs until its stdin is closed or it is signalled.
    const cat = await sbx.commands.run('cat', { background: true, stdin: true });
    assert.deepEqual((await sbx.commands.list()).map((p) => p.pid), [cat.pid]);
    await sbx.commands.sendStdin(cat.pid, 'to cat');
    const again = await sbx.commands.connect(cat.pid);
    await sbx.commands.closeStdin(cat.pid);
    const [first, second] = await Promise.all([cat.wait(), again.wait()]);
    assert.deepEqual([first.exitCode, first.stdout], [0, '/bin/bash -l -c cat']);
    // Connect reads from now on: the output came before it.
    assert.deepEqual([second.exitCode, second.stdout], [0, '']);
    assert.deepEqual(await sbx.commands.list(), []);

    const sleeper = await sbx.commands.run('sleep 100', { background: true, stdin: true });
    assert.equal(await sbx.commands.kill(sleeper.pid), true);
    await assert.rejects(sleeper.wait(), (err: unknown) => err instanceof CommandExitError && err.exitCode === 128 + 9);
    // Once its end was delivered it is forgotten: a second kill finds nothing, as envd answers.
    assert.equal(await sbx.commands.kill(sleeper.pid), false);
    await assert.rejects(sbx.commands.sendStdin(sleeper.pid, 'x'), NotFoundError);

    const shown: string[] = [];
    const pty = await sbx.pty.create({ rows: 24, cols: 80, onData: (d) => void shown.push(Buffer.from(d).toString()) });
    await sbx.pty.resize(pty.pid, { rows: 30, cols: 100 });
    await sbx.pty.sendInput(pty.pid, new TextEncoder().encode('ls\n'));
    assert.equal(await sbx.pty.kill(pty.pid), true);
    await assert.rejects(pty.wait(), CommandExitError);
    // A terminal's output comes as the PTY's, not stdout's.
    assert.equal(shown.join(''), '/bin/bash -i -l');
    // Hostile sizes are refused before anything starts.
    await assert.rejects(sbx.pty.create({ rows: 0, cols: 100_000, onData: () => undefined }), InvalidArgumentError);
  } finally {
    await sbx.kill();
  }
});

test('envVars at create are the defaults of every command in the sandbox, under the command\'s own envs; its user is the SDK\'s', async () => {
  const driver = api.driver as unknown as { spawnProcess(runtimeId: string, spec: ProcessSpec): Promise<unknown> };
  const spawned: ProcessSpec[] = [];
  const spawn = driver.spawnProcess.bind(driver);
  driver.spawnProcess = (id, spec) => (spawned.push(spec), spawn(id, spec));
  const sbx = await Sandbox.create({ ...opts(), envs: { GREETING: 'hi', SHARED: 'sandbox' } });
  try {
    await sbx.commands.run('env', { envs: { SHARED: 'command' } });
    assert.deepEqual(spawned.at(-1)!.env, { GREETING: 'hi', SHARED: 'command' });
    await sbx.pty.kill((await sbx.pty.create({ rows: 24, cols: 80, onData: () => undefined })).pid);
    assert.deepEqual(spawned.at(-1)!.env, { GREETING: 'hi', SHARED: 'sandbox', TERM: 'xterm-256color', LANG: 'C.UTF-8', LC_ALL: 'C.UTF-8' });
    // The native API shows the names only: values may be secrets.
    assert.deepEqual((await api.call('GET', `/v1/runtimes/${sbx.sandboxId}`, undefined, key)).body.data.env_names, ['GREETING', 'SHARED']);
    // The SDK's `user` (sent as Authorization: Basic) is the user the command runs as; none: the runtime's default.
    await sbx.commands.run('id', { user: 'nobody' });
    assert.equal(spawned.at(-1)!.user, 'nobody');
    await sbx.commands.run('id');
    assert.equal(spawned.at(-1)!.user, null);
    await assert.rejects(sbx.commands.run('id', { user: 'no body' }), (err: unknown) => err instanceof SandboxError && /names no valid user/.test(err.message));
    // Names a shell cannot use are refused, and nothing is made.
    await assert.rejects(Sandbox.create({ ...opts(), envs: { 'NOT-A-NAME': 'x' } }), (err: unknown) => err instanceof SandboxError && /not a variable name/.test(err.message));
  } finally {
    driver.spawnProcess = spawn;
    await sbx.kill();
  }
});

test('hostile envd calls: a message over the bound, a body that is no message, and an unknown RPC get Connect\'s errors', async () => {
  const sbx = await Sandbox.create(opts());
  try {
    const rpc = (path: string, body: string, url = ingressUrl) =>
      fetch(`${url}${path}`, { method: 'POST', body, headers: { 'content-type': 'application/json', 'connect-protocol-version': '1', 'x-access-token': key, 'e2b-sandbox-id': sbx.sandboxId, 'e2b-sandbox-port': String(ENVD_PORT) } });
    // On the API port: the ingress ends a connection whose upstream answered before the whole body
    // was sent (docs/e2b.md, "Not served yet"), so a client sees the refusal there only.
    const huge = await rpc('/filesystem.Filesystem/Stat', JSON.stringify({ path: `/${'a'.repeat(2 * 1024 * 1024)}` }), `${base}/e2b-envd`);
    assert.equal(((await huge.json()) as { code: string }).code, 'resource_exhausted');
    const garbage = await rpc('/filesystem.Filesystem/Stat', '{"path": ');
    assert.equal(((await garbage.json()) as { code: string }).code, 'invalid_argument');
    const unknown = await rpc('/filesystem.Filesystem/WatchDir', '{}');
    assert.equal(unknown.status, 404);
  } finally {
    await sbx.kill();
  }
});
