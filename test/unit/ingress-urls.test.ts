/** The ingress URLs a Runtime shows: the configured domain and port, and a host the ingress listener routes back to the runtime. */
import { test } from 'node:test';
import assert from 'node:assert/strict';
import { ingressUrl } from '../../src/core/ingress-urls.js';
import { parseIngressHost } from '../../src/net/ingress.js';

const id = '4b1c2e9a-0000-4000-8000-000000000000';

test('<protocol>://<port>-<id>.<domain>, the port shown unless it is the scheme default', () => {
  assert.equal(ingressUrl({ protocol: 'http', runtime_port: 8000 }, id, { domain: 'localhost', port: 8081 }), `http://8000-${id}.localhost:8081/`);
  assert.equal(ingressUrl({ protocol: 'https', runtime_port: 8443 }, id, { domain: 'vessel.example', port: 443 }), `https://8443-${id}.vessel.example/`);
  assert.equal(ingressUrl({ protocol: 'http', runtime_port: 3000 }, id, { domain: 'vessel.example', port: 80 }), `http://3000-${id}.vessel.example/`);
  assert.equal(ingressUrl({ protocol: 'https', runtime_port: 8443 }, id, { domain: 'vessel.example', port: 80 }), `https://8443-${id}.vessel.example:80/`);
});

test('every URL names a host that the ingress listener routes to the same runtime and port', () => {
  for (const [spec, address] of [
    [{ protocol: 'http', runtime_port: 1 }, { domain: 'Sandbox.Example', port: 8081 }],
    [{ protocol: 'https', runtime_port: 65535 }, { domain: 'a.b.c.example', port: 443 }],
  ] as const) {
    const url = new URL(ingressUrl(spec, id, address));
    assert.equal(url.protocol, `${spec.protocol}:`);
    assert.deepEqual(parseIngressHost(url.host, address.domain), { port: spec.runtime_port, runtimeId: id });
  }
});
