/**
 * The SDK's event streams over a scripted service: a streamed exec (callbacks, iterator, wait,
 * an error event, binary output), a process's output resumed after its connection broke, and the
 * bound on an event that never ends. The real service's streams are in test/vm/sdk.test.ts.
 */
import { test, after } from 'node:test';
import assert from 'node:assert/strict';
import { Vessel, VesselError, type CommandEvent, type ExecExit } from '../../client/index.js';
import { scriptedService, sendJson, sse, type ScriptedService } from '../support/scripted-service.js';

const runtime = { id: '00000000-0000-4000-8000-000000000001', display_name: 'r', status: 'running', egress_policy: { enabled: true, allowed_hosts: [] }, ingress_specs: [], resources: { limits: { memory_mib: 512 }, requests: { memory_mib: 512 }, vcpus: 1 }, created_at: '2026-01-01T00:00:00.000Z' };
const proc = (status: string, exit_code: number | null) => ({ id: 7, pid: 311, command: 'x', status, exit_code, signal: null, pty: false, stdin_open: false, started_at: '2026-01-01T00:00:00.000Z', ended_at: null, stdout: { start: 0, end: 0 }, stderr: { start: 0, end: 0 } });

const services: ScriptedService[] = [];
after(() => Promise.all(services.map((s) => s.close())));

/** Answers the runtime lookup, then streams `events` per request (the n-th list for the n-th stream). */
async function streaming(...streams: Array<{ events: string; destroy?: boolean }>) {
  const svc = await scriptedService((req, res, n) => {
    if (n === 0) return sendJson(res, 200, { data: runtime });
    const s = streams[n - 1]!;
    res.writeHead(200, { 'content-type': 'text/event-stream', 'x-request-id': `stream-${n}` });
    if (s.destroy === true) res.write(s.events, () => res.destroy());
    else res.end(s.events);
    void req;
  });
  services.push(svc);
  const vessel = new Vessel({ url: svc.url, token: 't', retry: { maxRetries: 2, baseDelayMs: 1 } });
  return { svc, rt: await vessel.runtimes.get('r') };
}

test('a streamed exec: callbacks see the output, wait() returns the exit, text and bytes both ways', async () => {
  const { svc, rt } = await streaming({
    events:
      sse('start', proc('running', null)) +
      ': keep-alive\n\n' +
      sse('stdout', { offset: 0, data: 'hello\n', encoding: 'utf8' }, '6,0') +
      sse('stderr', { offset: 0, data: Buffer.from([0xff, 0x41]).toString('base64'), encoding: 'base64' }, '6,2') +
      sse('exit', { exit_code: 3, duration_ms: 12 }),
  });
  const out: string[] = [];
  const err: Uint8Array[] = [];
  const stream = await rt.execStream({ command: 'x', background: true }, { onStdout: (text) => out.push(text), onStderr: (_t, chunk) => err.push(chunk.bytes) });
  const exit = await stream.wait();
  assert.deepEqual(exit, { type: 'exit', exit_code: 3, duration_ms: 12 });
  assert.deepEqual(out, ['hello\n']);
  assert.deepEqual(err.map((b) => [...b]), [[0xff, 0x41]]);
  assert.equal(stream.process?.id, 7);
  assert.equal(stream.position, '6,2');
  const request = svc.requests[1]!;
  assert.equal(request.headers.accept, 'text/event-stream');
  assert.deepEqual(JSON.parse(request.body), { command: 'x', background: true });
});

test('the events as an async iterator, in order', async () => {
  const { rt } = await streaming({ events: sse('start', proc('running', null)) + sse('stdout', { offset: 0, data: 'a', encoding: 'utf8' }, '1,0') + sse('exit', { exit_code: 0, duration_ms: 1 }) });
  const seen: Array<CommandEvent<ExecExit>['type']> = [];
  for await (const event of await rt.execStream('x')) seen.push(event.type);
  assert.deepEqual(seen, ['start', 'stdout', 'exit']);
});

test('an error event is thrown as its VesselError, with the request id', async () => {
  const { rt } = await streaming({ events: sse('start', proc('running', null)) + sse('error', { error: { code: 'deadline_exceeded', message: 'timed out' } }) });
  const stream = await rt.execStream('sleep 100');
  await assert.rejects(stream.wait(), (e: VesselError) => e instanceof VesselError && e.code === 'deadline_exceeded' && e.requestId === 'stream-1');
});

test('a stream that ends without its exit is an error, not a silent end', async () => {
  const { rt } = await streaming({ events: sse('start', proc('running', null)) });
  await assert.rejects((await rt.execStream('x')).wait(), (e: VesselError) => e.code === 'unavailable');
});

test("a process's output resumes after a broken connection from the last position, with no repeat", async () => {
  const { svc, rt } = await streaming(
    { events: sse('start', proc('running', null)) + sse('stdout', { offset: 0, data: 'one\n', encoding: 'utf8' }, '4,0'), destroy: true },
    { events: sse('start', proc('running', null)) + sse('stdout', { offset: 4, data: 'two\n', encoding: 'utf8', lost: 0 }, '8,0') + sse('exit', proc('exited', 0), '8,0') },
  );
  const text: string[] = [];
  const types: string[] = [];
  const output = await rt.processes.output(7, { since: '0,0', onStdout: (t) => text.push(t) });
  for await (const event of output) types.push(event.type);
  assert.deepEqual(text, ['one\n', 'two\n']);
  assert.deepEqual(types, ['start', 'stdout', 'stdout', 'exit'], 'the second connection\'s start is not repeated');
  assert.deepEqual(svc.requests.slice(1).map((r) => new URL(r.url, svc.url).searchParams.get('since')), ['0,0', '4,0']);
});

test('follow=false ends with `end` and the position to resume from', async () => {
  const { svc, rt } = await streaming({ events: sse('start', proc('running', null)) + sse('stdout', { offset: 0, data: 'x', encoding: 'utf8' }, '1,0') + sse('end', { next: '1,0' }, '1,0') });
  const output = await rt.processes.output(7, { follow: false });
  assert.deepEqual(await output.wait(), { type: 'end', next: '1,0' });
  assert.equal(output.position, '1,0');
  assert.equal(new URL(svc.requests[1]!.url, svc.url).searchParams.get('follow'), 'false');
});

test('an event that never ends is cut off at the bound instead of growing without one', async () => {
  const { rt } = await streaming({ events: `event: stdout\ndata: ${'x'.repeat(5 * 1024 * 1024)}` });
  await assert.rejects((await rt.execStream('x')).wait(), (e: VesselError) => e.code === 'internal' && /ran past/.test(e.message));
});

test('close() ends the stream, and the service sees the request go', async () => {
  let gone!: Promise<void>;
  const svc = await scriptedService((_req, res, n) => {
    if (n === 0) return sendJson(res, 200, { data: runtime });
    gone = new Promise((resolve) => res.on('close', resolve));
    res.writeHead(200, { 'content-type': 'text/event-stream' });
    res.write(sse('start', proc('running', null)));
  });
  services.push(svc);
  const rt = await new Vessel({ url: svc.url, token: 't' }).runtimes.get('r');
  const stream = await rt.execStream('sleep 100');
  const first = await stream[Symbol.asyncIterator]().next();
  assert.equal(first.value?.type, 'start');
  stream.close();
  await assert.rejects(stream.wait(), { name: 'AbortError' });
  await gone;
});
