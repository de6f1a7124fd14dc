/**
 * The SDK against the real service with real VMs, as a user drives it: create, exec buffered and
 * streamed, files and a directory round trip, a background process read again from an offset, a
 * terminal, a checkpoint and a fork, secrets, rules and audits, delete. Then every example of
 * docs/sdk.md (examples/sdk/) runs as its own program against the same service.
 *
 * Nothing waits on time: what must happen first is awaited (an event, a screen's text), and the
 * audits, written in batches, are asked for until the one expected is there.
 */
import { test, before, after } from 'node:test';
import assert from 'node:assert/strict';
import { execFile } from 'node:child_process';
import { randomBytes } from 'node:crypto';
import { chmod, mkdir, mkdtemp, readFile, stat, symlink, writeFile, readlink } from 'node:fs/promises';
import { tmpdir } from 'node:os';
import { join } from 'node:path';
import { Readable } from 'node:stream';
import { Vessel, VesselError, type Runtime } from '../../client/index.js';
import { REPO_ROOT, Service } from '../support/service.js';

const svc = new Service();
const TIMEOUT = { timeout: 300_000 };
let vessel: Vessel;
let rt: Runtime;

before(async () => {
  await svc.start();
  vessel = new Vessel({ url: svc.url, token: svc.token });
  rt = await vessel.runtimes.create({ display_name: 'sdk-vm', resources: { vcpus: 1, limits: { memory_mib: 512 }, requests: { memory_mib: 512 } } });
}, { timeout: 900_000 });
after(() => svc.destroy());

test('exec, buffered and streamed', TIMEOUT, async () => {
  const result = await rt.exec('echo out; echo err >&2; exit 4');
  assert.deepEqual([result.exit_code, result.stdout, result.stderr], [4, 'out\n', 'err\n']);
  const argv = await rt.exec({ command: 'printf', args: ['%s|', 'a b', 'c'] });
  assert.equal(argv.stdout, 'a b|c|');

  let stdout = '';
  const stderr: number[] = [];
  const stream = await rt.execStream("printf 'one\\n'; printf '\\377' >&2; printf 'two\\n'; exit 2", {
    onStdout: (text) => (stdout += text),
    onStderr: (_text, chunk) => stderr.push(...chunk.bytes),
  });
  const exit = await stream.wait();
  assert.equal(exit.exit_code, 2);
  assert.equal(stdout, 'one\ntwo\n');
  assert.deepEqual(stderr, [0xff], 'bytes that are not UTF-8 come through as they are');
  assert.ok(stream.process !== undefined && stream.position === '8,1', stream.position);

  const types: string[] = [];
  for await (const event of await rt.execStream({ command: 'seq', args: ['3'] })) types.push(event.type);
  assert.equal(types[0], 'start');
  assert.equal(types.at(-1), 'exit');

  await assert.rejects(rt.exec({ command: 'no-such-program', args: ['x'] }), (e: VesselError) => e.code === 'command_failed' && e.status === 422);
  await assert.rejects(rt.execStream({ command: 'no-such-program', args: ['x'] }), (e: VesselError) => e.code === 'command_failed');
});

test('files: bytes and streams both ways, a directory up and down again', TIMEOUT, async () => {
  const data = randomBytes(3 * 1024 * 1024 + 17);
  assert.equal((await rt.files.write('/root/blob', data)).size_bytes, data.length);
  assert.ok(Buffer.from(await rt.files.readBytes('/root/blob')).equals(data));
  await rt.files.write('/root/streamed', Readable.from([data.subarray(0, 100), data.subarray(100)]));
  const chunks: Uint8Array[] = [];
  for await (const c of await rt.files.read('/root/streamed')) chunks.push(c);
  assert.ok(Buffer.concat(chunks).equals(data));
  assert.equal((await rt.exec('sha256sum /root/blob | cut -d" " -f1')).stdout.trim(), (await rt.exec('sha256sum /root/streamed | cut -d" " -f1')).stdout.trim());

  const local = await mkdtemp(join(tmpdir(), 'vessel-sdk-'));
  const src = join(local, 'src');
  await mkdir(join(src, 'deep/er'), { recursive: true });
  await writeFile(join(src, 'a.txt'), 'alpha\n');
  await writeFile(join(src, 'deep/er/b.bin'), data.subarray(0, 70_000));
  await writeFile(join(src, 'run.sh'), '#!/bin/sh\necho ran\n');
  await chmod(join(src, 'run.sh'), 0o755);
  await symlink('a.txt', join(src, 'link'));
  const uploaded = await rt.files.upload(src, '/srv/app');
  assert.ok(uploaded.size_bytes > 70_000);
  assert.equal((await rt.exec('/srv/app/run.sh')).stdout, 'ran\n');
  assert.deepEqual((await rt.files.list('/srv/app')).map((f) => [f.name, f.type]), [['a.txt', 'file'], ['deep', 'directory'], ['link', 'symlink'], ['run.sh', 'file']]);
  assert.equal((await rt.files.stat('/srv/app/link')).type, 'file');
  assert.equal((await rt.files.stat('/srv/app/link', { follow_symlinks: false })).type, 'symlink');

  await rt.files.write('/srv/app/made-here.txt', 'guest\n');
  const back = join(local, 'back');
  await rt.files.download('/srv/app', back);
  assert.equal(await readFile(join(back, 'a.txt'), 'utf8'), 'alpha\n');
  assert.equal(await readFile(join(back, 'made-here.txt'), 'utf8'), 'guest\n');
  assert.ok((await readFile(join(back, 'deep/er/b.bin'))).equals(data.subarray(0, 70_000)));
  assert.equal((await stat(join(back, 'run.sh'))).mode & 0o777, 0o755);
  assert.equal(await readlink(join(back, 'link')), 'a.txt');

  await rt.files.mkdir('/srv/app/empty/dir');
  await assert.rejects(rt.files.remove('/srv/app'), (e: VesselError) => e.code === 'failed_precondition');
  await rt.files.remove('/srv/app', { recursive: true });
  await assert.rejects(rt.files.readText('/srv/app/a.txt'), (e: VesselError) => e.code === 'not_found');
});

test('a background process: output, then the rest from where reading stopped; stdin, signal, forget', TIMEOUT, async () => {
  const proc = await rt.processes.start({ command: 'seq 1 3; read word; echo "after $word"', stdin: true });
  const first = await rt.processes.output(proc.id);
  let seen = '';
  for await (const event of first) {
    if (event.type === 'stdout') seen += event.chunk.text;
    if (seen.endsWith('3\n')) break;
  }
  assert.equal(seen, '1\n2\n3\n');
  assert.equal(first.position, '6,0');
  assert.equal((await rt.processes.get(proc.id)).status, 'running');

  assert.equal(await rt.processes.stdin(proc.id, 'go\n', { eof: true }), 3);
  let rest = '';
  const end = await (await rt.processes.output(proc.id, { since: first.position, onStdout: (t) => (rest += t) })).wait();
  assert.equal(rest, 'after go\n', 'nothing read before is repeated');
  assert.ok(end.type === 'exit' && end.process.exit_code === 0);

  const snapshot = await rt.processes.output(proc.id, { follow: false });
  assert.deepEqual(await snapshot.wait(), { type: 'end', next: '15,0' });
  assert.ok((await rt.processes.list()).some((p) => p.id === proc.id));
  await rt.processes.forget(proc.id);
  await assert.rejects(rt.processes.get(proc.id), (e: VesselError) => e.code === 'not_found');

  const sleeper = await rt.processes.start({ command: 'sleep', args: ['600'] });
  await assert.rejects(rt.processes.forget(sleeper.id), (e: VesselError) => e.code === 'failed_precondition');
  await rt.processes.signal(sleeper.id, 'SIGTERM');
  const killed = await (await rt.processes.output(sleeper.id)).wait();
  assert.ok(killed.type === 'exit' && killed.process.status === 'signaled' && killed.process.exit_code === 143, JSON.stringify(killed));
});

test('a terminal: stty size, a resize, and the exit', TIMEOUT, async () => {
  let screen = '';
  let waiting: { pattern: RegExp; resolve: () => void } | undefined;
  const look = () => {
    if (waiting === undefined || !waiting.pattern.test(screen)) return;
    screen = '';
    waiting.resolve();
    waiting = undefined;
  };
  const decoder = new TextDecoder();
  const onData = (bytes: Uint8Array) => {
    screen += decoder.decode(bytes, { stream: true });
    look();
  };
  const term = await rt.terminal({ rows: 30, cols: 100, onData });
  const closed = term.wait();
  /** Resolves once the screen shows `pattern`; fails with what it shows if the socket closes first. */
  const shown = (pattern: RegExp) =>
    new Promise<void>((resolve, reject) => {
      waiting = { pattern, resolve };
      void closed.then(() => reject(new Error(`no ${pattern} before the terminal closed: ${JSON.stringify(screen.slice(-400))}`)));
      look();
    });
  term.write('stty size\r');
  await shown(/30 100\r?\n/);
  // The resize travels apart from the input: a program that waits for its SIGWINCH sees it.
  term.write(`sh -c 'trap "stty size; exit" WINCH; echo ready-$((1+1)); while :; do sleep 1 & wait $!; done'\r`);
  await shown(/ready-2/);
  term.resize(50, 132);
  await shown(/50 132\r?\n/);
  term.write('exit 7\r');
  assert.deepEqual(await closed, { exit_code: 7, signal: null });
});

test('a checkpoint, and a fork of it that has the files and processes of its parent', TIMEOUT, async () => {
  await rt.files.write('/root/marker', 'checkpointed\n');
  const sleeper = await rt.processes.start({ command: 'sleep', args: ['900'] });
  const cp = await rt.checkpoint({ name: 'sdk-cp' });
  assert.equal(cp.state, 'creating');
  const fork = await vessel.runtimes.fork(cp, { display_name: 'sdk-fork' });
  try {
    assert.equal(fork.status, 'running');
    assert.equal(await fork.files.readText('/root/marker'), 'checkpointed\n');
    assert.equal((await fork.processes.get(sleeper.id)).status, 'running');
    assert.equal((await vessel.checkpoints.get('sdk-cp')).state, 'ready');
  } finally {
    await fork.delete();
    await rt.processes.signal(sleeper.id, 'SIGKILL');
  }
  await vessel.checkpoints.delete(cp.id);
});

test('secrets, rules and audits', TIMEOUT, async () => {
  const secret = await vessel.secrets.create({ name: 'sdk-key', value: 'sk-sdk' });
  const rule = await rt.rules.create({ host: 'api.example.com', secret: 'sdk-key', injection: { headerName: 'x-api-key' } });
  assert.deepEqual((await vessel.rules.list().toArray()).map((r) => r.id), [rule.id]);
  await rt.rules.delete(rule.id);
  await vessel.secrets.delete(secret.id);

  const denied = await rt.exec("curl -sS -m 10 -o /dev/null -w '%{http_code}' http://203.0.113.7/sdk-denied");
  assert.equal(denied.stdout, '403', denied.stderr);
  // Audits are written in batches (every 250 ms): ask until this one is in.
  let audit;
  while (audit === undefined) {
    for await (const a of vessel.audits.list({ runtime: rt.id, category: 'egress' })) {
      const http = a.payload.egress?.http_request;
      if (http !== undefined && http.path === '/sdk-denied') audit = http;
    }
  }
  assert.equal(audit.action, 'deny');
});

/** A guard against an example that hangs, so the failure shows what it printed; not a measurement. */
const EXAMPLE_GUARD_MS = 120_000;

/** Runs examples/sdk/NAME as a user would, against this service and runtime; its stdout. */
function example(name: string): Promise<string> {
  const env = { ...process.env, VESSEL_URL: svc.url, VESSEL_TOKEN: svc.token, VESSEL_RUNTIME: rt.name };
  return new Promise((resolve, reject) => {
    execFile(process.execPath, [join(REPO_ROOT, `dist/examples/sdk/${name}.js`)], { env, cwd: REPO_ROOT, timeout: EXAMPLE_GUARD_MS }, (err, stdout, stderr) => {
      if (err === null) resolve(stdout);
      else reject(new Error(`example ${name} failed (${err.killed ? 'killed by the guard' : `exit ${err.code}`}):\n${stdout}\n${stderr}`));
    });
  });
}

/** What each example of docs/sdk.md must print. */
const EXAMPLES: Array<[name: string, expected: RegExp[]]> = [
  ['quickstart', [/^0 hello from quickstart-\d+$/m]],
  ['streaming', [/\[out\] step 1/, /\[err\] warning/, /exit 3 after \d+ ms/, /ls exited 0/]],
  ['files', [/^hello$/m, /main\.py 12/, /print\("hi"\)/, /^directory$/m]],
  ['processes', [/got two/, /^got three$/m, /^exit 0$/m]],
  ['terminal', [/size: 24 80/, /resized: 40 120/, /shell exited 3/]],
  ['checkpoint-fork', [/is running: before the checkpoint/]],
  ['secrets', [/injects api-key-\d+ for api\.example\.com/]],
  ['errors', [/not_found 404/, /cancelled: AbortError/]],
];

for (const [name, expected] of EXAMPLES) {
  test(`the example ${name} of docs/sdk.md runs`, TIMEOUT, async () => {
    const stdout = await example(name);
    for (const pattern of expected) assert.match(stdout, pattern);
  });
}

test('delete', TIMEOUT, async () => {
  await rt.delete();
  await assert.rejects(vessel.runtimes.get('sdk-vm'), (e: VesselError) => e.code === 'not_found');
});
