/**
 * E2B's own JavaScript SDK (the `e2b` package, pinned), unmodified, against the real service with
 * real VMs, configured only as docs/e2b.md tells a user: E2B_API_URL, E2B_SANDBOX_URL and
 * E2B_API_KEY (a Vessel token) in the environment.
 */
import { test, before, after } from 'node:test';
import assert from 'node:assert/strict';
import { AuthenticationError, CommandExitError, Sandbox, SandboxNotFoundError } from 'e2b';
import { Service } from '../support/service.js';

const svc = new Service();
const TIMEOUT = { timeout: 300_000 };
let sbx: Sandbox;

before(async () => {
  await svc.start();
  const token = await svc.call('POST', '/v1/tokens', { tenant: 'e2b-users', scopes: ['runtimes:read', 'runtimes:write', 'exec', 'files:read', 'files:write'] });
  assert.equal(token.status, 201);
  process.env.E2B_API_URL = `${svc.url}/e2b`;
  process.env.E2B_SANDBOX_URL = `${svc.url}/e2b-envd`;
  process.env.E2B_API_KEY = token.body.data.token as string;
  sbx = await Sandbox.create({ metadata: { suite: 'e2b-vm' } });
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

test('kill: the sandbox is gone from both APIs', TIMEOUT, async () => {
  await sbx.kill();
  assert.deepEqual(await Sandbox.list({ query: { metadata: { suite: 'e2b-vm' } } }).nextItems(), []);
  assert.equal((await svc.call('GET', `/v1/runtimes/${sbx.sandboxId}`)).status, 404);
  await assert.rejects(sbx.commands.run('true'), SandboxNotFoundError);
});
