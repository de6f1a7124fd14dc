/**
 * The core's side of a checkpoint's move between VM hosts (docs/scaling.md, "Moving
 * checkpoints"): who may move what, the store's row moving once, and copies dropped where the
 * store says they no longer belong. The files themselves: checkpoint-move-files.test.ts.
 */
import { test } from 'node:test';
import assert from 'node:assert/strict';
import { randomBytes, randomUUID } from 'node:crypto';
import { mkdtempSync, rmSync } from 'node:fs';
import { tmpdir } from 'node:os';
import { join } from 'node:path';
import { Core } from '../../src/core/core.js';
import { VesselError } from '../../src/core/errors.js';
import type { RemoteCheckpoint } from '../../src/core/ports.js';
import { SecretBox } from '../../src/core/secret-box.js';
import type { Checkpoint } from '../../src/core/types.js';
import { SqliteStore } from '../../src/store/sqlite-store.js';
import { ROOMY_TENANT_LIMITS, silentLog } from '../support/api-harness.js';
import { FakeDriver } from '../support/fake-driver.js';
import { FakeGateway } from '../support/fake-gateway.js';

const resources = { limits: { memory_mib: 512 }, requests: { memory_mib: 512 }, vcpus: 1 };
const checkpoint = (extra: Partial<Checkpoint>): Checkpoint => ({
  id: randomUUID(),
  tenantId: 'acme',
  displayName: `snap-${randomUUID().slice(0, 8)}`,
  state: 'ready',
  stateMessage: null,
  resources,
  sourceRuntimeId: null,
  templateId: null,
  parentCheckpointId: null,
  deleted: false,
  diskBytes: 1000,
  node: 'host-a',
  createdAt: new Date().toISOString(),
  ...extra,
});

async function fleetOf(work: (hosts: { a: Core; b: Core; driverA: FakeDriver; driverB: FakeDriver; store: SqliteStore }) => Promise<void>): Promise<void> {
  const dir = mkdtempSync(join(tmpdir(), 'vessel-moves-'));
  const store = new SqliteStore(join(dir, 'vessel.db'));
  const [driverA, driverB] = [new FakeDriver(), new FakeDriver()];
  const host = (driver: FakeDriver, node: string) =>
    new Core({ store, driver, gateway: new FakeGateway(), secretBox: new SecretBox(randomBytes(32)), log: silentLog, tenantLimits: ROOMY_TENANT_LIMITS, node });
  try {
    await work({ a: host(driverA, 'host-a'), b: host(driverB, 'host-b'), driverA, driverB, store });
  } finally {
    await store.close();
    rmSync(dir, { recursive: true, force: true });
  }
}

/** What host-b's route does: reads host-a's files through its core, as the hop would carry them. */
const through = (a: Core, tenantId: string) => async (node: string, id: string): Promise<RemoteCheckpoint> => {
  assert.equal(node, 'host-a');
  return { description: await a.checkpoints.describeForMove(tenantId, id), open: (file) => a.checkpoints.readForMove(tenantId, id, file) };
};

const refused = (code: string, why: RegExp) => (err: unknown) => err instanceof VesselError && err.code === code && why.test(err.message);

test('a move takes the files, then the row; asked again it is a no-op; the old host then drops its copy', async () => {
  await fleetOf(async ({ a, b, driverA, driverB, store }) => {
    const cp = checkpoint({});
    await store.checkpoints.insert(cp);
    driverA.checkpoints.add(cp.id);
    await assert.rejects(a.checkpoints.dropMovedFiles('acme', cp.id), refused('failed_precondition', /on this host still/));

    const moved = await b.checkpoints.moveHere('acme', cp.displayName, through(a, 'acme'));
    assert.deepEqual([moved.from, moved.checkpoint.node], ['host-a', 'host-b']);
    assert.equal((await store.checkpoints.find('acme', cp.id))?.node, 'host-b');
    assert.ok(driverB.checkpoints.has(cp.id));
    assert.deepEqual((await b.checkpoints.moveHere('acme', cp.id, through(a, 'acme'))).from, null, 'here already: nothing moves');

    await assert.rejects(a.checkpoints.describeForMove('acme', cp.id), refused('failed_precondition', /on VM host 'host-b', not here/));
    await a.checkpoints.dropMovedFiles('acme', cp.id);
    assert.ok(!driverA.checkpoints.has(cp.id));
  });
});

test('only a ready checkpoint of the caller\'s own moves; never a system template', async () => {
  await fleetOf(async ({ a, b, driverA, store }) => {
    const theirs = checkpoint({ tenantId: 'other' });
    const creating = checkpoint({ state: 'creating', diskBytes: null });
    const template = checkpoint({ tenantId: null, displayName: 'system-x-on-host-a' });
    for (const c of [theirs, creating, template]) {
      await store.checkpoints.insert(c);
      driverA.checkpoints.add(c.id);
    }
    await assert.rejects(b.checkpoints.moveHere('acme', theirs.id, through(a, 'acme')), refused('not_found', /not found/));
    await assert.rejects(a.checkpoints.readForMove('acme', theirs.id, 'state'), refused('not_found', /not found/), 'nor are its files read for another tenant');
    await assert.rejects(b.checkpoints.moveHere('acme', creating.id, through(a, 'acme')), refused('failed_precondition', /is creating/));
    await assert.rejects(b.checkpoints.moveHere('acme', template.id, through(a, 'acme')), refused('failed_precondition', /system checkpoint: each VM host makes its own/));
    assert.equal((await store.checkpoints.find('other', theirs.id))?.node, 'host-a');
  });
});

test('a move that loses its row to another host keeps nothing; a restart drops copies the store gives elsewhere', async () => {
  await fleetOf(async ({ a, b, driverA, driverB, store }) => {
    const cp = checkpoint({});
    await store.checkpoints.insert(cp);
    driverA.checkpoints.add(cp.id);
    const racing = async (node: string, id: string): Promise<RemoteCheckpoint> => {
      const source = await through(a, 'acme')(node, id);
      return {
        description: source.description,
        open: async (file) => {
          const frames = await source.open(file);
          // Another host takes it while these files are on their way.
          assert.equal(await store.checkpoints.moveNode(id, 'host-a', 'host-c'), true);
          return frames;
        },
      };
    };
    await assert.rejects(b.checkpoints.moveHere('acme', cp.id, racing), refused('failed_precondition', /moved elsewhere while its files were copied/));
    assert.ok(!driverB.checkpoints.has(cp.id), 'the copy that lost is dropped');

    // Host a was away when host c took it: at its next start it drops its copy, and keeps its own.
    const own = checkpoint({});
    await store.checkpoints.insert(own);
    driverA.checkpoints.add(own.id);
    await a.checkpoints.reconcile();
    assert.deepEqual(await driverA.heldCheckpointIds(), [own.id]);
  });
});

test('a restart drops checkpoint files that no record names (a delete that raced a move, a cut-short runtime move)', async () => {
  await fleetOf(async ({ a, driverA, store }) => {
    const own = checkpoint({});
    await store.checkpoints.insert(own);
    const stray = randomUUID();
    for (const id of [own.id, stray]) driverA.checkpoints.add(id);
    await a.checkpoints.reconcile();
    assert.deepEqual(await driverA.heldCheckpointIds(), [own.id]);
  });
});

test('the old host checking its dropped copy after a move does not fail the checkpoint that moved', async () => {
  await fleetOf(async ({ a, b, driverA, store }) => {
    const cp = checkpoint({});
    await store.checkpoints.insert(cp);
    driverA.checkpoints.add(cp.id);
    await b.checkpoints.moveHere('acme', cp.id, through(a, 'acme'));
    // Host a's background check, listed before the move, reaches its copy once it is gone.
    await a.checkpoints.dropMovedFiles('acme', cp.id);
    driverA.damaged.add(cp.id);
    await assert.rejects(a.checkpoints.ensureIntact(cp), refused('failed_precondition', /has its files on VM host 'host-b' now/));
    const row = await store.checkpoints.find('acme', cp.id);
    assert.equal(row?.state, 'ready', 'host b\'s good copy is not marked failed');
    assert.equal(row?.node, 'host-b');
  });
});
