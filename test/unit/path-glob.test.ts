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

test('path parameters are stripped the way Tomcat does, and cannot carry a path into or out of a rule', () => {
  assert.ok(!pathMatches('/v1/**', '/v1/..;/admin'), 'Tomcat serves /admin for this');
  assert.ok(!pathMatches('/v1/**', '/v1/..%3B/admin'), 'decoded %3B too');
  assert.ok(!pathMatches('/v1/**', '/v1/..;x=1/admin'));
  assert.ok(!pathMatches('/v1/**', '/admin/..;/v1/x'), 'a server keeping the ; serves a path under /admin');
  assert.ok(!pathMatches('/v1/**', '/admin/..%2Fv1/x'), 'an encoded slash that makes a dot segment is as ambiguous');
  assert.equal(canonicalRequestPath('/v1/..;/admin'), null);
  assert.ok(pathMatches('/v1/users', '/v1/users;jsessionid=abc'), 'a parameter does not take a path out of its rule');
  assert.ok(pathMatches('/v1/users/*', '/v1/users;a=b/7;c'));
  assert.ok(pathMatches('/v1/users', '/v1/users%3Bx'));
  assert.equal(canonicalRequestPath('/a%2Fb'), '/a/b');
  assert.equal(canonicalRequestPath('/a;x\\y/b'), null);
  assert.throws(() => normalizePathPattern('/v1;x/**'), 'a pattern with a parameter could never match');
});
