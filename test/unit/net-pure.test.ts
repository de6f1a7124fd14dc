/** The pure parts of the gateway: first-bytes sniffing, dial ranges, addressing, the rule set, overrides. */
import { test } from 'node:test';
import assert from 'node:assert/strict';
import { createServer } from 'node:net';
import { connect as tlsConnect } from 'node:tls';
import fc from 'fast-check';
import { GUEST_NETWORK } from '../../src/core/ports.js';
import { identityAddress, slotOfTap, tapName } from '../../src/net/addressing.js';
import { DialPolicy, parseCidrList } from '../../src/net/blocked-ranges.js';
import { renderRuleset } from '../../src/net/nftables.js';
import { parseOverrides } from '../../src/net/resolver.js';
import { sniff } from '../../src/net/traffic-sniff.js';

/** The ClientHello Node's TLS client really sends for `servername`. */
async function clientHello(servername?: string): Promise<Buffer> {
  return new Promise((resolve, reject) => {
    const server = createServer((s) => {
      s.once('data', (d) => {
        resolve(d);
        s.destroy();
        server.close();
      });
    });
    server.listen(0, '127.0.0.1', () => {
      const port = (server.address() as { port: number }).port;
      const c = tlsConnect({ host: '127.0.0.1', port, ...(servername ? { servername } : {}) });
      c.on('error', () => undefined);
    });
    server.on('error', reject);
  });
}

test('sniff: a real ClientHello yields its SNI, whole or not at all', async () => {
  const hello = await clientHello('api.example.com');
  assert.deepEqual(sniff(hello), { kind: 'tls', sni: 'api.example.com' });
  assert.deepEqual(sniff(hello.subarray(0, hello.length - 1)), { kind: 'incomplete' });
  assert.deepEqual(sniff(hello.subarray(0, 3)), { kind: 'incomplete' });
  assert.deepEqual(sniff(await clientHello()), { kind: 'tls', sni: null });
});

test('sniff: HTTP request lines, partial ones, and everything else', () => {
  assert.deepEqual(sniff(Buffer.from('GET / HTTP/1.1\r\nHost: x\r\n')), { kind: 'http' });
  assert.deepEqual(sniff(Buffer.from('POST /a?b HTTP/1.0\n')), { kind: 'http' });
  assert.deepEqual(sniff(Buffer.from('GE')), { kind: 'incomplete' });
  assert.deepEqual(sniff(Buffer.from('GET /very/long')), { kind: 'incomplete' });
  assert.deepEqual(sniff(Buffer.from('SSH-2.0-OpenSSH_9.2\r\n')), { kind: 'other' });
  assert.deepEqual(sniff(Buffer.from('get / HTTP/1.1\r\n')), { kind: 'other' });
  assert.deepEqual(sniff(Buffer.from([0x16, 0x02, 0, 0, 1])), { kind: 'other' });
});

test('sniff never throws on arbitrary bytes', () => {
  fc.assert(
    fc.property(fc.uint8Array({ maxLength: 600 }), fc.boolean(), (bytes, tls) => {
      const buf = Buffer.from(bytes);
      if (tls && buf.length > 5) {
        buf[0] = 0x16;
        buf[1] = 0x03;
        buf.writeUInt16BE(Math.min(buf.length - 5, 16384), 3);
      }
      const s = sniff(buf);
      assert.ok(['incomplete', 'tls', 'http', 'other'].includes(s.kind));
    }),
    { numRuns: 3000 },
  );
});

test('dial policy: special ranges refused in every spelling, allow-list opens chosen ones', () => {
  const p = new DialPolicy();
  for (const ip of ['127.0.0.1', '10.1.2.3', '172.16.0.1', '192.168.1.1', '169.254.169.254', '100.64.0.1', '0.0.0.0', '224.0.0.1', '::1', '::', 'fe80::1', 'fd00::1', '::ffff:127.0.0.1', '::ffff:7f00:1', '64:ff9b::a9fe:a9fe', 'not-an-ip']) {
    assert.equal(p.mayDial(ip), false, ip);
  }
  for (const ip of ['93.184.216.34', '1.1.1.1', '2606:4700::1111', '::ffff:1.1.1.1']) assert.equal(p.mayDial(ip), true, ip);
  const open = new DialPolicy(['127.0.0.0/8']);
  assert.equal(open.mayDial('127.0.0.1'), true);
  assert.equal(open.mayDial('::ffff:127.0.0.1'), true);
  assert.equal(open.mayDial('169.254.169.254'), false);
  const wide = new DialPolicy(['10.0.0.0/8']);
  assert.equal(wide.mayDial('10.1.1.1'), true);
  assert.equal(wide.mayDial('10.127.0.1'), false, 'the gateway address, whatever the allow list');
  assert.equal(wide.mayDial('10.222.0.5'), false, 'another runtime, whatever the allow list');
  assert.throws(() => parseCidrList('10.0.0.0/33'));
  assert.deepEqual(parseCidrList(' 127.0.0.0/8, 10.0.0.0/8 '), ['127.0.0.0/8', '10.0.0.0/8']);
});

test('addressing: TAP names and identity addresses round-trip per slot', () => {
  assert.equal(tapName(1), 'vsl1');
  assert.equal(slotOfTap('vsl258'), 258);
  assert.equal(slotOfTap('vslx'), null);
  assert.equal(slotOfTap('vsl0'), null);
  assert.equal(identityAddress(1), '10.222.0.1');
  assert.equal(identityAddress(258), '10.222.1.2');
});

test('rule set: one table, replaced atomically, keyed on our TAPs only', () => {
  const text = renderRuleset({ table: 'vessel', proxyPort: 15001, dnsPort: 15053, attachments: [{ tap: 'vsl1', identity: '10.222.0.1' }, { tap: 'vsl2', identity: '10.222.0.2' }] });
  const lines = text.split('\n');
  assert.deepEqual(lines.slice(0, 3), ['table inet vessel {}', 'delete table inet vessel', 'table inet vessel {']);
  assert.match(text, /set taps \{ type ifname; elements = \{ "vsl1", "vsl2" \} \}/);
  assert.match(text, /"vsl2" : 10\.222\.0\.2/);
  assert.match(text, new RegExp(`ip saddr != ${GUEST_NETWORK.address.replace(/\./g, '\\.')} drop`));
  assert.match(text, /redirect to :15001/);
  assert.match(text, /iifname @taps drop/);
  const empty = renderRuleset({ table: 'vessel', proxyPort: 1, dnsPort: 2, attachments: [] });
  assert.match(empty, /set taps \{ type ifname; \}/);
});

test('DNS overrides: names normalized, IPv4 only, comments ignored', () => {
  const m = parseOverrides('API.Test. 127.0.0.1\n# comment\nbad..name 1.2.3.4\nv6.test ::1\napi.test 127.0.0.2 # second\n');
  assert.deepEqual([...m.entries()], [['api.test', ['127.0.0.1', '127.0.0.2']]]);
});

