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
  assert.ok(!pathMatches('/admin', '/api/%2e%2e/admin'), 'ambiguous: /admin to a decoding server, under /api to one that is not');
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

test('a fragment, a dot segment after an empty one, and an encoded dot segment match no rule', () => {
  assert.ok(!pathMatches('/v1/**', '/admin#/../v1/x'), 'Express and WSGI servers route /admin for this');
  assert.ok(!pathMatches('/x/**', '/x//../v1/y'), 'nginx merges the slashes first and serves /v1/y');
  assert.ok(!pathMatches('/v1/**', '/v1/%2e%2e/admin'), 'a server routing on the raw path does not climb');
  assert.ok(!pathMatches('/v1/**', '/admin/%2E./v1/x'), 'nor here, where a decoding server would');
  assert.equal(canonicalRequestPath('/v1//x'), '/v1//x', 'duplicate slashes alone are kept');
  assert.equal(canonicalRequestPath('/v1/a%2eb'), '/v1/a.b', 'an encoded dot inside a name is only a dot');
  assert.ok(pathMatches('/v1/**', '/v1/x/../y'), 'a plain dot segment still resolves');
});
