import { test } from 'node:test';
import assert from 'node:assert/strict';
import { hostAllowed, hostMatches, normalizeHostName, normalizeHostPattern } from '../../src/core/host-pattern.js';

test('normalization: lowercase, trailing dot, IDNA', () => {
  assert.equal(normalizeHostName('API.Example.COM.'), 'api.example.com');
  assert.equal(normalizeHostName('bücher.de'), 'xn--bcher-kva.de');
  assert.equal(normalizeHostName('a..b'), null);
  assert.equal(normalizeHostName('-a.com'), null);
  assert.equal(normalizeHostName(''), null);
});

test('IP literals and numeric disguises are not names', () => {
  for (const ip of ['127.0.0.1', '::1', '169.254.169.254', '2130706433', '0x7f000001', '0x7f.0.0.1', '127.1']) {
    assert.equal(normalizeHostName(ip), null, ip);
  }
});

test('patterns: exact, wildcard at any depth but never the apex, star', () => {
  assert.equal(normalizeHostPattern('*.Example.com'), '*.example.com');
  assert.equal(normalizeHostPattern('*'), '*');
  assert.throws(() => normalizeHostPattern('a*.com'));
  assert.throws(() => normalizeHostPattern('*.'));
  assert.throws(() => normalizeHostPattern('exa mple.com'));
  assert.ok(hostMatches('*.example.com', 'a.example.com'));
  assert.ok(hostMatches('*.example.com', 'a.b.c.example.com'));
  assert.ok(!hostMatches('*.example.com', 'example.com'));
  assert.ok(!hostMatches('*.example.com', 'badexample.com'));
  assert.ok(hostMatches('example.com', 'example.com'));
  assert.ok(!hostMatches('example.com', 'a.example.com'));
  assert.ok(hostMatches('*', 'anything.at.all'));
  assert.ok(hostAllowed(['x.com', '*.y.com'], 'z.y.com'));
  assert.ok(!hostAllowed([], 'x.com'));
});
