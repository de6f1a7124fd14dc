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
import { DnsResponder, MAX_QUERY_BYTES, MAX_TCP_CONNECTIONS_PER_SOURCE } from '../../src/net/dns-responder.js';
import { EgressDecisions } from '../../src/net/egress-decisions.js';
import { NameResolver, overridesFromFile } from '../../src/net/resolver.js';
import { RuntimeNet, RuntimeRegistry, StandInAddresses } from '../../src/net/runtime-registry.js';
import { SecretCache } from '../../src/net/secret-cache.js';
import { freePort } from '../support/service.js';

function setup(allowed: string[], enabled = true) {
  const overrides = join(mkdtempSync(join(tmpdir(), 'vessel-dns-')), 'overrides');
  writeFileSync(overrides, 'api.test 93.184.216.34\nlocal.test 127.0.0.1\nprivate.test 10.1.2.3\n');
  const decisions = new EgressDecisions(new NameResolver(overridesFromFile(overrides)), new DialPolicy(['127.0.0.0/8']));
  const registry = new RuntimeRegistry();
  const net = new RuntimeNet({ runtimeId: 'rt', tenantId: 't', policy: { enabled, allowed_hosts: allowed }, rules: [] }, 'vsl1', '10.222.0.1');
  registry.add(net);
  const responder = new DnsResponder({ registry, decisions, standIns: new StandInAddresses(), activity: () => undefined, log: { warn: () => undefined } });
  const ask = async (name: string, type: 'A' | 'AAAA' = 'A', from = '10.222.0.1') => {
    const reply = await responder.answer(dns.encode({ type: 'query', id: 7, flags: dns.RECURSION_DESIRED, questions: [{ type, name }] }), from);
    return reply === null ? null : (dns.decode(reply) as dns.DecodedPacket & { rcode: string });
  };
  return { net, ask, responder, decisions, close: () => net.close() };
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
  await close();
});

test('DNS: a private answer not in the allowed ranges is withheld', async () => {
  const { ask, close } = setup(['private.test']);
  const r = await ask('private.test');
  assert.equal(r?.rcode, 'NOERROR');
  assert.equal(r?.answers?.length, 0);
  await close();
});

/**
 * A message whose names follow a chain of `links` compression pointers, each to the one before,
 * with `questions` questions that all point to the chain's top: decoding it naively costs
 * links × questions steps.
 */
function pointerChain(links: number, questions: number, qdcount = questions): Buffer {
  const header = Buffer.alloc(12);
  header.writeUInt16BE(0x1234, 0);
  header.writeUInt16BE(dns.RECURSION_DESIRED, 2);
  header.writeUInt16BE(qdcount, 4);
  const chain = Buffer.alloc(1 + 2 * links); // offset 12: the root label, then the pointers
  for (let i = 0; i < links; i++) chain.writeUInt16BE(0xc000 | (12 + (i === 0 ? 0 : 1 + 2 * (i - 1))), 1 + 2 * i);
  const top = 12 + 1 + 2 * (links - 1);
  const question = Buffer.from([0xc0 | (top >> 8), top & 255, 0, 1, 0, 1]);
  return Buffer.concat([header, chain, ...Array.from({ length: questions }, () => question)]);
}

/** Counts the two-byte reads and label decodes (the steps of following a pointer and reading a name) while `run` runs. */
async function decodeSteps<T>(run: () => Promise<T>): Promise<{ steps: number; result: T }> {
  let steps = 0;
  const readUInt16BE = Buffer.prototype.readUInt16BE;
  const toString = Buffer.prototype.toString;
  Buffer.prototype.readUInt16BE = function (this: Buffer, offset?: number) {
    steps++;
    return readUInt16BE.call(this, offset);
  };
  Buffer.prototype.toString = function (this: Buffer, ...args: unknown[]) {
    steps++;
    return (toString as (...a: unknown[]) => string).apply(this, args);
  };
  try {
    return { result: await run(), steps };
  } finally {
    Buffer.prototype.readUInt16BE = readUInt16BE;
    Buffer.prototype.toString = toString;
  }
}

test('DNS: a pointer chain with thousands of questions is dropped or refused in a few steps, never decoded', async () => {
  const { responder, ask, close } = setup(['api.test']);
  // 40 KB (a UDP datagram the kernel reassembles, or one TCP message): naive decoding is
  // 8000 × 4000 pointer steps. Over the size bound, it is dropped unread.
  const big = pointerChain(8000, 4000);
  const dropped = await decodeSteps(() => responder.answer(big, '10.222.0.1'));
  assert.ok(dropped.steps < 20, `${dropped.steps} steps for a ${big.length}-byte message`);
  assert.equal(dropped.result, null);
  // Within the bound: 5400 questions announced, or one question followed by a chain that is no record: FORMERR.
  for (const small of [pointerChain(200, 10, 5400), pointerChain(200, 1)]) {
    assert.ok(small.length <= MAX_QUERY_BYTES);
    const refused = await decodeSteps(() => responder.answer(small, '10.222.0.1'));
    const reply = dns.decode(refused.result!) as dns.DecodedPacket & { rcode: string };
    assert.equal(reply.rcode, 'FORMERR');
    assert.equal(reply.id, 0x1234);
    assert.ok(refused.steps < 20, `${refused.steps} steps for a ${small.length}-byte message`);
  }
  // Two questions, an answer record, or trailing bytes: FORMERR. A response: silence.
  const q = (extra: Partial<dns.Packet>) => dns.encode({ type: 'query', id: 9, flags: dns.RECURSION_DESIRED, questions: [{ type: 'A', name: 'api.test' }], ...extra });
  const rcode = async (m: Buffer) => (dns.decode((await responder.answer(m, '10.222.0.1'))!) as dns.DecodedPacket & { rcode: string }).rcode;
  assert.equal(await rcode(q({ questions: [{ type: 'A', name: 'api.test' }, { type: 'A', name: 'api.test' }] })), 'FORMERR');
  assert.equal(await rcode(q({ answers: [{ type: 'A', name: 'api.test', data: '1.2.3.4' }] })), 'FORMERR');
  assert.equal(await rcode(Buffer.concat([q({}), Buffer.from([0])])), 'FORMERR');
  assert.equal(await responder.answer(dns.encode({ type: 'response', id: 9, questions: [{ type: 'A', name: 'api.test' }] }), '10.222.0.1'), null);
  // A label holding a dot is not read as two labels (here: as the allowed api.test).
  assert.equal(await rcode(Buffer.concat([q({}).subarray(0, 12), Buffer.from('\x08api.test\x00\x00\x01\x00\x01', 'latin1')])), 'NXDOMAIN');
  // What stub resolvers send still works: one question, with or without an EDNS OPT record (a cookie).
  const edns = await responder.answer(q({ additionals: [{ type: 'OPT', name: '.', udpPayloadSize: 1232, flags: 0, options: [{ code: 10, data: Buffer.alloc(8, 7) }] } as unknown as dns.Answer] }), '10.222.0.1');
  const ok = dns.decode(edns!) as dns.DecodedPacket & { rcode: string };
  assert.equal(ok.rcode, 'NOERROR');
  assert.deepEqual(ok.questions, [{ type: 'A', name: 'api.test', class: 'IN' }]);
  assert.deepEqual(ok.answers?.map((a) => [a.name, a.type, (a as dns.StringAnswer).data]), [['api.test', 'A', '93.184.216.34']]);
  assert.equal((await ask('api.test'))?.rcode, 'NOERROR');
  await close();
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
  await close();
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
