/**
 * The SDK's retries: which failures are retried for which requests, the waits, Retry-After, the
 * bound, and cancelling. The service's side is scripted (test/support/scripted-service.ts).
 */
import { test, describe, after } from 'node:test';
import assert from 'node:assert/strict';
import { Readable } from 'node:stream';
import { createServer } from 'node:net';
import { Vessel, VesselError } from '../../client/index.js';
import { mayRetry, retryDelayMs, DEFAULT_RETRY_POLICY } from '../../client/retry.js';
import { envelope, scriptedService, sendJson, type ScriptedService } from '../support/scripted-service.js';

/** Waits of 0 to 1 ms, so retries are quick; the waits themselves are checked with retryDelayMs. */
const FAST = { maxRetries: 3, baseDelayMs: 1, maxDelayMs: 30_000 };
const runtime = { id: '00000000-0000-4000-8000-000000000001', display_name: 'r', status: 'running', egress_policy: { enabled: true, allowed_hosts: [] }, ingress_specs: [], resources: { limits: { memory_mib: 512 }, requests: { memory_mib: 512 }, vcpus: 1 }, created_at: '2026-01-01T00:00:00.000Z' };

const services: ScriptedService[] = [];
after(() => Promise.all(services.map((s) => s.close())));

type Answer = [status: number, body: unknown, headers?: Record<string, string>];
const ok = (data: unknown, status = 200): Answer => [status, { data }];
const fail = (status: number, code: string, headers?: Record<string, string>): Answer => [status, envelope(code), headers];
const RATE_LIMITED = fail(429, 'rate_limited', { 'retry-after': '0' });

/** A service that gives these answers in turn, the last one from then on. */
async function answering(...answers: Answer[]) {
  const svc = await scriptedService((_req, res, n) => {
    const [status, body, headers] = answers[Math.min(n, answers.length - 1)]!;
    sendJson(res, status, body, headers);
  });
  services.push(svc);
  return { svc, vessel: new Vessel({ url: svc.url, token: 'vsl_test', retry: FAST }) };
}

describe('retry decisions', () => {
  const error = (code: 'rate_limited' | 'unavailable' | 'not_found') => new VesselError(code, code, { status: 0 });
  test('rate_limited is retried for any request that can be sent again; unavailable only when idempotent', () => {
    assert.equal(mayRetry(error('rate_limited'), 'idempotent'), true);
    assert.equal(mayRetry(error('rate_limited'), 'not-idempotent'), true);
    assert.equal(mayRetry(error('rate_limited'), 'not-replayable'), false);
    assert.equal(mayRetry(error('unavailable'), 'idempotent'), true);
    assert.equal(mayRetry(error('unavailable'), 'not-idempotent'), false);
    assert.equal(mayRetry(error('unavailable'), 'not-replayable'), false);
    assert.equal(mayRetry(error('not_found'), 'idempotent'), false);
  });
  test('waits grow exponentially with full jitter, never below Retry-After, and give up past the longest wait', () => {
    const policy = { maxRetries: 5, baseDelayMs: 100, maxDelayMs: 1000 };
    assert.deepEqual([0, 1, 2, 3, 4].map((r) => retryDelayMs(r, undefined, policy, () => 0.999999)), [99, 199, 399, 799, 999]);
    assert.deepEqual([0, 1, 2].map((r) => retryDelayMs(r, undefined, policy, () => 0)), [0, 0, 0]);
    assert.equal(retryDelayMs(0, 0, policy, () => 0.5), 50);
    assert.equal(retryDelayMs(3, 1, policy, () => 0), 1000);
    assert.equal(retryDelayMs(0, 2, policy, () => 0), null);
    assert.equal(DEFAULT_RETRY_POLICY.maxRetries, 3);
  });
});

describe('retries against a scripted service', () => {
  test('a rate-limited create is retried, with the same body', async () => {
    const { svc, vessel } = await answering(RATE_LIMITED, ok(runtime, 201));
    const rt = await vessel.runtimes.create({ display_name: 'r' });
    assert.equal(rt.id, runtime.id);
    assert.equal(svc.requests.length, 2);
    assert.equal(svc.requests[1]!.body, svc.requests[0]!.body);
  });

  test('when retries run out the error carries the code, status, Retry-After and request id', async () => {
    const { svc, vessel } = await answering(RATE_LIMITED);
    const err = await vessel.runtimes.get('r').catch((e: unknown) => e);
    assert.ok(err instanceof VesselError);
    assert.equal(err.code, 'rate_limited');
    assert.equal(err.status, 429);
    assert.equal(err.retryAfterSecs, 0);
    assert.equal(err.requestId, 'req-1');
    assert.equal(svc.requests.length, 1 + FAST.maxRetries);
  });

  test('unavailable is retried for a GET and not for a POST that is not idempotent', async () => {
    const get = await answering(fail(503, 'unavailable'), fail(503, 'unavailable'), ok(runtime));
    assert.equal((await get.vessel.runtimes.get('r')).id, runtime.id);
    assert.equal(get.svc.requests.length, 3);

    const post = await answering(fail(503, 'unavailable'), ok(runtime, 201));
    await assert.rejects(post.vessel.runtimes.create({ display_name: 'r' }), (e: VesselError) => e.code === 'unavailable' && e.status === 503);
    assert.equal(post.svc.requests.length, 1);
  });

  test('mkdir -p is a POST that is retried when unavailable', async () => {
    const { svc, vessel } = await answering(ok(runtime), fail(503, 'unavailable'), ok({ path: '/a/b' }));
    const rt = await vessel.runtimes.get('r');
    await rt.files.mkdir('/a/b');
    assert.deepEqual(svc.requests.map((r) => r.method), ['GET', 'POST', 'POST']);
  });

  test('a Retry-After longer than the longest wait is not waited for', async () => {
    const { svc, vessel } = await answering(fail(503, 'unavailable', { 'retry-after': '3600' }));
    await assert.rejects(vessel.runtimes.get('r'), (e: VesselError) => e.code === 'unavailable' && e.retryAfterSecs === 3600);
    assert.equal(svc.requests.length, 1);
  });

  test('a file written from bytes is sent again after rate_limited; one written from a stream is not', async () => {
    const bytes = await answering(ok(runtime), RATE_LIMITED, ok({ path: '/f', size_bytes: 2 }));
    const written = await (await bytes.vessel.runtimes.get('r')).files.write('/f', new Uint8Array([1, 2]));
    assert.equal(written.size_bytes, 2);
    assert.deepEqual(bytes.svc.requests.map((r) => r.method), ['GET', 'PUT', 'PUT']);

    const streamed = await answering(ok(runtime), RATE_LIMITED, ok({ path: '/f', size_bytes: 2 }));
    const rt = await streamed.vessel.runtimes.get('r');
    await assert.rejects(rt.files.write('/f', Readable.from([Buffer.from('ab')])), (e: VesselError) => e.code === 'rate_limited');
    assert.deepEqual(streamed.svc.requests.map((r) => r.method), ['GET', 'PUT']);
    assert.equal(streamed.svc.requests[1]!.body, 'ab');
  });

  test('with maxRetries 0 nothing is retried', async () => {
    const { svc } = await answering(RATE_LIMITED);
    const vessel = new Vessel({ url: svc.url, token: 't', retry: { maxRetries: 0 } });
    await assert.rejects(vessel.runtimes.get('r'), (e: VesselError) => e.code === 'rate_limited');
    assert.equal(svc.requests.length, 1);
  });

  test('an answer without the envelope is still a VesselError, by its status', async () => {
    const svc = await scriptedService((_req, res) => {
      res.writeHead(502, { 'content-type': 'text/html' });
      res.end('<html>bad gateway</html>');
    });
    services.push(svc);
    const vessel = new Vessel({ url: svc.url, token: 't', retry: { maxRetries: 0 } });
    await assert.rejects(vessel.runtimes.get('r'), (e: VesselError) => e.code === 'unavailable' && e.status === 502 && /bad gateway/.test(e.message));
  });

  test('a refused connection is unavailable with status 0, retried for a GET', async () => {
    const port = await new Promise<number>((resolve) => {
      const s = createServer().listen(0, '127.0.0.1', () => {
        const p = (s.address() as { port: number }).port;
        s.close(() => resolve(p));
      });
    });
    let attempts = 0;
    const countingFetch: typeof fetch = (input, init) => {
      attempts++;
      return fetch(input, init);
    };
    const vessel = new Vessel({ url: `http://127.0.0.1:${port}`, token: 't', retry: { ...FAST, maxRetries: 2 }, fetch: countingFetch });
    await assert.rejects(vessel.runtimes.get('r'), (e: VesselError) => e.code === 'unavailable' && e.status === 0 && e.cause instanceof TypeError);
    assert.equal(attempts, 3);
  });
});

describe('cancelling', () => {
  test('a signal aborted before the call sends nothing', async () => {
    const { svc, vessel } = await answering(ok(runtime));
    await assert.rejects(vessel.runtimes.get('r', { signal: AbortSignal.abort() }), { name: 'AbortError' });
    assert.equal(svc.requests.length, 0);
  });

  test('aborting while the service has not answered rejects with the signal reason', async () => {
    const controller = new AbortController();
    const svc = await scriptedService(() => controller.abort()); // never answers
    services.push(svc);
    const vessel = new Vessel({ url: svc.url, token: 't' });
    await assert.rejects(vessel.runtimes.get('r', { signal: controller.signal }), { name: 'AbortError' });
  });

  test('aborting during the wait before a retry ends the wait', async () => {
    const controller = new AbortController();
    const svc = await scriptedService((_req, res) => {
      sendJson(res, 429, envelope('rate_limited'), { 'retry-after': '20' });
      res.on('finish', () => controller.abort());
    });
    services.push(svc);
    const vessel = new Vessel({ url: svc.url, token: 't' });
    await assert.rejects(vessel.runtimes.get('r', { signal: controller.signal }), { name: 'AbortError' });
    assert.equal(svc.requests.length, 1);
  });
});

