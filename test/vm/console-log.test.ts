/**
 * A real runtime's console log: the guest kernel's boot messages, what the guest writes to its
 * serial port afterwards (bytes of its choosing), the bound, and the log after a stop.
 */
import { test, before, after } from 'node:test';
import assert from 'node:assert/strict';
import { Service } from '../support/service.js';

const svc = new Service();
const TIMEOUT = { timeout: 300_000 };

before(async () => {
  await svc.start();
  const r = await svc.call('POST', '/v1/runtimes', { display_name: 'serial' });
  assert.equal(r.status, 201, JSON.stringify(r.body));
}, { timeout: 900_000 });
after(() => svc.destroy());

const consoleLog = async (query = '') => {
  const r = await svc.call('GET', `/v1/runtimes/serial/console-log${query}`);
  assert.equal(r.status, 200, JSON.stringify(r.body));
  return r.body.data as { output: string; bytes: number; truncated: boolean };
};

test("a booted runtime's log holds the kernel's banner", TIMEOUT, async () => {
  const log = await consoleLog('?max_bytes=1048576');
  assert.match(log.output, /Linux version \d+\.\d+/);
  assert.ok(log.bytes > 0 && log.bytes <= 1048576);
});

test('what the guest writes to its serial port comes back, invalid bytes as U+FFFD, within the bound', TIMEOUT, async () => {
  const marker = `marker-${Date.now()}`;
  const r = await svc.call('POST', '/v1/runtimes/serial/exec', { command: `printf '${marker}\\377\\376 end\\n' > /dev/ttyS0` });
  assert.equal(r.status, 200, JSON.stringify(r.body));
  assert.equal(r.body.data.exit_code, 0, r.body.data.stderr);
  // The guest's tty hands the bytes to the UART at its own pace: wait until they reach the log.
  let log = await consoleLog();
  const written = new RegExp(`${marker}[^]* end`);
  while (!written.test(log.output)) log = await consoleLog();
  assert.ok(log.output.includes(`${marker}\ufffd\ufffd end`), JSON.stringify(log.output.slice(-200)));
  const small = await consoleLog('?max_bytes=64');
  assert.ok(small.bytes <= 64 && small.bytes > 0);
  assert.ok(Buffer.byteLength(small.output) <= 64 + 2 * 2, 'two U+FFFD take 3 bytes each for the 1 they stand for');
  assert.equal(small.truncated, true);
});

test('the log stays readable after the runtime is stopped', TIMEOUT, async () => {
  assert.equal((await svc.call('POST', '/v1/runtimes/serial/stop')).status, 200);
  const log = await consoleLog('?max_bytes=1048576');
  assert.match(log.output, /Linux version/);
});
