/**
 * Interactive runtimes on a real VM through the real service: streamed exec, background
 * processes (output replay, stdin, signals, forgetting), a terminal over a WebSocket, a process
 * that outlives a service restart, and a 100 MiB file round trip. One runtime serves every case.
 *
 * Nothing here waits on time: a command that must still be running blocks on a file the test
 * creates once it has seen what it waits for.
 */
import { test, before, after } from 'node:test';
import assert from 'node:assert/strict';
import { createHash, randomBytes } from 'node:crypto';
import { WebSocket } from 'ws';
import { Service } from '../support/service.js';
import { sseEvents, type Sse } from '../support/sse.js';

const svc = new Service();
const TIMEOUT = { timeout: 300_000 };
const RT = 'inter-a';

before(async () => {
  await svc.start();
  const r = await svc.call('POST', '/v1/runtimes', { display_name: RT, resources: { limits: { memory_mib: 512 }, requests: { memory_mib: 512 }, vcpus: 1 } });
  assert.equal(r.status, 201, JSON.stringify(r.body));
}, { timeout: 900_000 });
after(() => svc.destroy());

const auth = () => ({ authorization: `Bearer ${svc.token}` });
const text = (e: Sse): string => (e.data.encoding === 'base64' ? Buffer.from(e.data.data, 'base64').toString('utf8') : e.data.data);

function streamExec(body: object, signal?: AbortSignal): Promise<Response> {
  return fetch(`${svc.url}/v1/runtimes/${RT}/exec`, {
    method: 'POST',
    headers: { ...auth(), 'content-type': 'application/json', accept: 'text/event-stream' },
    body: JSON.stringify(body),
    ...(signal === undefined ? {} : { signal }),
  });
}

function output(pid: number, query = '', signal?: AbortSignal): Promise<Response> {
  return fetch(`${svc.url}/v1/runtimes/${RT}/processes/${pid}/output${query}`, { headers: { ...auth(), accept: 'text/event-stream' }, ...(signal === undefined ? {} : { signal }) });
}

/** Reads events until `until` says stop; returns them all (stdout text joined in `stdout`). */
async function collect(events: AsyncGenerator<Sse>, until: (e: Sse, stdout: string) => boolean): Promise<{ all: Sse[]; stdout: string; stderr: string }> {
  const all: Sse[] = [];
  let stdout = '';
  let stderr = '';
  // next() by hand: a for-await that breaks would close the generator, and with it the response.
  for (let r = await events.next(); !r.done; r = await events.next()) {
    const e = r.value;
    all.push(e);
    if (e.event === 'stdout') stdout += text(e);
    if (e.event === 'stderr') stderr += text(e);
    if (until(e, stdout)) break;
  }
  return { all, stdout, stderr };
}

const sh = async (command: string) => {
  const r = await svc.call('POST', `/v1/runtimes/${RT}/exec`, { command });
  assert.equal(r.status, 200, JSON.stringify(r.body));
  return r.body.data as { exit_code: number; stdout: string };
};

/** Polls a guest condition a bounded number of times (a kill takes a moment to land). */
async function eventually(command: string, what: string): Promise<void> {
  for (let i = 0; i < 100; i++) {
    if ((await sh(command)).exit_code === 0) return;
    await new Promise((r) => setTimeout(r, 100));
  }
  assert.fail(`never true: ${what}`);
}

test('a streamed exec delivers its first chunk while the command still runs, then its exit', TIMEOUT, async () => {
  const res = await streamExec({ command: 'echo ready; echo warn >&2; while [ ! -e /tmp/go1 ]; do sleep 0.05; done; printf "caf\\303\\251 done\\n"; exit 3' });
  assert.equal(res.status, 200);
  assert.match(res.headers.get('content-type') ?? '', /^text\/event-stream/);
  const events = sseEvents(res);
  const first = await collect(events, (_e, out) => out.includes('ready\n'));
  assert.equal(first.all[0]!.event, 'start');
  assert.equal(first.all[0]!.data.status, 'running');
  // The command is blocked until this file exists: the chunk above came while it ran.
  await sh('touch /tmp/go1');
  const rest = await collect(events, (e) => e.event === 'exit');
  assert.equal(rest.stdout, 'café done\n');
  assert.equal(first.stderr + rest.stderr, 'warn\n');
  const exit = rest.all.at(-1)!;
  assert.equal(exit.data.exit_code, 3);
  assert.ok(Number.isInteger(exit.data.duration_ms));
});

test('a streamed exec validates like the buffered one, and binary output comes as base64', TIMEOUT, async () => {
  let res = await streamExec({ command: 'ls', cwd: '/does/not/exist' });
  assert.equal(res.status, 422);
  assert.equal(((await res.json()) as any).error.code, 'command_failed');
  res = await streamExec({ command: 'true', unknown_field: 1 });
  assert.equal(res.status, 400);
  res = await fetch(`${svc.url}/v1/runtimes/no-such-rt/exec`, { method: 'POST', headers: { ...auth(), 'content-type': 'application/json', accept: 'text/event-stream' }, body: '{"command":"true"}' });
  assert.equal(res.status, 404);
  const buffered = await svc.call('POST', `/v1/runtimes/${RT}/exec`, { command: 'true', background: true });
  assert.equal(buffered.status, 400, 'background means nothing to a buffered exec');
  res = await streamExec({ command: "printf '\\377\\376\\000x'" });
  const { all } = await collect(sseEvents(res), (e) => e.event === 'exit');
  const bytes = Buffer.concat(all.filter((e) => e.event === 'stdout').map((e) => Buffer.from(e.data.data, e.data.encoding === 'base64' ? 'base64' : 'utf8')));
  assert.deepEqual([...bytes], [0xff, 0xfe, 0x00, 0x78]);
  // A command over one agent frame (64 KiB) is staged through a script in the guest.
  const big = 'x'.repeat(100 * 1024);
  res = await streamExec({ command: `printf %s '${big}' | wc -c` });
  const staged = await collect(sseEvents(res), (e) => e.event === 'exit');
  assert.equal(staged.stdout.trim(), String(big.length));
  assert.equal(staged.all.at(-1)!.data.exit_code, 0);
  const bufferedBig = await sh(`printf %s '${big}' | wc -c`);
  assert.equal(bufferedBig.stdout.trim(), String(big.length), 'the buffered exec stages the same way');
});

test('a streamed exec whose client disconnects kills the whole tree; with background it runs on and can be re-read', TIMEOUT, async () => {
  const abort = new AbortController();
  const res = await streamExec({ command: 'sleep 1000 & echo $! > /tmp/child; echo started; wait' }, abort.signal);
  await collect(sseEvents(res), (_e, out) => out.includes('started'));
  abort.abort();
  await eventually('! kill -0 "$(cat /tmp/child)" 2>/dev/null', 'the child of an abandoned exec is killed');

  const bg = new AbortController();
  const res2 = await streamExec({ command: 'echo started; while [ ! -e /tmp/go2 ]; do sleep 0.05; done; echo finished', background: true }, bg.signal);
  const events = sseEvents(res2);
  const start = (await events.next()).value as Sse;
  assert.equal(start.event, 'start');
  const pid = start.data.id as number;
  await collect(events, (_e, out) => out.includes('started'));
  bg.abort();
  let r = await svc.call('GET', `/v1/runtimes/${RT}/processes/${pid}`);
  assert.equal(r.status, 200);
  assert.equal(r.body.data.status, 'running', 'a background exec outlives its client');
  await sh('touch /tmp/go2');
  // Reconnect from the start: everything it printed is replayed, then its exit.
  const replay = await collect(sseEvents(await output(pid, '?since=0')), (e) => e.event === 'exit');
  assert.equal(replay.stdout, 'started\nfinished\n');
  assert.equal(replay.all.at(-1)!.data.exit_code, 0);
  r = await svc.call('GET', `/v1/runtimes/${RT}/processes`);
  assert.ok(r.body.data.some((p: any) => p.id === pid && p.status === 'exited'));
});

test('background processes: stdin, output replay from an offset, signals, forgetting', TIMEOUT, async () => {
  let r = await svc.call('POST', `/v1/runtimes/${RT}/processes`, { command: 'cat', args: [], stdin: true });
  assert.equal(r.status, 201, JSON.stringify(r.body));
  const cat = r.body.data;
  assert.equal(cat.status, 'running');
  assert.equal(cat.stdin_open, true);
  const put = await fetch(`${svc.url}/v1/runtimes/${RT}/processes/${cat.id}/stdin?eof=true`, { method: 'POST', headers: { ...auth(), 'content-type': 'application/octet-stream' }, body: 'hello, cat' });
  assert.equal(put.status, 200);
  assert.equal(((await put.json()) as any).data.bytes, 10);
  const whole = await collect(sseEvents(await output(cat.id)), (e) => e.event === 'exit');
  assert.equal(whole.stdout, 'hello, cat');
  // Resume from an event id: only what came after it.
  const partial = await collect(sseEvents(await output(cat.id, '?since=7,0')), (e) => e.event === 'exit');
  assert.equal(partial.stdout, 'cat');
  const snapshot = await collect(sseEvents(await output(cat.id, '?follow=false')), (e) => e.event === 'exit' || e.event === 'end');
  assert.equal(snapshot.stdout, 'hello, cat');
  r = await svc.call('POST', `/v1/runtimes/${RT}/processes/${cat.id}/signal`, { signal: 'SIGTERM' });
  assert.equal(r.status, 200, 'signalling an exited process is harmless');

  r = await svc.call('POST', `/v1/runtimes/${RT}/processes`, { command: 'sleep 1000' });
  const sleeper = r.body.data;
  r = await svc.call('DELETE', `/v1/runtimes/${RT}/processes/${sleeper.id}`);
  assert.equal(r.status, 409, 'a running process cannot be forgotten');
  r = await svc.call('POST', `/v1/runtimes/${RT}/processes/${sleeper.id}/signal`, { signal: 'SIGBOGUS' });
  assert.equal(r.status, 400);
  r = await svc.call('POST', `/v1/runtimes/${RT}/processes/${sleeper.id}/signal`, { signal: 'SIGTERM' });
  assert.equal(r.status, 200);
  const ended = await collect(sseEvents(await output(sleeper.id)), (e) => e.event === 'exit');
  assert.equal(ended.all.at(-1)!.data.status, 'signaled');
  assert.equal(ended.all.at(-1)!.data.signal, 15);
  assert.equal(ended.all.at(-1)!.data.exit_code, 143);
  r = await svc.call('DELETE', `/v1/runtimes/${RT}/processes/${sleeper.id}`);
  assert.equal(r.status, 200);
  r = await svc.call('GET', `/v1/runtimes/${RT}/processes/${sleeper.id}`);
  assert.equal(r.status, 404);
  r = await svc.call('GET', `/v1/runtimes/${RT}/processes/${sleeper.id}/output`);
  assert.equal(r.status, 404);
  const noStdin = await fetch(`${svc.url}/v1/runtimes/${RT}/processes/${cat.id}/stdin`, { method: 'POST', headers: auth(), body: 'x' });
  assert.equal(noStdin.status, 409);
});

test('output past the ring: the reader is told how much was lost', TIMEOUT, async () => {
  const r = await svc.call('POST', `/v1/runtimes/${RT}/processes`, {
    command: 'head -c 20000 /dev/zero | tr "\\0" a; while [ ! -e /tmp/go4 ]; do sleep 0.05; done',
    ring_bytes: 4096,
  });
  assert.equal(r.status, 201);
  const pid = r.body.data.id as number;
  // Only once all 20000 bytes were written does the reader come, so the ring has overrun.
  let state: any;
  for (let i = 0; i < 200; i++) {
    state = (await svc.call('GET', `/v1/runtimes/${RT}/processes/${pid}`)).body.data;
    if (state.stdout.end === 20000) break;
    await new Promise((res) => setTimeout(res, 50));
  }
  assert.equal(state.stdout.end, 20000);
  assert.ok(state.stdout.start > 0 && state.stdout.end - state.stdout.start <= 4096, JSON.stringify(state));
  const events = sseEvents(await output(pid, '?since=0'));
  const kept = await collect(events, (_e, out) => out.length >= 20000 - state.stdout.start);
  const chunks = kept.all.filter((e) => e.event === 'stdout');
  assert.equal(chunks[0]!.data.offset, state.stdout.start);
  assert.equal(chunks[0]!.data.lost, state.stdout.start, 'the first chunk counts the bytes the ring dropped');
  assert.equal(kept.stdout, 'a'.repeat(20000 - state.stdout.start));
  await sh('touch /tmp/go4');
  const end = await collect(events, (e) => e.event === 'exit');
  assert.equal(end.all.at(-1)!.data.exit_code, 0);
});

/** A terminal session: what it printed so far, and a way to wait for text. */
function openTerminal(query: string): Promise<{ ws: WebSocket; screen: () => string; waitFor: (re: RegExp) => Promise<void>; closed: Promise<{ code: number; exit: any }> }> {
  const ws = new WebSocket(`${svc.url.replace('http', 'ws')}/v1/runtimes/${RT}/terminal${query}`, { headers: auth() });
  let screen = '';
  let exit: any = null;
  const waiters: Array<() => void> = [];
  ws.on('message', (data: Buffer, isBinary: boolean) => {
    if (isBinary) screen += data.toString('utf8');
    else exit = JSON.parse(data.toString('utf8'));
    for (const w of waiters.splice(0)) w();
  });
  const closed = new Promise<{ code: number; exit: any }>((resolve) =>
    ws.on('close', (code) => {
      resolve({ code, exit });
      for (const w of waiters.splice(0)) w();
    }),
  );
  /** Waits for text on the screen; a guard, not a measurement: the failure shows what came. */
  const waitFor = async (re: RegExp) => {
    const guard = setTimeout(() => {
      for (const w of waiters.splice(0)) w();
    }, 60_000);
    const deadline = Date.now() + 60_000;
    try {
      while (!re.test(screen)) {
        if (ws.readyState === ws.CLOSED || Date.now() >= deadline) assert.fail(`no ${re} on the terminal (${ws.readyState === ws.CLOSED ? 'closed' : 'open'}): ${JSON.stringify(screen.slice(-400))}`);
        await new Promise<void>((resolve) => waiters.push(resolve));
      }
    } finally {
      clearTimeout(guard);
    }
  };
  return new Promise((resolve, reject) => {
    ws.once('open', () => resolve({ ws, screen: () => screen, waitFor, closed }));
    ws.once('unexpected-response', (req, res) => {
      req.destroy();
      reject(new Error(`terminal refused: ${res.statusCode}`));
    });
    ws.once('error', reject);
  });
}

test('a terminal: size and resize reach stty, Ctrl-C reaches the foreground program, exit closes it', TIMEOUT, async () => {
  const t = await openTerminal('?rows=30&cols=100');
  t.ws.send(Buffer.from('stty size; echo mark-$((40+2))\r'));
  await t.waitFor(/30 100\r?\n(.|\r|\n)*mark-42/);
  t.ws.send(JSON.stringify({ type: 'resize', rows: 40, cols: 120 }));
  t.ws.send(Buffer.from('stty size; echo mark-$((50+2))\r'));
  await t.waitFor(/40 120\r?\n(.|\r|\n)*mark-52/);
  // The child announces itself once it is the terminal's foreground group (job control makes
  // it so before exec), and execs sleep in place: ^C cannot arrive between the two.
  t.ws.send(Buffer.from("sh -c 'echo sleep-$((6+1)); exec sleep 1000'\r"));
  await t.waitFor(/sleep-7\r?\n/);
  t.ws.send(Buffer.from([0x03]));
  // The line discipline turns ^C into SIGINT for the foreground group (echoed as ^C); the shell
  // survives it, prompts again, and reports the interrupted command's status.
  await t.waitFor(/\^C[\s\S]*# $/);
  t.ws.send(Buffer.from('echo status-$?\r'));
  await t.waitFor(/status-130/);
  t.ws.send(JSON.stringify({ type: 'input', data: 'exit 5\r' }));
  const end = await t.closed;
  assert.equal(end.code, 1000);
  assert.equal(end.exit.type, 'exit');
  assert.equal(end.exit.exit_code, 5);
});

test('a terminal refuses what is not a WebSocket or not a terminal, with plain HTTP errors', TIMEOUT, async () => {
  let r = await svc.call('GET', `/v1/runtimes/${RT}/terminal`);
  assert.equal(r.status, 400);
  const plain = await svc.call('POST', `/v1/runtimes/${RT}/processes`, { command: 'true' });
  await assert.rejects(openTerminal(`?process_id=${plain.body.data.id}`), /terminal refused: 409/);
  await assert.rejects(openTerminal('?rows=0'), /terminal refused: 400/);
  const ws = new WebSocket(`${svc.url.replace('http', 'ws')}/v1/runtimes/${RT}/terminal`);
  const refused = await new Promise<number>((resolve) =>
    ws.once('unexpected-response', (req, res) => {
      req.destroy();
      resolve(res.statusCode ?? 0);
    }),
  );
  assert.equal(refused, 401);
  r = await svc.call('GET', `/v1/runtimes/${RT}`);
  assert.equal(r.body.data.status, 'running');
});

test('a pty process outlives its terminal, and a background process outlives a service restart', TIMEOUT, async () => {
  let r = await svc.call('POST', `/v1/runtimes/${RT}/processes`, { command: '/bin/sh', pty: { rows: 24, cols: 80 } });
  assert.equal(r.status, 201, JSON.stringify(r.body));
  const shell = r.body.data.id as number;
  const first = await openTerminal(`?process_id=${shell}`);
  first.ws.send(Buffer.from('echo one-$((1+1))\r'));
  await first.waitFor(/one-2/);
  first.ws.close();
  await first.closed;

  r = await svc.call('POST', `/v1/runtimes/${RT}/processes`, { command: 'echo before; while [ ! -e /tmp/go3 ]; do sleep 0.05; done; echo after' });
  const waiter = r.body.data.id as number;
  await collect(sseEvents(await output(waiter)), (_e, out) => out.includes('before'));

  await svc.kill9();
  await svc.start();

  r = await svc.call('GET', `/v1/runtimes/${RT}/processes/${waiter}`);
  assert.equal(r.status, 200, JSON.stringify(r.body));
  assert.equal(r.body.data.status, 'running', 'the guest kept the process across the restart');
  await sh('touch /tmp/go3');
  const after = await collect(sseEvents(await output(waiter)), (e) => e.event === 'exit');
  assert.equal(after.stdout, 'before\nafter\n');

  // The pty shell kept its state too: reattach, replaying its screen, and go on typing.
  const again = await openTerminal(`?process_id=${shell}`);
  await again.waitFor(/one-2/);
  again.ws.send(Buffer.from('echo two-$((2+1))\r'));
  await again.waitFor(/two-3/);
  again.ws.send(Buffer.from('exit\r'));
  assert.equal((await again.closed).exit.exit_code, 0);
});

test('a 100 MiB file makes the round trip with its checksum intact', TIMEOUT, async () => {
  const data = randomBytes(100 * 1024 * 1024);
  const digest = createHash('sha256').update(data).digest('hex');
  const put = await fetch(`${svc.url}/v1/runtimes/${RT}/files?path=/root/big.bin`, { method: 'PUT', headers: { ...auth(), 'content-type': 'application/octet-stream' }, body: new Uint8Array(data) });
  assert.equal(put.status, 200, await put.clone().text());
  assert.equal((await sh('sha256sum /root/big.bin | cut -d" " -f1')).stdout.trim(), digest);
  const get = await fetch(`${svc.url}/v1/runtimes/${RT}/files?path=/root/big.bin`, { headers: auth() });
  assert.equal(get.status, 200);
  const back = createHash('sha256');
  let size = 0;
  for await (const chunk of get.body as unknown as AsyncIterable<Uint8Array>) {
    back.update(chunk);
    size += chunk.length;
  }
  assert.equal(size, data.length);
  assert.equal(back.digest('hex'), digest);
  await sh('rm /root/big.bin');
});
