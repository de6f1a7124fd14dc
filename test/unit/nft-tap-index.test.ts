/**
 * The gateway's table names its TAPs by interface index (src/net/nftables.ts). A table that
 * outlives its TAP, as one of a killed service does, must not match the TAP that another service
 * makes later under the same name: with a set of names it did, and steered that runtime's DNS to
 * a listener that was gone. Real nftables and a real TAP; root only, as the gateway itself.
 */
import { test } from 'node:test';
import assert from 'node:assert/strict';
import { randomBytes } from 'node:crypto';
import { applyRuleset, removeRuleset } from '../../src/net/nftables.js';
import { runCommand } from '../../src/platform/run-command.js';

const skip = process.getuid?.() !== 0 ? 'needs root, as the gateway does' : false;

const indexOf = async (dev: string): Promise<number> => (JSON.parse(await runCommand('ip', ['-j', 'link', 'show', dev])) as Array<{ ifindex: number }>)[0]!.ifindex;
const inSet = (table: string, dev: string): Promise<boolean> =>
  runCommand('nft', ['get', 'element', 'inet', table, 'taps', `{ "${dev}" }`]).then(() => true, () => false);

test('a table left behind does not match a new TAP of the same name', { skip }, async () => {
  const suffix = randomBytes(3).toString('hex');
  const tap = `vtst${suffix}`;
  const table = `vessel_test_${suffix}`;
  try {
    await runCommand('ip', ['tuntap', 'add', 'dev', tap, 'mode', 'tap']);
    await applyRuleset({ table, proxyPort: 15001, dnsPort: 15053, attachments: [{ tap, identity: '10.222.254.254' }] });
    assert.equal(await inSet(table, tap), true, 'the TAP it was loaded with is matched');
    const first = await indexOf(tap);
    await runCommand('ip', ['link', 'del', tap]);
    await runCommand('ip', ['tuntap', 'add', 'dev', tap, 'mode', 'tap']);
    assert.notEqual(await indexOf(tap), first);
    assert.equal(await inSet(table, tap), false, 'the new TAP of that name is not');
  } finally {
    await runCommand('ip', ['link', 'del', tap]).catch(() => undefined);
    await removeRuleset(table).catch(() => undefined);
  }
});
