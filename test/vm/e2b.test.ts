/**
 * E2B's own JavaScript SDK (the `e2b` package, pinned), unmodified, against the real service with
 * real VMs, configured only as docs/e2b.md tells a user: E2B_API_URL, E2B_SANDBOX_URL (the
 * ingress port) and E2B_API_KEY (a Vessel token) in the environment; for https, the service CA
 * through NODE_EXTRA_CA_CERTS.
 */
import { test, before, after } from 'node:test';
import assert from 'node:assert/strict';
import { execFile } from 'node:child_process';
import { join } from 'node:path';
import { promisify } from 'node:util';
import { AuthenticationError, CommandExitError, Sandbox, SandboxNotFoundError } from 'e2b';
import { REPO_ROOT, Service } from '../support/service.js';

const svc = new Service();
const TIMEOUT = { timeout: 300_000 };
let sbx: Sandbox;

before(async () => {
  await svc.start();
  const token = await svc.call('POST', '/v1/tokens', { tenant: 'e2b-users', scopes: ['runtimes:read', 'runtimes:write', 'exec', 'files:read', 'files:write'] });
  assert.equal(token.status, 201);
  process.env.E2B_API_URL = `${svc.url}/e2b`;
  process.env.E2B_SANDBOX_URL = `http://127.0.0.1:${svc.ingressPort}`;
  process.env.E2B_API_KEY = token.body.data.token as string;
  sbx = await Sandbox.create({ metadata: { suite: 'e2b-vm' }, envs: { FROM_CREATE: 'sandbox', SHARED: 'sandbox' } });
}, { timeout: 900_000 });
after(() => svc.destroy());

test('commands.run runs in the VM: its output, its exit code, the SDK\'s CommandExitError', TIMEOUT, async () => {
  const hi = await sbx.commands.run('echo hi');
  assert.deepEqual([hi.exitCode, hi.stdout, hi.stderr], [0, 'hi\n', '']);
  const streamed: string[] = [];
  const both = await sbx.commands.run('echo out; echo err >&2; uname -s', { onStdout: (s) => void streamed.push(s), envs: { GREETING: 'hello' } });
  assert.equal(both.stdout, 'out\nLinux\n');
  assert.equal(both.stderr, 'err\n');
  assert.equal(streamed.join(''), both.stdout);
  assert.equal((await sbx.commands.run('echo $GREETING', { envs: { GREETING: 'hello' } })).stdout, 'hello\n');
  // The sandbox's envVars are every command's, under the command's own.
  assert.equal((await sbx.commands.run('echo $FROM_CREATE-$SHARED', { envs: { SHARED: 'command' } })).stdout, 'sandbox-command\n');
  assert.equal((await sbx.commands.run('pwd', { cwd: '/tmp' })).stdout, '/tmp\n');
  await assert.rejects(sbx.commands.run('exit 3'), (err: unknown) => err instanceof CommandExitError && err.exitCode === 3);
});

test('files.write and files.read round-trip through the guest', TIMEOUT, async () => {
  const bytes = Buffer.from(Array.from({ length: 256 }, (_, i) => i));
  await sbx.files.write('/tmp/e2b/bytes.bin', bytes.buffer.slice(bytes.byteOffset, bytes.byteOffset + bytes.length) as ArrayBuffer);
  assert.deepEqual(Buffer.from(await sbx.files.read('/tmp/e2b/bytes.bin', { format: 'bytes' })), bytes);
  await sbx.files.write('/tmp/e2b/note.txt', 'written by the E2B SDK');
  assert.equal((await sbx.commands.run('cat /tmp/e2b/note.txt')).stdout, 'written by the E2B SDK');
  assert.equal(await sbx.files.read('/tmp/e2b/note.txt'), 'written by the E2B SDK');
});

test('files: makeDir, list, rename, exists, getInfo and remove in the guest', TIMEOUT, async () => {
  assert.equal(await sbx.files.makeDir('/tmp/e2b/dir/sub'), true);
  assert.equal(await sbx.files.makeDir('/tmp/e2b/dir/sub'), false);
  await sbx.files.write('/tmp/e2b/dir/sub/a.txt', 'a');
  const moved = await sbx.files.rename('/tmp/e2b/dir/sub/a.txt', '/tmp/e2b/dir/b.txt');
  assert.deepEqual([moved.name, moved.type, moved.path], ['b.txt', 'file', '/tmp/e2b/dir/b.txt']);
  assert.deepEqual((await sbx.files.list('/tmp/e2b/dir', { depth: 2 })).map((e) => [e.path, e.type]).sort(), [['/tmp/e2b/dir/b.txt', 'file'], ['/tmp/e2b/dir/sub', 'dir']]);
  const info = await sbx.files.getInfo('/tmp/e2b/dir');
  assert.deepEqual([info.type, info.permissions[0], info.owner], ['dir', 'd', 'root']);
  await sbx.files.remove('/tmp/e2b/dir');
  assert.equal(await sbx.files.exists('/tmp/e2b/dir/b.txt'), false);
});

test('processes: stdin, connect from another handle, kill, and a PTY resized', TIMEOUT, async () => {
  const reader = await sbx.commands.run('read x; echo got-$x', { background: true, stdin: true });
  assert.ok((await sbx.commands.list()).some((p) => p.pid === reader.pid));
  // Another handle, as another client would: it reads what comes from now on.
  const other = await (await Sandbox.connect(sbx.sandboxId)).commands.connect(reader.pid);
  await sbx.commands.sendStdin(reader.pid, 'hello\n');
  assert.equal((await reader.wait()).stdout, 'got-hello\n');
  assert.equal((await other.wait()).stdout, 'got-hello\n');

  const sleeper = await sbx.commands.run('sleep 600', { background: true });
  assert.equal(await sbx.commands.kill(sleeper.pid), true);
  await assert.rejects(sleeper.wait(), CommandExitError);

  let shown = '';
  let sawSize: () => void;
  const size = new Promise<void>((resolve) => (sawSize = resolve));
  const pty = await sbx.pty.create({ rows: 24, cols: 80, onData: (d) => {
    shown += Buffer.from(d).toString();
    if (/^31 101\r?$/m.test(shown)) sawSize();
  } });
  await sbx.pty.resize(pty.pid, { rows: 31, cols: 101 });
  await sbx.pty.sendInput(pty.pid, new TextEncoder().encode('stty size\n'));
  await size;
  assert.equal(await sbx.pty.kill(pty.pid), true);
  await assert.rejects(pty.wait(), CommandExitError);
});

test('https on the ingress, with the service CA trusted through NODE_EXTRA_CA_CERTS', TIMEOUT, async () => {
  // NODE_EXTRA_CA_CERTS is read when Node starts: the SDK runs in a process of its own.
  const script = `import { Sandbox } from 'e2b';
    const sbx = await Sandbox.connect(process.env.SANDBOX_ID);
    console.log((await sbx.commands.run('echo over-tls')).stdout.trim());`;
  const env = { ...process.env, NODE_EXTRA_CA_CERTS: join(svc.dataDir, 'ca.crt'), E2B_SANDBOX_URL: `https://localhost:${svc.ingressPort}`, SANDBOX_ID: sbx.sandboxId };
  const { stdout } = await promisify(execFile)(process.execPath, ['--input-type=module', '-e', script], { cwd: REPO_ROOT, env });
  assert.equal(stdout.trim(), 'over-tls');
});

test('Sandbox.list finds it by its metadata, and a wrong key or an unknown sandbox are the SDK\'s errors', TIMEOUT, async () => {
  const listed = await Sandbox.list({ query: { metadata: { suite: 'e2b-vm' } } }).nextItems();
  assert.deepEqual(listed.map((s) => [s.sandboxId, s.state]), [[sbx.sandboxId, 'running']]);
  await assert.rejects(Sandbox.list({ apiKey: 'vsl_wrong' }).nextItems(), AuthenticationError);
  await assert.rejects(Sandbox.connect('no-such-sandbox'), SandboxNotFoundError);
});

test('Sandbox.connect gives another handle on the same VM', TIMEOUT, async () => {
  const again = await Sandbox.connect(sbx.sandboxId);
  assert.equal(again.sandboxId, sbx.sandboxId);
  assert.equal((await again.commands.run('cat /tmp/e2b/note.txt')).stdout, 'written by the E2B SDK');
  assert.equal((await Sandbox.getInfo(sbx.sandboxId)).state, 'running');
});

test('pause saves the sandbox to disk and frees its VM; connect brings back its memory and processes', TIMEOUT, async () => {
  const sleeper = await sbx.commands.run('echo only-in-memory > /dev/shm/kept; exec sleep 600', { background: true });
  assert.equal(await sbx.pause(), true);
  assert.equal((await svc.call('GET', `/v1/runtimes/${sbx.sandboxId}`, undefined, process.env.E2B_API_KEY)).body.data.status, 'suspended', 'saved to disk, its VM ended');
  assert.equal((await Sandbox.getInfo(sbx.sandboxId)).state, 'paused');
  const back = await Sandbox.connect(sbx.sandboxId);
  assert.equal((await back.commands.run('cat /dev/shm/kept')).stdout, 'only-in-memory\n', 'tmpfs is memory: it came back with it');
  assert.equal((await back.commands.run(`kill -0 ${sleeper.pid} && echo alive`)).stdout, 'alive\n');
});

test('kill: the sandbox is gone from both APIs', TIMEOUT, async () => {
  await sbx.kill();
  assert.deepEqual(await Sandbox.list({ query: { metadata: { suite: 'e2b-vm' } } }).nextItems(), []);
  assert.equal((await svc.call('GET', `/v1/runtimes/${sbx.sandboxId}`, undefined, process.env.E2B_API_KEY)).status, 404, 'not found by its own tenant either');
  await assert.rejects(sbx.commands.run('true'), SandboxNotFoundError);
});
