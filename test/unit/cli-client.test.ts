/**
 * The client commands of the compiled CLI, run as child processes against the real API over a
 * real store (the fake driver runs no VM): login and its 0600 file, every command group, --json
 * shapes equal to the API's objects, exit statuses, values that never go through argv. Streamed
 * exec needs a guest, so its bytes and statuses come from a scripted service here; a real VM
 * runs everything in test/vm/cli.test.ts.
 */
import { test, before, after, describe } from 'node:test';
import assert from 'node:assert/strict';
import { spawn } from 'node:child_process';
import { randomUUID } from 'node:crypto';
import { chmodSync, mkdirSync, readFileSync, statSync, writeFileSync } from 'node:fs';
import type { AddressInfo } from 'node:net';
import { join } from 'node:path';
import { apiHarness, type ApiHarness } from '../support/api-harness.js';
import { CLI, cliUser, type CliUser } from '../support/cli.js';
import { REPO_ROOT } from '../support/service.js';
import { scriptedService } from '../support/scripted-service.js';

let h: ApiHarness;
let url: string;
/** A user with the admin token in the environment. */
let user: CliUser;

before(async () => {
  h = await apiHarness();
  await h.app.listen({ port: 0, host: '127.0.0.1' });
  url = `http://127.0.0.1:${(h.app.server.address() as AddressInfo).port}`;
  user = cliUser({ VESSEL_URL: url, VESSEL_TOKEN: h.admin });
});
after(() => h.close());

const json = (r: { out: string }) => JSON.parse(r.out);

test('--version prints the package version and needs no service or token', async () => {
  const r = await cliUser().run(['--version']);
  assert.equal(r.status, 0, r.err);
  assert.equal(r.out, `${JSON.parse(readFileSync(join(REPO_ROOT, 'package.json'), 'utf8')).version}\n`);
});

describe('login and the config file', () => {
  test('login reads the token from stdin, writes it 0600 whatever the umask, and the other commands use it', async () => {
    const u = cliUser();
    const login = await u.run(['login', '--url', url], { input: `${h.admin}\n` });
    assert.equal(login.status, 0, login.err);
    assert.ok(!login.out.includes(h.admin) && !login.err.includes(h.admin));
    const path = join(u.home, '.config/vessel/config.json');
    assert.equal(statSync(path).mode & 0o777, 0o600);
    assert.equal(statSync(join(u.home, '.config/vessel')).mode & 0o777, 0o700);
    assert.deepEqual(JSON.parse(readFileSync(path, 'utf8')), { url, token: h.admin });
    assert.equal((await u.run(['runtime', 'ls'])).status, 0);

    // Again under umask 000: the file is made 0600 from the start, not chmodded after.
    const loose = cliUser();
    const sh = await new Promise<number | null>((resolve) => {
      const child = spawn('sh', ['-c', 'umask 000; exec "$0" "$1" login --url "$2"', process.execPath, CLI, url], { env: loose.env, stdio: ['pipe', 'ignore', 'ignore'] });
      child.stdin.end(h.admin);
      child.on('close', resolve);
    });
    assert.equal(sh, 0);
    assert.equal(statSync(join(loose.home, '.config/vessel/config.json')).mode & 0o777, 0o600);

    const logout = await u.run(['logout']);
    assert.equal(logout.status, 0);
    const none = await u.run(['runtime', 'ls']);
    assert.equal(none.status, 2);
    assert.match(none.err, /no token: set VESSEL_TOKEN, or run vessel login/);
  });

  test('a config file others can read is refused, naming the fix', async () => {
    const u = cliUser();
    const dir = join(u.home, '.config/vessel');
    mkdirSync(dir, { recursive: true });
    writeFileSync(join(dir, 'config.json'), JSON.stringify({ url, token: h.admin }));
    chmodSync(join(dir, 'config.json'), 0o644);
    const r = await u.run(['runtime', 'ls']);
    assert.equal(r.status, 2);
    assert.match(r.err, /readable by others \(mode 644\); run: chmod 600 /);
  });

  test('the token never comes from argv; a wrong token is not saved', async () => {
    const u = cliUser();
    const inArgv = await u.run(['login', '--url', url, h.admin]);
    assert.equal(inArgv.status, 2);
    assert.match(inArgv.err, /the token is never taken from the command line/);
    assert.ok(!inArgv.err.includes(h.admin));
    const wrong = await u.run(['login', '--url', url], { input: 'vsl_wrong' });
    assert.equal(wrong.status, 4);
    assert.throws(() => statSync(join(u.home, '.config/vessel/config.json')));
    assert.equal((await u.run(['login', '--help'])).status, 0);
  });

  test('VESSEL_CONFIG names another file; the environment wins over it', async () => {
    const u = cliUser();
    const path = join(u.home, 'elsewhere.json');
    assert.equal((await u.run(['login', '--url', url], { input: h.admin, env: { VESSEL_CONFIG: path } })).status, 0);
    assert.equal((await u.run(['runtime', 'ls'], { env: { VESSEL_CONFIG: path } })).status, 0);
    const wrongToken = await u.run(['runtime', 'ls'], { env: { VESSEL_CONFIG: path, VESSEL_TOKEN: 'vsl_wrong' } });
    assert.equal(wrongToken.status, 4);
  });
});

describe('runtimes', () => {
  test('create, ls, get, lifecycle, patch and rm; --json prints the API objects', async () => {
    const created = await user.run(['runtime', 'create', 'cli-one', '--vcpus', '2', '--memory', '1024', '--allow-host', 'pypi.org', '--port', '8000', '--port', '8443/https', '--json']);
    assert.equal(created.status, 0, created.err);
    const rt = json(created);
    const api = (await h.call('GET', '/v1/runtimes/cli-one')).body.data;
    assert.deepEqual(rt, api);
    assert.deepEqual(rt.ingress_specs, [{ protocol: 'http', runtime_port: 8000 }, { protocol: 'https', runtime_port: 8443 }]);
    assert.equal(rt.resources.vcpus, 2);

    const ls = await user.run(['runtime', 'ls', '--json']);
    assert.deepEqual(json(ls), (await h.call('GET', '/v1/runtimes')).body.data);
    const table = (await user.run(['runtime', 'ls'])).out.split('\n');
    assert.match(table[0]!, /^NAME\s+STATUS\s+VCPUS\s+MEMORY\s+EGRESS\s+AGE\s+ID\s+LABELS$/);
    assert.match(table[1]!, /^cli-one\s+running\s+2\s+1024 MiB\s+1 host\s+\d+s\s+[0-9a-f-]{36}\s*$/);
    assert.equal((await user.run(['runtime', 'ls', '--quiet'])).out, 'cli-one\n');
    assert.match((await user.run(['runtime', 'get', 'cli-one'])).out, /^name: +cli-one\nid: +[0-9a-f-]{36}\nstatus: +running\n/);

    for (const [op, status] of [['pause', 'paused'], ['resume', 'running'], ['stop', 'shutdown'], ['start', 'running']]) {
      const r = await user.run(['runtime', op!, 'cli-one']);
      assert.equal(r.status, 0, r.err);
      assert.equal(r.out, `cli-one: ${status}\n`);
    }
    const patched = json(await user.run(['runtime', 'patch', 'cli-one', '--add-host', '*.example.com', '--remove-host', 'pypi.org', '--memory-request', '512', '--json']));
    assert.deepEqual(patched.egress_policy, { enabled: true, allowed_hosts: ['*.example.com'] });
    assert.equal(patched.resources.requests.memory_mib, 512);
    const opened = json(await user.run(['runtime', 'patch', 'cli-one', '--egress', 'open', '--json']));
    assert.deepEqual(opened.egress_policy, { enabled: false, allowed_hosts: ['*.example.com'] });

    const rm = await user.run(['runtime', 'rm', 'cli-one', '--json']);
    assert.deepEqual(json(rm), { deleted: ['cli-one'] });
    assert.equal((await h.call('GET', '/v1/runtimes/cli-one')).status, 404);
  });

  test('labels and lifecycle: set at create, filtered by ls, shown by get, edited by patch', async () => {
    const created = await user.run(['runtime', 'create', 'cli-tagged', '--label', 'team=data', '--label', 'tier=gold', '--idle-timeout', '15m', '--on-idle', 'stop', '--auto-delete', '1d', '--json']);
    assert.equal(created.status, 0, created.err);
    assert.deepEqual(json(created).labels, { team: 'data', tier: 'gold' });
    assert.deepEqual(json(created).lifecycle, { idle_timeout_secs: 900, on_idle: 'stop', auto_delete_secs: 86400 });
    // The environment's names are shown, never its values.
    const withEnv = await user.run(['runtime', 'create', 'cli-env', '--env', 'TOKEN=s3cret', '--env', 'MODE=ci']);
    assert.equal(withEnv.status, 0, withEnv.err);
    assert.match(withEnv.out, /^env: +MODE, TOKEN$/m);
    assert.doesNotMatch(withEnv.out, /s3cret/);
    await user.run(['runtime', 'rm', 'cli-env']);
    await user.run(['runtime', 'create', 'cli-plain']);
    await user.run(['runtime', 'stop', 'cli-plain']);

    assert.equal((await user.run(['runtime', 'ls', '-q', '--label', 'team=data'])).out, 'cli-tagged\n');
    assert.equal((await user.run(['runtime', 'ls', '-q', '--label', 'tier', '--label', 'team=data'])).out, 'cli-tagged\n');
    assert.equal((await user.run(['runtime', 'ls', '-q', '--label', 'team=ops'])).out, '');
    assert.equal((await user.run(['runtime', 'ls', '-q', '--status', 'shutdown'])).out, 'cli-plain\n');
    assert.equal((await user.run(['runtime', 'ls', '-q', '--status', 'shutdown,running', '--label', 'tier'])).out, 'cli-tagged\n');
    const bad = await user.run(['runtime', 'ls', '--status', 'asleep']);
    assert.equal(bad.status, 2, bad.err);
    assert.match(bad.err, /status 'asleep'/);

    const shown = (await user.run(['runtime', 'get', 'cli-tagged'])).out;
    assert.match(shown, /^labels: +team=data, tier=gold$/m);
    assert.match(shown, /^lifecycle: +idle 15m: stop; deleted 1d after it stops$/m);

    const patchRun = await user.run(['runtime', 'patch', 'cli-tagged', '--label', 'tier=silver', '--remove-label', 'team', '--idle-timeout', 'never', '--auto-delete', 'never', '--json']);
    assert.equal(patchRun.status, 0, patchRun.err);
    const patched = json(patchRun);
    assert.deepEqual(patched.labels, { tier: 'silver' });
    assert.deepEqual(patched.lifecycle, { idle_timeout_secs: 0, on_idle: 'stop', auto_delete_secs: null });
    const back = json(await user.run(['runtime', 'patch', 'cli-tagged', '--idle-timeout', 'default', '--on-idle', 'suspend', '--json']));
    assert.deepEqual(back.lifecycle, { idle_timeout_secs: null, on_idle: 'suspend', auto_delete_secs: null });
    const wrong = await user.run(['runtime', 'create', 'x', '--idle-timeout', '5 min']);
    assert.equal(wrong.status, 2);
    assert.match(wrong.err, /expected a duration/);
    for (const name of ['cli-tagged', 'cli-plain']) await h.call('DELETE', `/v1/runtimes/${name}`);
  });

  test('exit statuses: usage 2, not_found 3, unauthenticated 4, conflicts 5; errors as envelopes with --json', async () => {
    await user.run(['runtime', 'create', 'cli-codes']);
    const cases: [string[], number, RegExp][] = [
      [['runtime', 'get', 'no-such'], 3, /^vessel: runtime 'no-such' not found \(not_found\)\n$/],
      [['runtime', 'create', 'cli-codes'], 5, /already_exists/],
      [['runtime', 'resume', 'cli-codes'], 5, /failed_precondition/],
      [['runtime', 'create', 'bad name!'], 2, /invalid_argument/],
      [['runtime', 'create', 'x', '--vcpus', 'two'], 2, /option '--vcpus <n>' argument 'two' is invalid/],
      [['runtime', 'create', 'x', '--port', '70000'], 2, /port 1 to 65535/],
      [['runtime', 'patch', 'cli-codes'], 2, /nothing to change/],
      [['runtime', 'patch', 'cli-codes', '--egress', 'closed'], 2, /Allowed choices are filtered, open/],
      [['runtime', 'frobnicate'], 2, /unknown command 'frobnicate'/],
      [['runtime', 'ls', '--frob'], 2, /unknown option '--frob'/],
    ];
    for (const [args, status, message] of cases) {
      const r = await user.run(args);
      assert.equal(r.status, status, `${args.join(' ')}: ${r.err}`);
      assert.match(r.err, message);
    }
    const stranger = await user.run(['runtime', 'ls'], { env: { VESSEL_TOKEN: 'vsl_nope' } });
    assert.equal(stranger.status, 4);
    const reader = await h.token('default', ['runtimes:read']);
    assert.equal((await user.run(['runtime', 'rm', 'cli-codes'], { env: { VESSEL_TOKEN: reader } })).status, 4);
    const asJson = await user.run(['runtime', 'get', 'no-such', '--json']);
    assert.deepEqual(JSON.parse(asJson.err), { error: { code: 'not_found', message: "runtime 'no-such' not found" } });
    assert.equal(asJson.out, '');
    const usageJson = await user.run(['runtime', 'patch', 'cli-codes', '--json']);
    assert.equal(JSON.parse(usageJson.err).error.code, 'usage');
    const down = await user.run(['runtime', 'ls'], { env: { VESSEL_URL: 'http://127.0.0.1:1' } });
    assert.equal(down.status, 6);
    assert.equal((await user.run(['--help'])).status, 0);
    await user.run(['runtime', 'rm', 'cli-codes']);
  });
});

describe('secrets', () => {
  test('the value comes from stdin or --from-file, never argv, and is printed nowhere', async () => {
    const value = `cli-secret-${randomUUID()}`;
    const fromStdin = await user.run(['secret', 'create', 'cli-gh', '--json'], { input: `${value}\n` });
    assert.equal(fromStdin.status, 0, fromStdin.err);
    assert.deepEqual(Object.keys(json(fromStdin)).sort(), ['cache_ttl_secs', 'created_at', 'display_name', 'id']);
    const file = join(user.home, 'value.txt');
    writeFileSync(file, `${value}\n`);
    const fromFile = await user.run(['secret', 'create', 'cli-file', '--from-file', file, '--cache-ttl', '30']);
    assert.equal(fromFile.status, 0, fromFile.err);
    assert.match(fromFile.out, /cache ttl: +30 s/);

    const inArgv = await user.run(['secret', 'create', 'cli-argv', value]);
    assert.equal(inArgv.status, 2);
    assert.match(inArgv.err, /never taken from the command line/);
    assert.equal((await h.call('GET', '/v1/secrets/cli-argv')).status, 404);
    assert.equal((await user.run(['secret', 'create', 'cli-empty'], { input: '\n' })).status, 2);

    // Both were stored without the newline: the gateway's cache hands out exactly the value.
    for (const name of ['cli-gh', 'cli-file']) assert.equal((await h.core.secrets.reveal('default', (await h.core.secrets.get('default', name)).id))?.value, value);

    const outputs = [fromStdin, fromFile, inArgv, await user.run(['secret', 'ls']), await user.run(['secret', 'ls', '--json']), await user.run(['secret', 'get', 'cli-gh'])];
    for (const r of outputs) assert.ok(!r.out.includes(value) && !r.err.includes(value));
    assert.deepEqual(json(await user.run(['secret', 'rm', 'cli-gh', 'cli-file', '--json'])), { deleted: ['cli-gh', 'cli-file'] });
  });
});

describe('checkpoints, forks, rules and audits', () => {
  test('checkpoint create waits until ready, fork, ls and rm', async () => {
    await user.run(['runtime', 'create', 'cli-parent']);
    const snap = json(await user.run(['checkpoint', 'create', 'cli-parent', '--name', 'cli-snap', '--json']));
    assert.equal(snap.state, 'ready');
    assert.deepEqual(snap, (await h.call('GET', '/v1/checkpoints/cli-snap')).body.data);
    const fork = await user.run(['fork', 'cli-snap', 'cli-child', '--allow-host', 'example.com', '--json']);
    assert.equal(fork.status, 0, fork.err);
    assert.deepEqual(json(fork).egress_policy, { enabled: true, allowed_hosts: ['example.com'] });
    assert.deepEqual(json(await user.run(['checkpoint', 'ls', '--json'])).map((c: { display_name: string }) => c.display_name), ['cli-snap']);
    assert.match((await user.run(['checkpoint', 'ls', '--all'])).out, /\(system\)/);
    assert.equal((await user.run(['checkpoint', 'rm', 'cli-snap'])).out, 'deleted cli-snap\n');
    assert.equal((await user.run(['checkpoint', 'get', 'cli-snap'])).status, 3);
    await user.run(['runtime', 'rm', 'cli-parent', 'cli-child']);
  });

  test('rules: create with a header and a parameter, ls per runtime and all, get, rm', async () => {
    await user.run(['runtime', 'create', 'cli-rules']);
    await user.run(['secret', 'create', 'cli-key'], { input: 'k' });
    const created = await user.run(['rule', 'create', 'cli-rules', '--secret', 'cli-key', '--host', 'api.example.com', '--path', '/v1/**', '--header', 'Authorization', '--format', 'Bearer ${credential}', '--param', 'key', '--json']);
    assert.equal(created.status, 0, created.err);
    const rule = json(created);
    assert.deepEqual(JSON.parse(rule.injection_config_json), { headerName: 'Authorization', valueFormat: 'Bearer ${credential}', paramName: 'key' });
    assert.deepEqual(json(await user.run(['rule', 'ls', 'cli-rules', '--json'])), [rule]);
    assert.deepEqual(json(await user.run(['rule', 'get', 'cli-rules', rule.id, '--json'])), rule);
    const table = (await user.run(['rule', 'ls'])).out;
    assert.match(table, new RegExp(`${rule.id}\\s+cli-rules\\s+cli-key\\s+api.example.com\\s+/v1/\\*\\*\\s+header Authorization, param key`));
    const missing = await user.run(['rule', 'create', 'cli-rules', '--secret', 'cli-key', '--host', 'x.example.com']);
    assert.equal(missing.status, 2);
    assert.match(missing.err, /required option '--header <name>' not specified/);
    assert.equal((await user.run(['rule', 'rm', rule.id])).status, 0);
    assert.deepEqual(json(await user.run(['rule', 'ls', '--json'])), []);
    await user.run(['runtime', 'rm', 'cli-rules']);
    await user.run(['secret', 'rm', 'cli-key']);
  });

  test('audit ls and tail show what was recorded, oldest first in a tail', async () => {
    await user.run(['runtime', 'create', 'cli-audited']);
    const runtimeId = (await h.call('GET', '/v1/runtimes/cli-audited')).body.data.id;
    const at = (s: number) => new Date(Date.UTC(2030, 0, 1, 0, 0, s)).toISOString();
    await h.store.audits.insert([
      { id: randomUUID(), tenantId: 'default', runtimeId, category: 'egress', createdAt: at(1), payload: { egress: { kind: 'tcp_connection', tcp_connection: { action: 'deny', host: 'evil.example', ip: null, port: 443, reason: 'host_not_allowed' } } } },
      { id: randomUUID(), tenantId: 'default', runtimeId, category: 'egress', createdAt: at(2), payload: { egress: { kind: 'http_request', http_request: { action: 'allow', host: 'pypi.org', ip: '151.101.0.223', port: 80, method: 'GET', path: '/simple/', status: 200, reason: 'host_allowed' } } } },
      { id: randomUUID(), tenantId: 'default', runtimeId, category: 'lifecycle', createdAt: at(3), payload: { lifecycle: { action: 'suspend', reason: 'suspended after 60 s without activity', runtime_name: 'cli-audited' } } },
    ] as never);
    const ls = json(await user.run(['audit', 'ls', '--runtime', 'cli-audited', '--json']));
    assert.deepEqual(ls, (await h.call('GET', '/v1/audits?runtime=cli-audited')).body.data);
    assert.equal(ls.length, 3);
    const table = (await user.run(['audit', 'ls', '--runtime', 'cli-audited'])).out.split('\n');
    assert.match(table[1]!, /cli-audited\s+lifecycle\s+suspend\s+cli-audited\s+suspended after 60 s without activity$/);
    assert.match(table[2]!, /cli-audited\s+http_request\s+allow\s+GET pypi.org\/simple\/ -> 200\s+host_allowed$/);
    assert.match(table[3]!, /cli-audited\s+tcp_connection\s+deny\s+evil.example:443\s+host_not_allowed$/);
    assert.equal(json(await user.run(['audit', 'ls', '--runtime', 'cli-audited', '--category', 'lifecycle', '--json'])).length, 1);
    const tail = (await user.run(['audit', 'tail', '-n', '2', '--runtime', 'cli-audited', '--json'])).out.trim().split('\n').map((l) => JSON.parse(l));
    assert.deepEqual(tail.map((a: { created_at: string }) => a.created_at), [at(2), at(3)]);
    await user.run(['runtime', 'rm', 'cli-audited']);
  });
});

describe('exec and cp', () => {
  test('exec --json is the buffered result, and its exit code is the CLI status', async () => {
    await user.run(['runtime', 'create', 'cli-exec']);
    const r = await user.run(['exec', 'cli-exec', '--json', '--', 'printf', 'x']);
    assert.equal(r.status, 0, r.err);
    assert.deepEqual(Object.keys(json(r)).sort(), ['duration_ms', 'exit_code', 'stderr', 'stderr_truncated', 'stdout', 'stdout_truncated']);
    await user.run(['runtime', 'rm', 'cli-exec']);
  });

  test('streamed exec: bytes exact on each stream, the exit code passed on; a timeout is 124', async () => {
    const runtime = (await h.call('POST', '/v1/runtimes', { display_name: 'cli-shape' })).body.data;
    const at0 = new Date().toISOString();
    const requests: unknown[] = [];
    const svc = await scriptedService((req, res, n) => {
      if (req.method === 'GET') {
        res.writeHead(200, { 'content-type': 'application/json' }).end(JSON.stringify({ data: runtime }));
        return;
      }
      requests.push(JSON.parse(svc.requests[n]!.body));
      res.writeHead(200, { 'content-type': 'text/event-stream' });
      const process = { id: 1, pid: 9, command: 'x', status: 'running', exit_code: null, signal: null, pty: false, stdin_open: false, started_at: at0, ended_at: null, stdout: { start: 0, end: 0 }, stderr: { start: 0, end: 0 } };
      res.write(`event: start\ndata: ${JSON.stringify(process)}\n\n`);
      res.write(`event: stdout\nid: 3,0\ndata: ${JSON.stringify({ offset: 0, data: 'one', encoding: 'utf8' })}\n\n`);
      res.write(`event: stderr\nid: 3,2\ndata: ${JSON.stringify({ offset: 0, data: Buffer.from([0xff, 0x00]).toString('base64'), encoding: 'base64' })}\n\n`);
      res.write(`event: stdout\nid: 5,2\ndata: ${JSON.stringify({ offset: 3, data: Buffer.from([0xc3, 0x28]).toString('base64'), encoding: 'base64' })}\n\n`);
      if (n === 1) res.end(`event: exit\ndata: ${JSON.stringify({ exit_code: 7, duration_ms: 3 })}\n\n`);
      else res.end(`event: error\ndata: ${JSON.stringify({ error: { code: 'deadline_exceeded', message: 'command did not finish within 1 s and was killed' } })}\n\n`);
    });
    try {
      const env = { VESSEL_URL: svc.url };
      const r = await user.run(['exec', 'cli-shape', '--cwd', '/tmp', '-e', 'A=1', '-e', 'B=x=y', '--', 'sh', '-c', 'exit 7'], { env });
      assert.equal(r.status, 7, r.err);
      assert.deepEqual([...r.stdout], [...Buffer.from('one'), 0xc3, 0x28]);
      assert.deepEqual([...r.stderr], [0xff, 0x00]);
      assert.deepEqual(requests[0], { command: 'sh', args: ['-c', 'exit 7'], cwd: '/tmp', env: { A: '1', B: 'x=y' } });
      const timedOut = await user.run(['exec', 'cli-shape', '--timeout', '1', '--', 'sleep 5'], { env });
      assert.equal(timedOut.status, 124);
      assert.match(timedOut.err, /was killed \(deadline_exceeded\)/);
      assert.deepEqual(requests[1], { command: 'sleep 5', timeout_secs: 1 });
    } finally {
      await svc.close();
      await h.call('DELETE', '/v1/runtimes/cli-shape');
    }
  });

  test('cp: a file up and down, onto a directory, through stdin and stdout; the runtime side must be absolute', async () => {
    await user.run(['runtime', 'create', 'cli-files']);
    const local = join(user.home, 'data.bin');
    const data = Buffer.from(Array.from({ length: 3000 }, (_, i) => i % 256));
    writeFileSync(local, data);
    const up = await user.run(['cp', local, 'cli-files:/root/', '--json']);
    assert.equal(up.status, 0, up.err);
    assert.deepEqual(json(up), { source: local, destination: 'cli-files:/root/data.bin', type: 'file', bytes: 3000 });
    const down = await user.run(['cp', 'cli-files:/root/data.bin', join(user.home, 'back.bin')]);
    assert.equal(down.status, 0, down.err);
    assert.ok(readFileSync(join(user.home, 'back.bin')).equals(data));
    mkdirSync(join(user.home, 'into'));
    assert.equal((await user.run(['cp', 'cli-files:/root/data.bin', join(user.home, 'into')])).status, 0);
    assert.ok(readFileSync(join(user.home, 'into/data.bin')).equals(data));
    assert.equal((await user.run(['cp', '-', 'cli-files:/root/piped'], { input: 'from stdin' })).status, 0);
    assert.equal((await user.run(['cp', 'cli-files:/root/piped', '-'])).out, 'from stdin');

    const relative = await user.run(['cp', local, 'cli-files:root/x']);
    assert.equal(relative.status, 2);
    assert.match(relative.err, /must be absolute \(write \.\/cli-files:root\/x for a local file\)/);
    assert.equal((await user.run(['cp', local, join(user.home, 'b')])).status, 2);
    assert.equal((await user.run(['cp', 'cli-files:/root/nothing', join(user.home, 'c')])).status, 3);
    await user.run(['runtime', 'rm', 'cli-files']);
  });
});
