/** No runtime may ask for more CPUs or memory than the host has (FakeDriver: 8 CPUs, 32 GiB). */
import { test, before, after } from 'node:test';
import assert from 'node:assert/strict';
import { apiHarness, type ApiHarness } from '../support/api-harness.js';

let h: ApiHarness;
before(async () => {
  h = await apiHarness();
});
after(() => h.close());

const refused = (r: { status: number; body: any }, message: RegExp) => {
  assert.equal(r.status, 400, JSON.stringify(r.body));
  assert.equal(r.body.error.code, 'invalid_argument');
  assert.match(r.body.error.message, message);
};

test('a create asking for more vCPUs or memory than the host has is invalid_argument naming the limit', async () => {
  refused(await h.call('POST', '/v1/runtimes', { display_name: 'wide', resources: { vcpus: 64 } }), /^resources\.vcpus 64 is more than this host's 8 CPUs$/);
  refused(
    await h.call('POST', '/v1/runtimes', { display_name: 'big', resources: { limits: { memory_mib: 40_000 } } }),
    /^resources\.limits\.memory_mib 40000 is more than this host's 32768 MiB$/,
  );
  refused(await h.call('POST', '/v1/runtimes', { display_name: 'huge', resources: { vcpus: 2147483647, limits: { memory_mib: 2 ** 53 - 1 } } }), /this host's/);
  assert.equal((await h.call('GET', '/v1/runtimes/wide')).status, 404, 'nothing was made');
  const edge = await h.call('POST', '/v1/runtimes', { display_name: 'edge', resources: { vcpus: 8, limits: { memory_mib: 32_768 } } });
  assert.equal(edge.status, 201, 'the host limits themselves are allowed');
});

test('a PATCH raising the memory limit past the host is invalid_argument, running or stopped', async () => {
  await h.call('POST', '/v1/runtimes', { display_name: 'grow' });
  refused(await h.call('PATCH', '/v1/runtimes/grow', { resources: { limits: { memory_mib: 32_769 } } }), /^resources\.limits\.memory_mib 32769 is more than this host's 32768 MiB$/);
  await h.call('POST', '/v1/runtimes/grow/stop');
  refused(await h.call('PATCH', '/v1/runtimes/grow', { resources: { limits: { memory_mib: 100_000 } } }), /this host's 32768 MiB/);
  const ok = await h.call('PATCH', '/v1/runtimes/grow', { resources: { limits: { memory_mib: 2048 } } });
  assert.equal(ok.status, 200);
  assert.equal(ok.body.data.resources.limits.memory_mib, 2048);
});

test('the spec ranges stay in the schema: out-of-range values are refused before the host is asked', async () => {
  const r = await h.call('POST', '/v1/runtimes', { display_name: 'neg', resources: { vcpus: 2147483648 } });
  assert.equal(r.status, 400);
  assert.doesNotMatch(r.body.error.message, /this host/);
});
