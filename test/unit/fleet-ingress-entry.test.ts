/** The ingress entry's reading of a request head (src/cluster/ingress-entry.ts): bytes from anyone on the internet. */
import { test } from 'node:test';
import assert from 'node:assert/strict';
import { hostOfHead } from '../../src/cluster/ingress-entry.js';

const head = (lines: string[]) => Buffer.from(`${lines.join('\r\n')}\r\n\r\n`, 'latin1');

test('the one Host header of a whole head', () => {
  assert.equal(hostOfHead(head(['GET / HTTP/1.1', 'Host: 8000-x.example.test', 'Accept: */*'])), '8000-x.example.test');
  assert.equal(hostOfHead(head(['GET / HTTP/1.1', 'hOsT:   8000-x.example.test:8081  '])), '8000-x.example.test:8081');
});

test('none, two, a head not yet whole, or a Host in the body: no host', () => {
  assert.equal(hostOfHead(head(['GET / HTTP/1.1', 'Accept: */*'])), null);
  assert.equal(hostOfHead(head(['GET / HTTP/1.1', 'Host: a.example.test', 'Host: b.example.test'])), null);
  assert.equal(hostOfHead(Buffer.from('GET / HTTP/1.1\r\nHost: a.example.test\r\n')), null);
  assert.equal(hostOfHead(Buffer.from('POST / HTTP/1.1\r\nContent-Length: 20\r\n\r\nHost: a.example.test')), null);
  // The request line is not a header, whatever it holds.
  assert.equal(hostOfHead(head(['Host: a.example.test / HTTP/1.1'])), null);
  // A folded or prefixed name is not Host.
  assert.equal(hostOfHead(head(['GET / HTTP/1.1', 'X-Host: a.example.test'])), null);
});

test('a long head is read once, linearly', () => {
  const many = head(['GET / HTTP/1.1', ...Array.from({ length: 400 }, (_, i) => `X-${i}: ${'v'.repeat(30)}`), 'Host: a.example.test']);
  assert.equal(hostOfHead(many), 'a.example.test');
});
