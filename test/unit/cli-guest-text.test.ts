/**
 * What a guest wrote never reaches the operator's terminal raw: an audit's host and reason with
 * an OSC 52 clipboard write (ESC ] 52 ; … BEL) and a line erase (ESC [2K), and a console log
 * holding both, go through `vessel audit ls`, `audit tail` and `vessel logs` (the compiled CLI
 * against the real API, fake driver) with their control characters shown in caret notation;
 * `logs --raw` and every --json keep the exact text. The printers themselves too: tables, fields,
 * error lines.
 */
import { test, before, after, describe } from 'node:test';
import assert from 'node:assert/strict';
import { randomUUID } from 'node:crypto';
import type { AddressInfo } from 'node:net';
import { apiHarness, type ApiHarness } from '../support/api-harness.js';
import { cliUser, type CliUser } from '../support/cli.js';
import type { FakeDriver } from '../support/fake-driver.js';
import { reportError } from '../../src/cli/shared/client.js';
import { UsageError } from '../../src/cli/shared/exit-codes.js';
import { formatTable } from '../../src/cli/shared/output.js';
import { visibleLine, visibleText } from '../../src/cli/shared/visible.js';

/** Writes "owned" into the terminal's clipboard, on terminals that allow it. */
const OSC52 = '\x1b]52;c;b3duZWQ=\x07';
/** Erases the line the cursor is on: what came before on it disappears. */
const ERASE_LINE = '\x1b[2K';
const OSC52_SHOWN = '^[]52;c;b3duZWQ=^G';
const ERASE_LINE_SHOWN = '^[[2K';
/** No ESC, no BEL, no other C0 control but newline, no C1 control. */
const RAW_CONTROL = /[\x00-\x09\x0b-\x1f\x7f-\x9f]/;

describe('the printers', () => {
  test('a line shows every control character; text keeps tab and newline', () => {
    assert.equal(visibleLine(`host${OSC52}\tx\ny\x7f\x9b`), `host${OSC52_SHOWN}^Ix^Jy^?<U+009B>`);
    assert.equal(visibleText(`boot${ERASE_LINE}\r\n\tok\x07\r\x9b\n`), `boot${ERASE_LINE_SHOWN}\n\tok^G^M<U+009B>\n`);
    assert.equal(visibleLine('plain text, ünïcode, 日本'), 'plain text, ünïcode, 日本');
  });

  test('tables show them in every cell, and align on what is shown', () => {
    const table = formatTable(['HOST', 'REASON'], [[`a${OSC52}`, `r${ERASE_LINE}`], ['b', 'ok']]);
    assert.doesNotMatch(table, RAW_CONTROL);
    assert.equal(table, `HOST${' '.repeat(OSC52_SHOWN.length - 3)}  REASON\na${OSC52_SHOWN}  r${ERASE_LINE_SHOWN}\nb${' '.repeat(OSC52_SHOWN.length)}  ok\n`);
  });

  test('an error line shows them; the --json envelope keeps the exact message', () => {
    let line = '';
    reportError(new UsageError(`no such file /tmp/${OSC52}`), false, { write: (s: string | Uint8Array) => ((line += String(s)), true) });
    assert.equal(line, `vessel: no such file /tmp/${OSC52_SHOWN} (usage)\n`);
    let json = '';
    reportError(new UsageError(`no such file /tmp/${OSC52}`), true, { write: (s: string | Uint8Array) => ((json += String(s)), true) });
    assert.equal(JSON.parse(json).error.message, `no such file /tmp/${OSC52}`);
  });
});

describe('the commands', () => {
  let h: ApiHarness;
  let user: CliUser;
  let runtimeId: string;
  const host = `evil.example${OSC52}`;
  const reason = `${ERASE_LINE}host_allowed`;
  const log = `Linux version 6\nboot ${OSC52}${ERASE_LINE}done\r\n`;

  before(async () => {
    h = await apiHarness();
    await h.app.listen({ port: 0, host: '127.0.0.1' });
    user = cliUser({ VESSEL_URL: `http://127.0.0.1:${(h.app.server.address() as AddressInfo).port}`, VESSEL_TOKEN: h.admin });
    runtimeId = (await h.call('POST', '/v1/runtimes', { display_name: 'guest-text' })).body.data.id;
    // Stored as a gateway that kept the guest's bytes would have stored them.
    await h.store.audits.insert([
      {
        id: randomUUID(),
        tenantId: 'default',
        runtimeId,
        category: 'egress',
        createdAt: new Date().toISOString(),
        payload: { egress: { kind: 'http_request', http_request: { action: 'deny', host, ip: null, port: 80, method: 'GET', path: `/x${ERASE_LINE}`, status: 403, reason } } },
      },
    ] as never);
    (h.driver as FakeDriver).consoleLogs.set(runtimeId, Buffer.from(log));
  });
  after(() => h.close());

  test('audit ls and tail show the control characters, --json keeps them exactly', async () => {
    for (const args of [['audit', 'ls'], ['audit', 'tail']]) {
      const r = await user.run([...args, '--runtime', 'guest-text']);
      assert.equal(r.status, 0, r.err);
      assert.doesNotMatch(r.out, RAW_CONTROL, args.join(' '));
      assert.ok(r.out.includes(`GET evil.example${OSC52_SHOWN}/x${ERASE_LINE_SHOWN} -> 403`), r.out);
      assert.ok(r.out.includes(`${ERASE_LINE_SHOWN}host_allowed`), r.out);
    }
    const [audit] = JSON.parse((await user.run(['audit', 'ls', '--runtime', 'guest-text', '--json'])).out);
    assert.deepEqual([audit.payload.egress.http_request.host, audit.payload.egress.http_request.reason], [host, reason]);
    const line = JSON.parse((await user.run(['audit', 'tail', '--runtime', 'guest-text', '--json'])).out);
    assert.equal(line.payload.egress.http_request.host, host);
  });

  test('logs shows them, also through a pipe; --raw and --json keep the bytes', async () => {
    const shown = await user.run(['logs', 'guest-text']);
    assert.equal(shown.status, 0, shown.err);
    assert.equal(shown.out, `Linux version 6\nboot ${OSC52_SHOWN}${ERASE_LINE_SHOWN}done\n`);
    const raw = await user.run(['logs', 'guest-text', '--raw']);
    assert.deepEqual(raw.stdout, Buffer.from(log));
    assert.equal(JSON.parse((await user.run(['logs', 'guest-text', '--json'])).out).output, log);
  });
});
