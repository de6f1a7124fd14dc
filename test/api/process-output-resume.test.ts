/**
 * A process's output resumed from any event's id, over the real HTTP route and the real
 * vessel-agent (on the host, test/support/host-agent-driver.ts): each event's id is exactly the
 * per-channel position of what this stream has delivered, so a client that drops after any event
 * and resumes from its id gets the rest with no gap and no repeat, on both channels. The SDK's
 * own reconnect is tested the same way, through a proxy that cuts the stream after an event.
 */
import { test, before, after } from 'node:test';
import assert from 'node:assert/strict';
import { request as httpRequest, createServer, type Server } from 'node:http';
import type { AddressInfo } from 'node:net';
import { Vessel } from '../../client/index.js';
import { apiHarness, type ApiHarness } from '../support/api-harness.js';
import { buildAgent } from '../support/agent-harness.js';
import { agentFixture } from '../support/agent-fixture.js';
import { HostAgentDriver } from '../support/host-agent-driver.js';
import { eventBytes, sseEvents, type Sse } from '../support/sse.js';

const build = buildAgent();
const skip = 'skip' in build ? build.skip : false;
const fx = agentFixture('output-resume', build);
let h: ApiHarness;
let api: string;
let runtimeId: string;

before(async () => {
  if (skip !== false) return;
  h = await apiHarness({ driver: new HostAgentDriver(() => fx.client) });
  api = await h.app.listen({ host: '127.0.0.1', port: 0 });
  const created = await h.call('POST', '/v1/runtimes', { display_name: 'resume' });
  assert.equal(created.status, 201, JSON.stringify(created.body));
  runtimeId = created.body.data.id;
});
after(() => h?.close());

const OUTPUT_EVENTS = new Set(['stdout', 'stderr']);
/** 150 lines on stdout and one on stderr every 50 (the reproduction). */
const REPRODUCTION = 'i=1; while [ $i -le 150 ]; do echo "line $i"; [ $((i % 50)) -eq 0 ] && echo "err $i" >&2; i=$((i+1)); done';

async function startProcess(command: string): Promise<number> {
  const r = await h.call('POST', `/v1/runtimes/${runtimeId}/processes`, { command });
  assert.equal(r.status, 201, JSON.stringify(r.body));
  return r.body.data.id;
}

/** Follows the output to the process's exit. */
async function waitExited(pid: number): Promise<void> {
  const events = await read(pid, 'follow=true');
  assert.equal(events.at(-1)?.event, 'exit');
}

/** Every event of one read of the output route, from `since` (or the oldest byte). */
async function read(pid: number, query: string): Promise<Sse[]> {
  const res = await fetch(`${api}/v1/runtimes/${runtimeId}/processes/${pid}/output?${query}`, { headers: { authorization: `Bearer ${h.admin}`, accept: 'text/event-stream' } });
  assert.equal(res.status, 200);
  const all: Sse[] = [];
  for await (const e of sseEvents(res)) all.push(e);
  return all;
}

function channels(events: Sse[]): { stdout: Buffer; stderr: Buffer } {
  const pick = (c: string) => Buffer.concat(events.filter((e) => e.event === c).map(eventBytes));
  return { stdout: pick('stdout'), stderr: pick('stderr') };
}

/** Each output event's id is the two channels' delivered lengths so far, counted from `base`. */
function assertIdsArePositions(events: Sse[], base: { stdout: number; stderr: number }, where: string): void {
  const at = { ...base };
  for (const e of events.filter((x) => OUTPUT_EVENTS.has(x.event))) {
    const channel = e.event as 'stdout' | 'stderr';
    assert.equal(e.data.offset, at[channel], `${where}: ${channel} event's offset`);
    at[channel] += eventBytes(e).length;
    assert.equal(e.id, `${at.stdout},${at.stderr}`, `${where}: the id after a ${channel} event of ${eventBytes(e).length} bytes`);
  }
}

/** Drops after each output event in turn and resumes from its id: the union is exact every time. */
async function assertEveryResumeExact(pid: number, query: string): Promise<number> {
  const whole = await read(pid, query);
  const expected = channels(whole);
  assertIdsArePositions(whole, { stdout: 0, stderr: 0 }, 'the whole read');
  const outputs = whole.filter((e) => OUTPUT_EVENTS.has(e.event));
  for (let k = 0; k < outputs.length; k++) {
    const seen = channels(outputs.slice(0, k + 1));
    const since = outputs[k]!.id!;
    const rest = await read(pid, `${query}&since=${since}`);
    const [stdout, stderr] = since.split(',').map(Number) as [number, number];
    assertIdsArePositions(rest, { stdout, stderr }, `resumed at ${since}`);
    const more = channels(rest);
    assert.ok(Buffer.concat([seen.stdout, more.stdout]).equals(expected.stdout), `stdout resumed after event ${k} (${since}) has no gap and no repeat`);
    assert.ok(Buffer.concat([seen.stderr, more.stderr]).equals(expected.stderr), `stderr resumed after event ${k} (${since}) has no gap and no repeat`);
  }
  return outputs.length;
}

test("the issue's reproduction: 150 lines on stdout, one on stderr every 50; resuming from the first event's id loses no stderr", { skip }, async () => {
  const pid = await startProcess(REPRODUCTION);
  await waitExited(pid);
  const first = await read(pid, 'follow=false');
  const firstOutput = first.find((e) => OUTPUT_EVENTS.has(e.event))!;
  const rest = await read(pid, `follow=false&since=${firstOutput.id}`);
  const got = channels([firstOutput, ...rest]);
  const want = channels(first);
  assert.equal(want.stderr.toString(), 'err 50\nerr 100\nerr 150\n');
  assert.ok(got.stdout.equals(want.stdout));
  assert.equal(got.stderr.toString(), want.stderr.toString());
});

test("a reader's start is where its first byte is, however far the agent's frames ran ahead of it", { skip }, async () => {
  const pid = await startProcess(REPRODUCTION);
  await waitExited(pid);
  for (const from of ['oldest', { stdout: 700, stderr: 7 }] as const) {
    const stream = await h.driver.guest(runtimeId).attachProcess(pid, { from, follow: false, input: false });
    // Unread frames pile up in the stream meanwhile; what the reader took is still nothing.
    await new Promise((resolve) => setTimeout(resolve, 100));
    assert.deepEqual(stream.start, from === 'oldest' ? { stdout: 0, stderr: 0 } : from);
    stream.detach();
  }
});

test('a long mixed stream, read after the fact and live: a drop after any event resumes exactly', { skip }, async () => {
  // Both channels interleaved, in writes of different sizes, with bytes that are not UTF-8 too.
  const pid = await startProcess(
    'i=0; while [ $i -lt 60 ]; do head -c $((i * 997 % 5000 + 1)) /dev/zero | tr "\\0" o; printf "\\377e%d\\n" $i >&2; [ $((i % 7)) -eq 0 ] && head -c 70000 /dev/zero | tr "\\0" x >&2; i=$((i+1)); done',
  );
  await waitExited(pid);
  const afterTheFact = await assertEveryResumeExact(pid, 'follow=false');
  const toTheExit = await assertEveryResumeExact(pid, 'follow=true');
  assert.ok(afterTheFact >= 2 && toTheExit >= 2, `both channels give events (${afterTheFact}, ${toTheExit})`);
});

test('resuming with only a stdout offset, or from the end, never claims bytes it did not send', { skip }, async () => {
  const pid = await startProcess('echo out; echo err >&2');
  await waitExited(pid);
  const onlyStdout = await read(pid, 'follow=false&since=4');
  assert.deepEqual(channels(onlyStdout).stderr.toString(), 'err\n');
  assertIdsArePositions(onlyStdout, { stdout: 4, stderr: 0 }, 'since=4');
  const end = onlyStdout.find((e) => e.event === 'end');
  assert.deepEqual(end?.data, { next: '4,4' });
  const atEnd = await read(pid, 'follow=false&since=4,4');
  assert.equal(atEnd.filter((e) => OUTPUT_EVENTS.has(e.event)).length, 0);
  assert.deepEqual(atEnd.find((e) => e.event === 'end')?.data, { next: '4,4' });
});

/** An HTTP proxy to the API that cuts the first output stream right after its `cutAfter`-th output event. */
async function cuttingProxy(cutAfter: number): Promise<{ url: string; server: Server; cuts: number }> {
  const state = { url: '', server: undefined as unknown as Server, cuts: 0 };
  const target = new URL(api);
  state.server = createServer((req, res) => {
    const up = httpRequest({ host: target.hostname, port: target.port, method: req.method, path: req.url, headers: req.headers }, (answer) => {
      res.writeHead(answer.statusCode ?? 502, answer.headers);
      const cut = state.cuts === 0 && (req.url ?? '').includes('/output');
      let seen = 0;
      let text = '';
      answer.on('data', (chunk: Buffer) => {
        if (!cut) return void res.write(chunk);
        // Events are forwarded whole, one at a time, so the cut falls exactly after an event.
        text += chunk.toString('latin1');
        for (let end = text.indexOf('\n\n'); end >= 0; end = text.indexOf('\n\n')) {
          const block = text.slice(0, end + 2);
          text = text.slice(end + 2);
          res.write(Buffer.from(block, 'latin1'));
          if (/^event: std(out|err)$/m.test(block) && ++seen === cutAfter) {
            state.cuts++;
            answer.destroy();
            res.socket?.destroy();
            return;
          }
        }
      });
      answer.on('end', () => res.end());
    });
    up.on('error', () => res.destroy());
    req.pipe(up);
  });
  await new Promise<void>((resolve) => state.server.listen(0, '127.0.0.1', resolve));
  state.url = `http://127.0.0.1:${(state.server.address() as AddressInfo).port}`;
  return state;
}


test("the SDK's reconnect after a cut at any event gives every byte of both channels once", { skip }, async () => {
  for (const command of [REPRODUCTION, `${REPRODUCTION}; head -c 200000 /dev/zero | tr "\\0" z >&2; echo tail`]) {
    const pid = await startProcess(command);
    await waitExited(pid);
    const whole = await read(pid, 'follow=false');
    const expected = channels(whole);
    const events = whole.filter((e) => OUTPUT_EVENTS.has(e.event)).length;
    for (let cutAfter = 1; cutAfter < events; cutAfter++) {
      const proxy = await cuttingProxy(cutAfter);
      try {
        const vessel = new Vessel({ url: proxy.url, token: h.admin, retry: { maxRetries: 3, baseDelayMs: 1 } });
        const rt = await vessel.runtimes.get(runtimeId);
        const got = { stdout: [] as Buffer[], stderr: [] as Buffer[] };
        const stream = await rt.processes.output(pid, { follow: false });
        for await (const e of stream) if (e.type === 'stdout' || e.type === 'stderr') got[e.type].push(Buffer.from(e.chunk.bytes));
        assert.equal(proxy.cuts, 1, 'the first stream was cut');
        assert.ok(Buffer.concat(got.stdout).equals(expected.stdout), `stdout after a cut at event ${cutAfter}`);
        assert.ok(Buffer.concat(got.stderr).equals(expected.stderr), `stderr after a cut at event ${cutAfter}`);
      } finally {
        proxy.server.closeAllConnections();
        await new Promise((resolve) => proxy.server.close(resolve));
      }
    }
  }
});
