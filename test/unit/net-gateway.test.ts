/** Gateway logic without a network: DNS answers and pinning, egress decisions, the secret cache, the CA, DNS-over-TCP caps. */
import { test } from 'node:test';
import assert from 'node:assert/strict';
import { mkdtempSync, writeFileSync } from 'node:fs';
import { tmpdir } from 'node:os';
import { join } from 'node:path';
import { createSocket } from 'node:dgram';
import { connect } from 'node:net';
import * as dns from 'dns-packet';
import { DialPolicy } from '../../src/net/blocked-ranges.js';
import { CertificateAuthority } from '../../src/net/certificate-authority.js';
import { DnsResponder, MAX_TCP_CONNECTIONS_PER_SOURCE } from '../../src/net/dns-responder.js';
import { EgressDecisions } from '../../src/net/egress-decisions.js';
import { NameResolver } from '../../src/net/resolver.js';
import { RuntimeNet, RuntimeRegistry, StandInAddresses } from '../../src/net/runtime-registry.js';
import { SecretCache } from '../../src/net/secret-cache.js';
import { freePort } from '../support/service.js';

function setup(allowed: string[], enabled = true) {
  const overrides = join(mkdtempSync(join(tmpdir(), 'vessel-dns-')), 'overrides');
  writeFileSync(overrides, 'api.test 93.184.216.34\nlocal.test 127.0.0.1\nprivate.test 10.1.2.3\n');
  const decisions = new EgressDecisions(new NameResolver(overrides), new DialPolicy(['127.0.0.0/8']));
  const registry = new RuntimeRegistry();
  const net = new RuntimeNet({ runtimeId: 'rt', tenantId: 't', policy: { enabled, allowed_hosts: allowed }, rules: [] }, 'vsl1', '10.222.0.1');
  registry.add(net);
  const responder = new DnsResponder({ registry, decisions, standIns: new StandInAddresses(), activity: () => undefined, log: { warn: () => undefined } });
  const ask = async (name: string, type: 'A' | 'AAAA' = 'A', from = '10.222.0.1') => {
    const reply = await responder.answer(dns.encode({ type: 'query', id: 7, flags: dns.RECURSION_DESIRED, questions: [{ type, name }] }), from);
    return reply === null ? null : (dns.decode(reply) as dns.DecodedPacket & { rcode: string });
  };
  return { net, ask, decisions, close: () => net.close() };
}

test('DNS: allowed names resolve and are pinned; others are NXDOMAIN; strangers are refused', async () => {
  const { net, ask, close } = setup(['api.test', 'local.test']);
  const ok = await ask('API.test.');
  assert.equal(ok?.rcode, 'NOERROR');
  assert.equal(ok?.id, 7);
  assert.deepEqual(ok?.answers?.map((a) => (a as dns.StringAnswer).data), ['93.184.216.34']);
  assert.equal(net.pinned('93.184.216.34')?.host, 'api.test');
  assert.equal((await ask('other.test'))?.rcode, 'NXDOMAIN');
  assert.equal((await ask('api.test', 'AAAA'))?.answers?.length, 0, 'IPv4 only');
  assert.equal((await ask('api.test', 'A', '10.222.0.99'))?.rcode, 'REFUSED');
  // A loopback answer is shown as a stand-in the guest can route, pinned to the real address.
  const local = await ask('local.test');
  const shown = (local?.answers?.[0] as dns.StringAnswer | undefined)?.data as string;
  assert.match(shown, /^198\.(18|19)\./);
  assert.equal(net.pinned(shown)?.host, 'local.test');
  assert.equal(net.pinned(shown)?.realIp, '127.0.0.1');
  close();
});

test('DNS: a private answer not in the allowed ranges is withheld', async () => {
  const { ask, close } = setup(['private.test']);
  const r = await ask('private.test');
  assert.equal(r?.rcode, 'NOERROR');
  assert.equal(r?.answers?.length, 0);
  close();
});

test('decisions: the gateway dials its own answer, never the guest choice; raw TCP needs a pin', async () => {
  const { net, ask, decisions, close } = setup(['api.test']);
  assert.deepEqual(await decisions.target(net, 'api.test', '6.6.6.6'), { ok: true, ip: '93.184.216.34' });
  assert.deepEqual(await decisions.target(net, 'evil.test', '6.6.6.6'), { ok: false, reason: 'host_not_allowed' });
  assert.equal(decisions.pinnedTarget(net, '93.184.216.34').ok, false, 'not pinned before a DNS answer');
  await ask('api.test');
  assert.deepEqual(decisions.pinnedTarget(net, '93.184.216.34'), { ok: true, ip: '93.184.216.34', host: 'api.test' });
  net.subject = { ...net.subject, policy: { enabled: true, allowed_hosts: [] } };
  assert.equal(decisions.pinnedTarget(net, '93.184.216.34').ok, false, 'a pin is only as good as the current policy');
  close();
});

test('secret cache: cache_ttl_secs 0 reads every time, a TTL keeps the value that long', async () => {
  let reads = 0;
  const ttl = new Map([['s0', 0], ['s60', 60]]);
  const cache = new SecretCache(async (_tenant, id) => {
    reads++;
    return { value: `v-${id}`, cacheTtlSecs: ttl.get(id)! };
  });
  assert.equal(await cache.get('t', 's0'), 'v-s0');
  assert.equal(await cache.get('t', 's0'), 'v-s0');
  assert.equal(reads, 2);
  await cache.get('t', 's60');
  await cache.get('t', 's60');
  assert.equal(reads, 3);
  cache.clear();
  await cache.get('t', 's60');
  assert.equal(reads, 4);
});

test('CA: concurrent first handshakes get leaves that match their key; a name a certificate cannot hold is refused', async () => {
  const ca = await CertificateAuthority.loadOrCreate(mkdtempSync(join(tmpdir(), 'vessel-ca-')));
  const contexts = await Promise.all(Array.from({ length: 20 }, (_, i) => ca.contextFor(`host-${i}.test`)));
  assert.equal(contexts.length, 20);
  assert.equal(await ca.contextFor('host-1.test'), contexts[1], 'cached');
  for (const bad of ['1-a,cn=x.localhost', 'a b.test', 'UPPER.test', '127.0.0.1', '']) await assert.rejects(ca.contextFor(bad), bad);
});

test('DNS over TCP: one source holds a bounded number of connections', async () => {
  const responder = new DnsResponder({ registry: new RuntimeRegistry(), decisions: new EgressDecisions(new NameResolver(undefined), new DialPolicy()), standIns: new StandInAddresses(), activity: () => undefined, log: { warn: () => undefined } });
  const port = await freeUdpTcpPort();
  await responder.listen('127.0.0.1', port);
  let closed = 0;
  const sockets = Array.from({ length: MAX_TCP_CONNECTIONS_PER_SOURCE + 3 }, () => {
    const s = connect({ host: '127.0.0.1', port, localAddress: '127.0.1.1' });
    s.on('error', () => undefined);
    s.on('close', () => closed++);
    return s;
  });
  const deadline = Date.now() + 3000;
  while (closed < 3 && Date.now() < deadline) await new Promise((r) => setTimeout(r, 20));
  await new Promise((r) => setTimeout(r, 200));
  assert.equal(closed, 3, 'the connections over the cap are closed, the others stay');
  for (const s of sockets) s.destroy();
  responder.close();
});

/** A port free for both UDP and TCP on loopback. */
async function freeUdpTcpPort(): Promise<number> {
  for (;;) {
    const port = await freePort();
    const udp = createSocket('udp4');
    const ok = await new Promise<boolean>((r) => {
      udp.once('error', () => r(false));
      udp.bind(port, '127.0.0.1', () => r(true));
    });
    udp.close();
    if (ok) return port;
  }
}
