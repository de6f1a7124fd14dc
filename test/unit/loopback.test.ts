import { test } from 'node:test';
import assert from 'node:assert/strict';
import { isLoopbackHost } from '../../src/api/loopback.js';

test('loopback listen addresses, in every spelling; anything else is reachable from elsewhere', () => {
  for (const host of ['127.0.0.1', '127.255.0.9', '::1', '[::1]', '0:0:0:0:0:0:0:1', '::ffff:127.0.0.1', 'localhost', 'LocalHost']) {
    assert.equal(isLoopbackHost(host), true, host);
  }
  for (const host of ['0.0.0.0', '::', '[::]', '10.0.0.1', '::ffff:10.0.0.1', '128.0.0.1', 'localhost.example.com', 'vessel', '']) {
    assert.equal(isLoopbackHost(host), false, host);
  }
});
