/**
 * A piped `vessel shell` (no terminal) against a scripted service, for the plumbing a real guest
 * cannot show on demand: the login shell started as a process with stdin open and no PTY; stdin
 * sent as raw bytes chunk by chunk, one write in flight, and closed with eof; output written
 * as it arrives, before the input ends; the exit status passed on; the shell's exit ending the
 * CLI while stdin stays open; Ctrl-C as SIGINT then SIGKILL; a reader that went away (EPIPE)
 * killing the shell with status 141. test/vm/cli.test.ts runs it with a real VM.
 */
import { test } from 'node:test';
import assert from 'node:assert/strict';
import { spawn } from 'node:child_process';
import { createServer, type IncomingMessage, type ServerResponse } from 'node:http';
import type { AddressInfo } from 'node:net';
import { CLI, cliUser } from '../support/cli.js';
import { sse } from '../support/scripted-service.js';

const RUNTIME = { id: 'rt_shell', display_name: 'demo', status: 'running' };
const PROCESS = (more: object = {}) => ({
  id: 5, pid: 99, command: '/bin/bash -l', status: 'running', exit_code: null, signal: null, pty: false, stdin_open: true,
  started_at: new Date(0).toISOString(), ended_at: null, stdout: { start: 0, end: 0 }, stderr: { start: 0, end: 0 }, ...more,
});
const exited = (exit_code: number, signal: number | null = null) => PROCESS({ status: signal === null ? 'exited' : 'signaled', exit_code, signal, stdin_open: false });

interface Request {
  method: string;
  url: string;
  body: Buffer;
}

/**
 * The service's side of one piped shell: every request recorded with its raw body; the output
 * stream held open for the test to write; stdin writes answered by `onStdin` (at once by default).
 */
async function shellService(options: { onStdin?: (req: Request, answer: (status?: number) => void) => void; onStart?: (answer: () => void) => void } = {}) {
  const requests: Request[] = [];
  const waiters = new Set<() => void>();
  const changed = () => waiters.forEach((w) => w());
  let output: ServerResponse | undefined;
  let stdinOpen = true;
  const json = (res: ServerResponse, status: number, body: unknown) => res.writeHead(status, { 'content-type': 'application/json' }).end(JSON.stringify(body));
  const server = createServer((req: IncomingMessage, res) => {
    const chunks: Buffer[] = [];
    req.on('data', (c: Buffer) => chunks.push(c));
    req.on('end', () => {
      const r = { method: req.method ?? '', url: req.url ?? '', body: Buffer.concat(chunks) };
      requests.push(r);
      changed();
      const path = r.url.split('?')[0]!;
      if (r.method === 'GET' && path === '/v1/runtimes/demo') return json(res, 200, { data: RUNTIME });
      if (r.method === 'POST' && path === '/v1/runtimes/rt_shell/processes') {
        const answer = () => json(res, 201, { data: PROCESS() });
        if (options.onStart === undefined) answer();
        else options.onStart(answer);
        return;
      }
      if (r.method === 'GET' && path === '/v1/runtimes/rt_shell/processes/5/output') {
        res.writeHead(200, { 'content-type': 'text/event-stream' });
        res.write(sse('start', PROCESS()));
        output = res;
        changed();
        return;
      }
      if (r.method === 'POST' && path === '/v1/runtimes/rt_shell/processes/5/stdin') {
        const answer = (status = 200) => {
          if (!stdinOpen) status = 409;
          if (status !== 200) return json(res, status, { error: { code: 'failed_precondition', message: 'stdin is not open' } });
          if (r.url.includes('eof=true')) stdinOpen = false;
          json(res, 200, { data: { bytes: r.body.length } });
        };
        if (options.onStdin === undefined) answer();
        else options.onStdin(r, answer);
        return;
      }
      if (r.method === 'POST' && path === '/v1/runtimes/rt_shell/processes/5/signal') return json(res, 200, { data: {} });
      if (r.method === 'DELETE' && path === '/v1/runtimes/rt_shell/processes/5') return json(res, 200, { data: {} });
      json(res, 404, { error: { code: 'not_found', message: `${r.method} ${r.url}` } });
    });
  });
  await new Promise<void>((resolve) => server.listen(0, '127.0.0.1', resolve));
  let offsets = { stdout: 0, stderr: 0 };
  return {
    url: `http://127.0.0.1:${(server.address() as AddressInfo).port}`,
    requests,
    stdinWrites: () => requests.filter((r) => r.url.startsWith('/v1/runtimes/rt_shell/processes/5/stdin')),
    signals: () => requests.filter((r) => r.url.endsWith('/signal')).map((r) => JSON.parse(r.body.toString()).signal as string),
    /** Resolves once `ready()` holds, checked after each request. */
    until(ready: () => boolean): Promise<void> {
      return new Promise((resolve) => {
        const check = () => {
          if (ready()) {
            waiters.delete(check);
            resolve();
          }
        };
        waiters.add(check);
        check();
      });
    },
    async write(channel: 'stdout' | 'stderr', data: Buffer) {
      await this.until(() => output !== undefined);
      const utf8 = Buffer.from(data.toString('utf8')).equals(data);
      const chunk = { offset: offsets[channel], data: utf8 ? data.toString('utf8') : data.toString('base64'), encoding: utf8 ? 'utf8' : 'base64' };
      offsets = { ...offsets, [channel]: offsets[channel] + data.length };
      output!.write(sse(channel, chunk, `${offsets.stdout},${offsets.stderr}`));
    },
    async exit(process: object) {
      await this.until(() => output !== undefined);
      stdinOpen = false;
      output!.end(sse('exit', process));
    },
    async close() {
      server.closeAllConnections();
      await new Promise((resolve) => server.close(resolve));
    },
  };
}

const userOf = (url: string) => cliUser({ VESSEL_URL: url, VESSEL_TOKEN: 'vsl_test' });

test('piped shell: a login shell with stdin and no PTY; input streamed as raw bytes, output before the input ends, eof, then the status', { timeout: 30_000 }, async () => {
  const svc = await shellService();
  try {
    const cli = userOf(svc.url).start(['shell', 'demo']);
    cli.child.stdin.write('echo hi\n');
    await svc.until(() => svc.stdinWrites().length === 1);
    assert.equal(svc.stdinWrites()[0]!.body.toString(), 'echo hi\n');
    await svc.write('stdout', Buffer.from('hi\n'));
    await svc.write('stderr', Buffer.from([0xff, 0x00, 0x0a]));
    // The output reaches the CLI's stdout while its input is still open.
    await cli.waitForOut(/^hi\n$/);
    const binary = Buffer.from([0x00, 0xff, 0xfe, 0x0a, 0xc3, 0x28]);
    cli.child.stdin.end(binary);
    await svc.until(() => svc.stdinWrites().some((r) => r.url.includes('eof=true')));
    await svc.exit(exited(3));
    const r = await cli.result;
    assert.equal(r.status, 3, r.err);
    assert.deepEqual([...r.stderr], [0xff, 0x00, 0x0a]);

    const start = svc.requests.find((q) => q.url === '/v1/runtimes/rt_shell/processes' && q.method === 'POST')!;
    assert.deepEqual(JSON.parse(start.body.toString()), { command: '/bin/bash', args: ['-l'], stdin: true, ring_bytes: 4 * 1024 * 1024 });
    const writes = svc.stdinWrites();
    assert.ok(Buffer.concat(writes.map((w) => w.body)).equals(Buffer.concat([Buffer.from('echo hi\n'), binary])));
    const last = writes.at(-1)!;
    assert.deepEqual([last.url.includes('eof=true'), last.body.length], [true, 0]);
    assert.ok(writes.slice(0, -1).every((w) => !w.url.includes('eof')));
    // The exited process is forgotten: piped shells do not fill the guest's process table.
    assert.ok(svc.requests.some((q) => q.method === 'DELETE' && q.url === '/v1/runtimes/rt_shell/processes/5'));
    assert.deepEqual(svc.signals(), []);
  } finally {
    await svc.close();
  }
});

test('piped shell: one stdin write in flight at a time, every byte in order; the input is read only as fast as the guest takes it', { timeout: 30_000 }, async () => {
  let inFlight = 0;
  let most = 0;
  const svc = await shellService({
    onStdin: (_req, answer) => {
      inFlight++;
      most = Math.max(most, inFlight);
      setTimeout(() => {
        inFlight--;
        answer();
      }, 5);
    },
  });
  try {
    const data = Buffer.alloc(2 * 1024 * 1024, 0);
    for (let i = 0; i < data.length; i++) data[i] = (i * 7 + (i >> 11)) & 0xff;
    const cli = userOf(svc.url).start(['shell', 'demo']);
    cli.child.stdin.end(data);
    await svc.until(() => svc.stdinWrites().some((r) => r.url.includes('eof=true')));
    await svc.exit(exited(0));
    const r = await cli.result;
    assert.equal(r.status, 0, r.err);
    assert.equal(most, 1);
    assert.ok(svc.stdinWrites().length > 2, 'the input is sent in chunks as it is read, not whole');
    assert.ok(Buffer.concat(svc.stdinWrites().map((w) => w.body)).equals(data));
  } finally {
    await svc.close();
  }
});

test('piped shell: the shell exiting while stdin stays open ends the CLI with its status, and stdin is read no further', { timeout: 30_000 }, async () => {
  const svc = await shellService();
  try {
    const cli = userOf(svc.url).start(['shell', 'demo']);
    cli.child.stdin.write('exit 4\n');
    await svc.until(() => svc.stdinWrites().length === 1);
    await svc.exit(exited(4));
    // stdin is never ended here, as with `tail -f log | vessel shell RT`.
    const r = await cli.result;
    assert.equal(r.status, 4, r.err);
    assert.ok(!svc.stdinWrites().some((w) => w.url.includes('eof=true')));
  } finally {
    await svc.close();
  }
});

test('piped shell: Ctrl-C sends SIGINT to the shell, a second one SIGKILL; the CLI exits with the status the shell ended with', { timeout: 30_000 }, async () => {
  const svc = await shellService();
  try {
    const cli = userOf(svc.url).start(['shell', 'demo']);
    cli.child.stdin.write('sleep 1000\n');
    await svc.until(() => svc.stdinWrites().length === 1);
    cli.child.kill('SIGINT');
    await svc.until(() => svc.signals().length === 1);
    cli.child.kill('SIGINT');
    await svc.until(() => svc.signals().length === 2);
    assert.deepEqual(svc.signals(), ['SIGINT', 'SIGKILL']);
    const tree = svc.requests.filter((q) => q.url.endsWith('/signal')).map((q) => JSON.parse(q.body.toString()).tree);
    assert.deepEqual(tree, [undefined, undefined], 'the default: the whole tree');
    await svc.exit(exited(137, 9));
    const r = await cli.result;
    assert.equal(r.status, 137, r.err);
  } finally {
    await svc.close();
  }
});

test('piped shell: a reader that went away (| head) kills the shell and ends with 141, quietly', { timeout: 30_000 }, async () => {
  const svc = await shellService();
  try {
    const user = userOf(svc.url);
    const child = spawn('bash', ['-c', 'yes "echo y" | "$0" "$1" shell demo | head -c 2; echo "status ${PIPESTATUS[1]}" >&2', process.execPath, CLI], { env: user.env, stdio: ['ignore', 'pipe', 'pipe'] });
    const out: Buffer[] = [];
    const err: Buffer[] = [];
    child.stdout.on('data', (c: Buffer) => out.push(c));
    child.stderr.on('data', (c: Buffer) => err.push(c));
    const closed = new Promise((resolve) => child.on('close', resolve));
    await svc.until(() => svc.stdinWrites().length >= 1);
    // More than head takes, in chunks, until the CLI notices the pipe is gone.
    for (let i = 0; svc.signals().length === 0; i++) {
      assert.ok(i < 1000, 'the CLI never killed the shell');
      await svc.write('stdout', Buffer.alloc(64 * 1024, 0x61));
      await new Promise((resolve) => setTimeout(resolve, 2));
    }
    await svc.exit(exited(137, 9));
    await closed;
    assert.equal(Buffer.concat(out).toString(), 'aa');
    assert.equal(Buffer.concat(err).toString(), 'status 141\n');
    assert.deepEqual(svc.signals(), ['SIGKILL']);
  } finally {
    await svc.close();
  }
});

test('piped shell: Ctrl-C while the shell starts kills it once it runs, and the CLI ends with 130', { timeout: 30_000 }, async () => {
  let release: (() => void) | undefined;
  const svc = await shellService({ onStart: (answer) => (release = answer) });
  try {
    const cli = userOf(svc.url).start(['shell', 'demo']);
    await svc.until(() => svc.requests.some((q) => q.method === 'POST' && q.url === '/v1/runtimes/rt_shell/processes'));
    cli.child.kill('SIGINT');
    // The answer is released only once the CLI has taken the signal (it says so on stderr).
    const told = /interrupted; the shell is stopped as soon as it has started/;
    for (let i = 0; i < 1200 && !told.test(cli.stderr().toString('utf8')); i++) await new Promise((resolve) => setTimeout(resolve, 25));
    release!();
    const r = await cli.result;
    assert.equal(r.status, 130, r.err);
    assert.deepEqual(svc.signals(), ['SIGKILL']);
    assert.equal(svc.stdinWrites().length, 0);
  } finally {
    await svc.close();
  }
});
