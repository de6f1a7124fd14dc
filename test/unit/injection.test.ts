import { test } from 'node:test';
import assert from 'node:assert/strict';
import { checkInjectionConfig, headerValue, paramValue, renderTemplate } from '../../src/core/injection.js';
import { SecretBox } from '../../src/core/secret-box.js';
import { randomBytes } from 'node:crypto';

test('templates replace both tokens, every occurrence', () => {
  assert.equal(renderTemplate('Bearer ${credential}', 's'), 'Bearer s');
  assert.equal(renderTemplate('{value}:{value}', 's'), 's:s');
  assert.equal(renderTemplate('$&{value}', 'x$&y'), '$&x$&y', 'no replacement patterns leak from the secret');
});

test('header value: valueFormat, else value, else raw secret', () => {
  assert.equal(headerValue({ headerName: 'A', valueFormat: 'T ${credential}', value: 'V {value}' }, 's'), 'T s');
  assert.equal(headerValue({ headerName: 'A', value: 'V {value}' }, 's'), 'V s');
  assert.equal(headerValue({ headerName: 'A' }, 's'), 's');
});

test('param value: only with paramName; paramFormat, else value, else raw', () => {
  assert.equal(paramValue({ headerName: 'A' }, 's'), null);
  assert.equal(paramValue({ headerName: 'A', paramName: 'k', paramFormat: 'p{value}', value: 'v' }, 's'), 'ps');
  assert.equal(paramValue({ headerName: 'A', paramName: 'k', value: 'v{value}' }, 's'), 'vs');
  assert.equal(paramValue({ headerName: 'A', paramName: 'k' }, 's'), 's');
});

test('header names must be tokens and not framing headers', () => {
  for (const bad of ['Host', 'content-length', 'Transfer-Encoding', 'Connection', 'a b', 'x:y', 'é']) {
    assert.throws(() => checkInjectionConfig({ headerName: bad }), bad);
  }
  assert.doesNotThrow(() => checkInjectionConfig({ headerName: 'X-Api-Key' }));
  assert.throws(() => checkInjectionConfig({ headerName: 'A', valueFormat: 'a\r\nb' }));
});

test('secret box round trip, bound to its id', () => {
  const box = new SecretBox(randomBytes(32));
  const sealed = box.seal('hunter2', 'id-1');
  assert.ok(!sealed.includes('hunter2'));
  assert.equal(box.open(sealed, 'id-1'), 'hunter2');
  assert.throws(() => box.open(sealed, 'id-2'));
  assert.throws(() => new SecretBox(randomBytes(32)).open(sealed, 'id-1'));
});
