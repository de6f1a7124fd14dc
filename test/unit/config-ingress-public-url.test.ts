/** VESSEL_INGRESS_PUBLIC_URL: where clients reach runtimes behind an operator's proxy, as ingress_urls show it (docs/api.md, "Ingress URLs"). */
import { test } from 'node:test';
import assert from 'node:assert/strict';
import { randomUUID } from 'node:crypto';
import { loadConfig } from '../../src/cli/config.js';
import { ingressUrls } from '../../src/core/ingress-urls.js';
import { parseIngressHost } from '../../src/net/ingress.js';

const id = randomUUID();
const specs = [{ protocol: 'https' as const, runtime_port: 8443 }, { protocol: 'http' as const, runtime_port: 3000 }];
const urlsWith = (env: NodeJS.ProcessEnv) => ingressUrls({ id, ingressSpecs: specs }, loadConfig(env).egress.ingress.publicAddress).map((u) => u.url);

test('unset: the listener itself, its port shown for both protocols', () => {
  assert.deepEqual(urlsWith({ VESSEL_INGRESS_DOMAIN: 'sandbox.example.com' }), [`https://8443-${id}.sandbox.example.com:8081/`, `http://3000-${id}.sandbox.example.com:8081/`]);
});

test("set: the proxy's origin for its scheme, the other protocol on its standard port, never the listener's port", () => {
  assert.deepEqual(urlsWith({ VESSEL_INGRESS_PUBLIC_URL: 'https://sandbox.example.com', VESSEL_INGRESS_DOMAIN: 'sandbox.example.com' }), [`https://8443-${id}.sandbox.example.com/`, `http://3000-${id}.sandbox.example.com/`]);
  assert.deepEqual(urlsWith({ VESSEL_INGRESS_PUBLIC_URL: 'https://Sandbox.Example.com:8443/' }), [`https://8443-${id}.sandbox.example.com:8443/`, `http://3000-${id}.sandbox.example.com/`]);
  assert.deepEqual(urlsWith({ VESSEL_INGRESS_PUBLIC_URL: 'http://sandbox.example.com:8000' }), [`https://8443-${id}.sandbox.example.com/`, `http://3000-${id}.sandbox.example.com:8000/`]);
});

test('the domain routed is the public one: taken from it when VESSEL_INGRESS_DOMAIN is unset, and every URL routes back to the runtime', () => {
  const config = loadConfig({ VESSEL_INGRESS_PUBLIC_URL: 'https://sandbox.example.com' });
  assert.equal(config.egress.ingress.domain, 'sandbox.example.com');
  assert.equal(config.egress.ingress.port, 8081, 'the listener keeps its own port');
  for (const url of urlsWith({ VESSEL_INGRESS_PUBLIC_URL: 'https://sandbox.example.com' })) {
    assert.equal(parseIngressHost(new URL(url).host, config.egress.ingress.domain)?.runtimeId, id, url);
  }
});

test('refused: another domain than VESSEL_INGRESS_DOMAIN, a path, credentials, another scheme, an IP address, no URL', () => {
  assert.throws(() => loadConfig({ VESSEL_INGRESS_PUBLIC_URL: 'https://sandbox.example.org', VESSEL_INGRESS_DOMAIN: 'sandbox.example.com' }), /must be VESSEL_INGRESS_DOMAIN/);
  for (const bad of ['https://sandbox.example.com/runtimes', 'https://sandbox.example.com/?x=1', 'https://u:p@sandbox.example.com', 'ftp://sandbox.example.com', 'https://203.0.113.7', 'https://[2001:db8::1]', 'sandbox.example.com']) {
    assert.throws(() => loadConfig({ VESSEL_INGRESS_PUBLIC_URL: bad }), /VESSEL_INGRESS_PUBLIC_URL/, bad);
  }
});
