import { test } from 'node:test';
import assert from 'node:assert/strict';
import { canonicalRequestPath, normalizePathPattern, pathMatches } from '../../src/core/path-glob.js';

test('* stays within a segment, ** crosses them', () => {
  assert.ok(pathMatches('/v1/*', '/v1/users'));
  assert.ok(!pathMatches('/v1/*', '/v1/users/1'));
  assert.ok(pathMatches('/v1/**', '/v1/users/1'));
  assert.ok(pathMatches('/**', '/'));
  assert.ok(pathMatches('/a/*/c', '/a/b/c'));
  assert.ok(!pathMatches('/a/*/c', '/a/b/x/c'));
  assert.ok(pathMatches('/v1.0/x', '/v1.0/x'));
  assert.ok(!pathMatches('/v1.0/x', '/v1a0/x'), 'dots are literal');
});

test('the query is ignored and dot segments cannot escape a pattern', () => {
  assert.ok(pathMatches('/api/*', '/api/x?key=1'));
  assert.ok(!pathMatches('/api/**', '/api/../admin'));
  assert.ok(!pathMatches('/api/**', '/api/%2e%2e/admin'));
  assert.ok(pathMatches('/admin', '/api/%2e%2e/admin'));
  assert.equal(canonicalRequestPath('/../x'), null);
  assert.equal(canonicalRequestPath('/a/./b'), '/a/b');
  assert.equal(canonicalRequestPath('/%zz'), null);
});

test('pattern validation', () => {
  assert.equal(normalizePathPattern(null), '/**');
  assert.equal(normalizePathPattern(undefined), '/**');
  assert.throws(() => normalizePathPattern('relative'));
  assert.throws(() => normalizePathPattern('/a/../b'));
  assert.throws(() => normalizePathPattern('/a?b'));
});
