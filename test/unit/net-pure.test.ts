/**
 * The pure parts of the gateway: first-bytes sniffing, dial ranges and host addresses, addressing
 * and slots, the rule set, overrides, forwarded headers, redaction, query parameters, DNS framing.
 */
import { test } from 'node:test';
import assert from 'node:assert/strict';
import { EventEmitter } from 'node:events';
import { IncomingMessage, ServerResponse } from 'node:http';
import { createServer, Socket } from 'node:net';
import fc from 'fast-check';
import { GUEST_NETWORK } from '../../src/core/ports.js';
import { identityAddress, slotOfTap, tapName } from '../../src/net/addressing.js';
import { DialPolicy, parseCidrList } from '../../src/net/blocked-ranges.js';
import { LengthPrefixed } from '../../src/net/dns-responder.js';
import { endToEndHeaders, headerValues, requestFraming, responseLength, writeRelayedHead } from '../../src/net/forwarded-headers.js';
import { HostAddresses, ownAddresses, type InterfaceList } from '../../src/net/host-addresses.js';
import { decidedHost } from '../../src/net/http-forwarder.js';
import { renderRuleset } from '../../src/net/nftables.js';
import { withQueryParam } from '../../src/net/secret-injection.js';
import { REDACTED, Redactor } from '../../src/net/secret-redaction.js';
import { SlotAllocator } from '../../src/net/slots.js';
import { listenOn } from '../../src/net/listeners.js';
import { ConnectionsPerSource } from '../../src/net/source-caps.js';
import { parseOverrides } from '../../src/net/resolver.js';
import { MAX_CLIENT_HELLO, sniff } from '../../src/net/traffic-sniff.js';
import { clientHello, splitRecords } from '../support/tls-hello.js';

test('sniff: a real ClientHello yields its SNI, whole or not at all', async () => {
  const hello = await clientHello('api.example.com');
  assert.deepEqual(sniff(hello), { kind: 'tls', sni: 'api.example.com' });
  assert.deepEqual(sniff(hello.subarray(0, hello.length - 1)), { kind: 'incomplete' });
  assert.deepEqual(sniff(hello.subarray(0, 3)), { kind: 'incomplete' });
  assert.deepEqual(sniff(await clientHello()), { kind: 'tls', sni: null });
});

test('sniff: a ClientHello across records is reassembled; a name is never read from part of it', async () => {
  const name = 'allowed.example.attacker.test';
  const hello = await clientHello(name);
  const hs = hello.subarray(5);
  // The first record ends right after `allowed.example`: the first record alone said that name.
  const cut = hs.indexOf('allowed.example') + 'allowed.example'.length;
  const split = splitRecords(hello, cut);
  assert.deepEqual(sniff(split), { kind: 'tls', sni: name });
  for (let n = 5; n < split.length; n += 7) assert.deepEqual(sniff(split.subarray(0, n)), { kind: 'incomplete' }, `${n} bytes`);
  // Cut into records of one byte each, still reassembled.
  const tiny = Buffer.concat([...hs].map((b) => Buffer.from([0x16, 0x03, 0x01, 0, 1, b])));
  assert.deepEqual(sniff(tiny), { kind: 'tls', sni: name });
  // A length past its data is malformed, never clamped: the name's, the list's, the message's.
  const at = hs.indexOf(name);
  for (const [offset, delta] of [[at - 2, 10], [at - 5, 10], [1, 0]] as const) {
    const bad = Buffer.from(hello);
    if (offset === 1) bad.writeUIntBE(hs.length - 4 + 1, 5 + 1, 3); // the message claims one byte more ...
    else bad.writeUInt16BE(bad.readUInt16BE(5 + offset) + delta, 5 + offset);
    const more = offset === 1 ? Buffer.concat([bad, Buffer.from([0x16, 0x03, 0x01, 0, 1, 0])]) : bad; // ... which a next record holds
    assert.deepEqual(sniff(more), { kind: 'bad_tls' }, `offset ${offset}`);
  }
  // Another record type before the hello is whole, or a message other than ClientHello.
  assert.deepEqual(sniff(Buffer.concat([split.subarray(0, 5 + cut), Buffer.from([0x17, 0x03, 0x03, 0, 1, 0])])), { kind: 'bad_tls' });
  const notHello = Buffer.from(hello);
  notHello[5] = 0x02;
  assert.deepEqual(sniff(notHello), { kind: 'bad_tls' });
  // A hello longer than the gateway reads is refused, not waited for.
  const huge = Buffer.from(hello);
  huge.writeUIntBE(MAX_CLIENT_HELLO + 1, 6, 3);
  assert.deepEqual(sniff(huge), { kind: 'bad_tls' });
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
      assert.ok(['incomplete', 'tls', 'bad_tls', 'http', 'other'].includes(s.kind));
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
  assert.match(text, /set taps \{ type iface_index; elements = \{ "vsl1", "vsl2" \} \}/);
  assert.match(text, /"vsl2" : 10\.222\.0\.2/);
  assert.match(text, new RegExp(`ip saddr != ${GUEST_NETWORK.address.replace(/\./g, '\\.')} drop`));
  assert.match(text, /redirect to :15001/);
  assert.match(text, /iif @taps drop/);
  assert.doesNotMatch(text, /ifname/, 'TAPs are matched by index: a stale table never matches a new TAP of the same name');
  const empty = renderRuleset({ table: 'vessel', proxyPort: 1, dnsPort: 2, attachments: [] });
  assert.match(empty, /set taps \{ type iface_index; \}/);
});

test('DNS overrides: names normalized, IPv4 only, comments ignored', () => {
  const m = parseOverrides('API.Test. 127.0.0.1\n# comment\nbad..name 1.2.3.4\nv6.test ::1\napi.test 127.0.0.2 # second\n');
  assert.deepEqual([...m.entries()], [['api.test', ['127.0.0.1', '127.0.0.2']]]);
});


test('dial policy: the host\'s own addresses, Azure\'s wireserver and every IPv4-in-IPv6 form are special', () => {
  const p = new DialPolicy([], ownAddresses(() => ({
    eth0: [{ address: '93.184.216.99', family: 'IPv4', internal: false, netmask: '255.255.255.0', mac: '', cidr: null }],
    eth1: [{ address: '2606:4700::99', family: 'IPv6', internal: false, netmask: 'ffff::', mac: '', cidr: null, scopeid: 0 }],
    lo: [{ address: '127.0.0.1', family: 'IPv4', internal: true, netmask: '255.0.0.0', mac: '', cidr: null }],
  })));
  for (const ip of ['93.184.216.99', '::ffff:93.184.216.99', '2606:4700::99', '168.63.129.16', '::7f00:1', '0:0:0:0:0:ffff:7f00:1', '64:ff9b:1::a9fe:a9fe', 'fec0::1']) {
    assert.equal(p.mayDial(ip), false, ip);
  }
  assert.equal(p.mayDial('93.184.216.34'), true, 'another address in the same network');
  assert.equal(p.mayDial('1.1.1.1'), true, 'IPv4 is not caught by the IPv6 ranges');
  assert.equal(new DialPolicy(['93.184.216.99/32']).mayDial('93.184.216.99'), true, 'the allow list opens a host address too');
  p.setHostAddresses([]);
  assert.equal(p.mayDial('93.184.216.99'), true, 'addresses the host no longer has are dialable again');
});

test('host addresses: read again on refresh, and changes are reported', () => {
  let list: ReturnType<InterfaceList> = { eth0: [{ address: '203.0.113.5', family: 'IPv4', internal: false, netmask: '255.255.255.0', mac: '', cidr: null }] };
  const seen: string[][] = [];
  const host = new HostAddresses(() => list, (a) => seen.push([...a]));
  assert.deepEqual(host.current, ['203.0.113.5']);
  host.refresh();
  assert.deepEqual(seen, [], 'nothing changed');
  list = { eth0: [{ address: 'fe80::1%eth0', family: 'IPv6', internal: false, netmask: 'ffff::', mac: '', cidr: null, scopeid: 2 }] };
  host.refresh();
  assert.deepEqual(seen, [['fe80::1']]);
});

test('slots: a freed slot rests before it is handed out again', () => {
  let now = 0;
  const slots = new SlotAllocator(90_000, () => now);
  assert.equal(slots.lowestFree(new Set(['vsl2'])), 'vsl1');
  slots.release('vsl1');
  assert.equal(slots.lowestFree(new Set(['vsl2'])), 'vsl3', 'vsl1 rests');
  now = 89_999;
  assert.equal(slots.lowestFree(new Set()), 'vsl2');
  now = 90_000;
  assert.equal(slots.lowestFree(new Set()), 'vsl1', 'and comes back');
});

test('forwarded headers: hop-by-hop and Connection-named headers go, Host and framing are never copied', () => {
  const raw = ['Host', 'a', 'Connection', 'close, host, content-length, x-drop', 'X-Drop', '1', 'Keep-Alive', 't', 'Content-Length', '3', 'Transfer-Encoding', 'chunked', 'X-Keep', '2', 'x-api-key', 'guest'];
  assert.deepEqual(endToEndHeaders(raw, new Set(['x-api-key'])), ['X-Keep', '2']);
  assert.deepEqual(headerValues(['Host', 'a', 'host', 'b'], 'host'), ['a', 'b']);
  assert.deepEqual(requestFraming({ 'transfer-encoding': 'Chunked ' }), ['Transfer-Encoding', 'chunked']);
  assert.equal(requestFraming({ 'transfer-encoding': 'gzip, chunked' }), null);
  assert.deepEqual(requestFraming({ 'content-length': '12' }), ['Content-Length', '12']);
  assert.deepEqual(requestFraming({}), []);
  assert.deepEqual(responseLength({ 'content-length': '0' }), ['Content-Length', '0']);
  assert.equal(decidedHost('api.test', 443, true), 'api.test');
  assert.equal(decidedHost('api.test', 80, false), 'api.test');
  assert.equal(decidedHost('api.test', 443, false), 'api.test:443');
  assert.equal(decidedHost('api.test', 8443, true), 'api.test:8443');
});

test('redaction: every spelling of every value, in names and values, case-insensitive in escapes', () => {
  const secret = 'a/b c+d';
  const r = new Redactor([secret, `Bearer ${secret}`, '']);
  assert.equal(r.text(`x=${secret}`), 'x=vessel-redacted');
  assert.equal(r.text(`Bearer ${secret}`), 'vessel-redacted');
  assert.equal(r.text('/p?k=a%2Fb%20c%2Bd'), '/p?k=vessel-redacted');
  assert.equal(r.text('/p?k=a%2fb+c%2bd'), '/p?k=vessel-redacted');
  assert.deepEqual(r.headers([`X-${'a'}`, 'safe']), ['X-a', 'safe']);
  assert.equal(new Redactor([]).text(secret), secret);
});

test('query parameters: set as text, the guest value replaced, everything else byte for byte', () => {
  assert.equal(withQueryParam('//[/x', 'k', 'v'), '//[/x?k=v');
  assert.equal(withQueryParam('/p?a=%20&k=guest&K=other&k%3D=x', 'k', 's/ +'), '/p?a=%20&K=other&k%3D=x&k=s%2F+%2B');
  assert.equal(withQueryParam('/p?k&&b', 'k', '1'), '/p?b&k=1');
  assert.equal(withQueryParam('/p?%6B=guest', 'k', '1'), '/p?k=1', 'an encoded name is the same name');
});

test('DNS over TCP framing: linear however the bytes are cut, one message held at most', () => {
  const messages = [Buffer.alloc(65_535, 1), Buffer.alloc(0), Buffer.alloc(3, 7), Buffer.alloc(65_535, 2)];
  const stream = Buffer.concat(messages.flatMap((m) => [Buffer.from([m.length >> 8, m.length & 255]), m]));
  const whole = new LengthPrefixed().push(stream)!;
  assert.deepEqual(whole.map((m) => m.length), [65_535, 0, 3, 65_535]);
  const framer = new LengthPrefixed();
  const out: Buffer[] = [];
  const start = process.hrtime.bigint();
  for (let i = 0; i < stream.length; i++) out.push(...framer.push(stream.subarray(i, i + 1))!);
  const ms = Number(process.hrtime.bigint() - start) / 1e6;
  assert.deepEqual(out.map((m) => m.length), [65_535, 0, 3, 65_535]);
  assert.ok(out[3]!.every((b) => b === 2));
  // Joining all held bytes on every one-byte chunk copies ~4 GB here; linear work is milliseconds.
  assert.ok(ms < 1500, `${ms} ms for ${stream.length} one-byte chunks`);
});

test('DNS over TCP framing: a prefix announcing more than the bound is refused at once, unread', () => {
  const framer = new LengthPrefixed(512);
  assert.deepEqual(framer.push(Buffer.from([0, 3, 1, 2, 3])), [Buffer.from([1, 2, 3])]);
  assert.equal(framer.push(Buffer.from([2, 1])), null, '513 bytes announced: no waiting for them');
});

test('relayed response heads: what Node cannot write is refused whole, never thrown; odd reasons are replaced', () => {
  const response = () => new ServerResponse(new IncomingMessage(new Socket()));
  for (const [code, reason, headers] of [[99, 'X', []], [700, 'X', []], [undefined, '', []], [101, 'Switching', []], [200, 'OK', ['X-Bad', 'a\x01b']], [200, 'OK', ['Bad Name', 'v']]] as const) {
    const res = response();
    assert.equal(writeRelayedHead(res, code, reason, [...headers]), false, `${code} ${JSON.stringify(headers)}`);
    assert.equal(res.headersSent, false);
    assert.deepEqual(res.getHeaderNames(), [], 'nothing half set');
  }
  for (const [reason, shown] of [['O\x01K', 'OK'], ['Caf\xe9', 'OK'], ['All\tGood', 'All\tGood'], ['', '']] as const) {
    const res = response();
    assert.equal(writeRelayedHead(res, 200, reason, ['X-Ok', 'v']), true);
    assert.equal(res.statusMessage, shown);
  }
});

test('connection caps: an IPv6 client is its /64, IPv4 its address; the total is capped too', () => {
  const socket = (remoteAddress: string) => Object.assign(new EventEmitter(), { remoteAddress }) as unknown as Socket;
  const caps = new ConnectionsPerSource(2, 5);
  assert.ok(caps.admit(socket('2001:db8:1:2::1')));
  assert.ok(caps.admit(socket('2001:db8:1:2:ffff::9')));
  assert.equal(caps.admit(socket('2001:db8:1:2:aaaa:bbbb:cccc:dddd')), false, 'another address of the same /64');
  const other = socket('2001:db8:1:3::1');
  assert.ok(caps.admit(other), 'the next /64');
  assert.ok(caps.admit(socket('192.0.2.1')));
  assert.ok(caps.admit(socket('::ffff:192.0.2.1')), 'IPv4-mapped is the IPv4 address');
  assert.equal(caps.admit(socket('::ffff:192.0.2.1')), false);
  assert.equal(caps.admit(socket('198.51.100.1')), false, 'the total');
  other.emit('close');
  assert.ok(caps.admit(socket('198.51.100.1')), 'room again once one closed');
});

test('dial policy: the NAT64 prefix is refused in spellings that are not unwrapped to IPv4', () => {
  const p = new DialPolicy();
  assert.equal(p.mayDial('64:ff9b:0:0:0:0:808:808'), false, 'uncompressed 64:ff9b::8.8.8.8');
  assert.equal(p.mayDial('64:ff9b::0:808:808'), false);
  assert.equal(p.mayDial('2606:4700::1111'), true, 'a public IPv6 address is still dialable');
});

test('listeners: an error once listening (accept failing with EMFILE) is logged, and the server keeps listening', async () => {
  const logged: object[] = [];
  const server = createServer();
  await listenOn(server, '127.0.0.1', 0, { warn: (o: object) => void logged.push(o) });
  try {
    server.emit('error', Object.assign(new Error('accept EMFILE'), { code: 'EMFILE' }));
    assert.equal(server.listening, true);
    assert.deepEqual(logged, [{ err: 'accept EMFILE', code: 'EMFILE' }]);
  } finally {
    server.close();
  }
});

test('redaction: repetitive and overlapping secrets, mixed case, text that is not latin1', () => {
  const long = 'a'.repeat(65_536);
  const r = new Redactor([long, 'Key-XY']);
  assert.equal(r.text(`${'a'.repeat(16_383)}b`), `${'a'.repeat(16_383)}b`, 'a near miss is left alone');
  assert.equal(r.text(`x${'A'.repeat(65_536)}y`), `x${REDACTED}y`);
  assert.equal(r.text('key-xykey-xy;KEY-XY'), `${REDACTED}${REDACTED};${REDACTED}`);
  assert.equal(new Redactor(['ab', 'abc']).text('zabcz'), `z${REDACTED}z`, 'the longer spelling wins where they overlap');
  assert.equal(new Redactor(['key-xy']).text('İ key-xy'), REDACTED, 'text whose lowercase moves positions is redacted whole');
  assert.equal(new Redactor(['key-xy']).text('İ nothing'), 'İ nothing');
});
