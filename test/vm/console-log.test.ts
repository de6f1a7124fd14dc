/**
 * A real runtime's console log: what the guest writes to its serial port (bytes of its
 * choosing), the log after a stop, and the kernel's boot messages after a start, bounded.
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

const marker = `marker-${Date.now()}`;

test('a fork starts its log where its checkpoint left off: what its guest writes comes back, invalid bytes as U+FFFD, within the bound', TIMEOUT, async () => {
  // Every create forks a checkpoint: the VM resumes a captured machine rather than booting, so
  // the kernel's banner is in the checkpoint's boot, not in this log (a start, below, boots).
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

test('the log stays readable after the runtime is stopped: its power-down is the last thing in it', TIMEOUT, async () => {
  assert.equal((await svc.call('POST', '/v1/runtimes/serial/stop')).status, 200);
  const log = await consoleLog('?max_bytes=1048576');
  assert.ok(log.output.includes(marker), 'the same log as before the stop');
  assert.match(log.output, /reboot: Power down\s*$/);
});

test('a start boots the kernel: the new log holds its banner, and the bound holds', TIMEOUT, async () => {
  assert.equal((await svc.call('POST', '/v1/runtimes/serial/start')).status, 200);
  const log = await consoleLog('?max_bytes=1048576');
  assert.match(log.output, /Linux version \d+\.\d+/);
  assert.ok(!log.output.includes(marker), 'each start begins a new log');
  assert.equal(log.truncated, false);
  assert.ok(log.bytes > 100, 'the banner line alone is longer');
  const small = await consoleLog('?max_bytes=100');
  assert.ok(small.bytes <= 100 && small.bytes > 0);
  assert.equal(small.truncated, true);
  assert.ok(!small.output.includes('Linux version'), 'only the end of the log');
});
