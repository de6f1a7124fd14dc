/** /metrics is open on a loopback listener (a local Prometheus) and needs an admin token on any other. */
import { test } from 'node:test';
import assert from 'node:assert/strict';
import { apiHarness } from '../support/api-harness.js';

const scrape = (h: Awaited<ReturnType<typeof apiHarness>>, token?: string) =>
  h.app.inject({ method: 'GET', url: '/metrics', headers: token === undefined ? {} : { authorization: `Bearer ${token}` } });

test('beyond loopback, /metrics needs a token with the admin scope', async () => {
  for (const listenHost of ['0.0.0.0', '::', '192.0.2.10', 'vessel.example.com']) {
    const h = await apiHarness({ listenHost });
    try {
      const anonymous = await scrape(h);
      assert.equal(anonymous.statusCode, 401, listenHost);
      assert.equal(JSON.parse(anonymous.body).error.code, 'unauthenticated');
      const reader = await scrape(h, await h.token('default', ['runtimes:read', 'audits:read']));
      assert.equal(reader.statusCode, 403, listenHost);
      assert.match(JSON.parse(reader.body).error.message, /'admin' scope/);
      const admin = await scrape(h, h.admin);
      assert.equal(admin.statusCode, 200, listenHost);
      assert.match(admin.body, /^vessel_http_requests_total\{method="GET",route="\/metrics",status="401"\} 1$/m);
    } finally {
      await h.close();
    }
  }
});

test('on a loopback address, /metrics stays open', async () => {
  for (const listenHost of ['127.0.0.1', '127.1.2.3', '::1', 'localhost']) {
    const h = await apiHarness({ listenHost });
    try {
      const r = await scrape(h);
      assert.equal(r.statusCode, 200, listenHost);
      assert.match(r.body, /vessel_process_cpu_seconds_total/);
    } finally {
      await h.close();
    }
  }
});
