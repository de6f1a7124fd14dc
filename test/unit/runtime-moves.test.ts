/**
 * The core's side of moving a runtime between VM hosts with its id (docs/scaling.md, "Moving
 * runtimes"): the store's compare-and-swap decides where it is whatever answer is lost, the host
 * it leaves keeps nothing once it moved and everything when it did not, and a restart mid-move
 * settles it. Real VMs moving: test/vm/fleet.test.ts.
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
import type { MoveOffer } from '../../src/core/runtime-moves.js';
import { SecretBox } from '../../src/core/secret-box.js';
import { SqliteStore } from '../../src/store/sqlite-store.js';
import { ROOMY_TENANT_LIMITS, silentLog } from '../support/api-harness.js';
import { FakeDriver } from '../support/fake-driver.js';
import { FakeGateway } from '../support/fake-gateway.js';

interface Fleet {
  a: Core;
  b: Core;
  driverA: FakeDriver;
  driverB: FakeDriver;
  store: SqliteStore;
  /** Host a again, as after a restart: a new process on the same store and VMs. */
  restartA: () => Core;
}

async function fleetOf(work: (fleet: Fleet) => Promise<void>): Promise<void> {
  const dir = mkdtempSync(join(tmpdir(), 'vessel-runtime-moves-'));
  const store = new SqliteStore(join(dir, 'vessel.db'));
  const [driverA, driverB] = [new FakeDriver(), new FakeDriver()];
  const host = (driver: FakeDriver, node: string) =>
    new Core({ store, driver, gateway: new FakeGateway(), secretBox: new SecretBox(randomBytes(32)), log: silentLog, tenantLimits: ROOMY_TENANT_LIMITS, node });
  try {
    await work({ a: host(driverA, 'host-a'), b: host(driverB, 'host-b'), driverA, driverB, store, restartA: () => host(driverA, 'host-a') });
  } finally {
    await store.close();
    rmSync(dir, { recursive: true, force: true });
  }
}

/** What host b's `take` route does: reads host a's capture through its core, as the hop would carry it. */
const captureOf = (a: Core, offer: MoveOffer): RemoteCheckpoint => ({
  description: { manifest: null, image: 'fake-image', files: ['state'] },
  open: (file) => a.runtimeMoves!.readCapture('acme', offer.runtimeId, offer.captureId, file),
});
const take = (a: Core, b: Core, offer: MoveOffer, stillWanted = () => true) => b.runtimeMoves!.takeHere('acme', offer.runtimeId, offer, captureOf(a, offer), stillWanted);

/** Starts a move to host b whose process then dies (its call never returns); resolves with what it offered. */
async function moveThatNeverReturns(a: Core, name: string): Promise<MoveOffer> {
  let offered: MoveOffer | null = null;
  void a.runtimeMoves!.moveOut('acme', name, 'host-b', (offer) => {
    offered = offer;
    return new Promise<void>(() => undefined);
  });
  while (offered === null) await new Promise((r) => setTimeout(r, 5));
  return offered;
}

/** Makes the store's next hand-over to `node` take effect and then fail, as a connection lost before its answer. */
function loseAnswerOfNextHandOver(store: SqliteStore, node: string): void {
  const handOver = store.runtimes.handOver.bind(store.runtimes);
  store.runtimes.handOver = async (id, expected, next) => {
    const took = await handOver(id, expected, next);
    if (next.node !== node) return took;
    store.runtimes.handOver = handOver;
    throw new Error('Connection terminated unexpectedly');
  };
}
const refused = (code: string, why: RegExp) => (err: unknown) => err instanceof VesselError && err.code === code && why.test(err.message);

test('a running runtime moves with its id; calls meanwhile are told to retry; nothing of it stays behind', async () => {
  await fleetOf(async ({ a, b, driverA, driverB, store }) => {
    const rt = await a.runtimes.create('acme', { display_name: 'mover' });
    const moved = await a.runtimeMoves!.moveOut('acme', 'mover', 'host-b', async (offer) => {
      await assert.rejects(a.processes.exec('acme', 'mover', { command: 'true', args: [], cwd: null, env: {}, user: null, stdin: null, maxOutputBytes: 10, timeoutSecs: 1 }), refused('unavailable', /moving to VM host 'host-b'; retry/));
      assert.equal((await store.runtimes.findById(rt.id))?.statusMessage, "moving to VM host 'host-b'", 'what a GET shows meanwhile');
      assert.equal(driverA.vms.get(rt.id)?.state, 'paused', 'it runs nowhere while its files are copied');
      await assert.rejects(a.runtimeMoves!.readCapture('acme', rt.id, randomUUID(), 'state'), refused('failed_precondition', /not moving away .* with capture/));
      let ranBeforeCommit = false;
      const source = captureOf(a, offer);
      const watched: RemoteCheckpoint = {
        ...source,
        open: async (file) => {
          const frames = await source.open(file);
          // Checked again once the VM is made, just before the commit (stillWanted is asked then).
          return frames;
        },
      };
      await b.runtimeMoves!.takeHere('acme', rt.id, offer, watched, () => {
        ranBeforeCommit = driverB.vms.get(rt.id)?.state === 'running';
        return true;
      });
      assert.equal(ranBeforeCommit, false, 'restored paused: nothing of it runs there before the commit');
    });
    assert.equal(moved.id, rt.id);
    const row = await store.runtimes.findById(rt.id);
    assert.deepEqual([row?.node, row?.status, row?.statusMessage], ['host-b', 'running', null]);
    assert.equal(driverB.vms.get(rt.id)?.state, 'running');
    assert.equal(driverB.importedShapes.size, 1, 'the capture was checked against the runtime\'s own shape');
    assert.deepEqual([...driverB.importedShapes.values()][0], { memoryMib: 512, vcpus: 1 });
    assert.ok(!driverA.vms.has(rt.id), 'the old host keeps no VM');
    const captures = async (d: FakeDriver) => (await d.heldCheckpointIds()).filter((id) => id !== rt.baseCheckpointId);
    assert.deepEqual([await captures(driverA), await captures(driverB)], [[], []], 'the capture is no checkpoint of anyone\'s');
    // Its tenant sees the move in its audits, once.
    const audits = (await a.audits.list('acme', { runtime: rt.id, category: 'lifecycle', limit: 10 })).items;
    assert.deepEqual(audits.map((x) => x.payload), [{ lifecycle: { action: 'move', reason: "moved from VM host 'host-a' to 'host-b'", runtime_name: 'mover' } }]);
    // Host b owns it now; host a refuses it, and the API nodes route it to b.
    assert.equal((await b.processes.exec('acme', rt.id, { command: 'true', args: [], cwd: null, env: {}, user: null, stdin: null, maxOutputBytes: 10, timeoutSecs: 1 })).exit_code, 0);
    await assert.rejects(a.runtimes.get('acme', rt.id), refused('unavailable', /not on this VM host/));
  });
});

test('a paused runtime arrives paused; a stopped one moves as its disk and starts there; a suspended one does not move', async () => {
  await fleetOf(async ({ a, b, driverB, store }) => {
    const rt = await a.runtimes.create('acme', { display_name: 'paused' });
    await a.runtimes.lifecycle('acme', 'paused', 'pause');
    await a.runtimeMoves!.moveOut('acme', 'paused', 'host-b', (offer) => take(a, b, offer).then(() => undefined));
    assert.equal(driverB.vms.get(rt.id)?.state, 'paused');
    assert.equal((await store.runtimes.findById(rt.id))?.status, 'paused');

    const stopped = await a.runtimes.create('acme', { display_name: 'stopped' });
    await a.runtimes.lifecycle('acme', 'stopped', 'stop');
    await a.runtimeMoves!.moveOut('acme', 'stopped', 'host-b', (offer) => take(a, b, offer).then(() => undefined));
    assert.deepEqual([(await store.runtimes.findById(stopped.id))?.node, (await store.runtimes.findById(stopped.id))?.status], ['host-b', 'shutdown']);
    assert.equal(driverB.vms.get(stopped.id)?.state, 'gone', 'a disk, no VM');
    assert.equal((await b.runtimes.lifecycle('acme', 'stopped', 'start')).status, 'running');

    // A suspended one keeps its memory in files of its own, which a move does not carry yet.
    await a.runtimes.create('acme', { display_name: 'suspended' });
    const row = (await store.runtimes.find('acme', 'suspended'))!;
    await store.runtimes.update({ ...row, status: 'suspended' });
    await assert.rejects(a.runtimeMoves!.moveOut('acme', 'suspended', 'host-b', async () => assert.fail('never asked')), refused('failed_precondition', /resume a suspended one first/));
  });
});

test('a refusal by the other host leaves the runtime running where it was, its capture dropped', async () => {
  await fleetOf(async ({ a, b, driverA, driverB, store }) => {
    const rt = await a.runtimes.create('acme', { display_name: 'stays' });
    driverB.capacityMib = 100;
    await assert.rejects(
      a.runtimeMoves!.moveOut('acme', 'stays', 'host-b', (offer) => take(a, b, offer).then(() => undefined)),
      refused('unavailable', /not enough host memory/),
    );
    const row = await store.runtimes.findById(rt.id);
    assert.deepEqual([row?.node, row?.status, row?.statusMessage], ['host-a', 'running', null]);
    assert.equal(driverA.vms.get(rt.id)?.state, 'running', 'running again');
    assert.ok(!driverB.vms.has(rt.id));
    assert.deepEqual(await driverB.heldCheckpointIds(), [], 'host b keeps nothing of it');
    assert.deepEqual(await driverA.heldCheckpointIds(), [rt.baseCheckpointId], 'the capture is gone from host a');
  });
});

test('a refused move of a shut-down runtime leaves its disk where it was, no capture, and it starts there', async () => {
  await fleetOf(async ({ a, b, driverA, driverB, store }) => {
    const rt = await a.runtimes.create('acme', { display_name: 'cold' });
    await a.runtimes.lifecycle('acme', 'cold', 'stop');
    await assert.rejects(
      a.runtimeMoves!.moveOut('acme', 'cold', 'host-b', async (offer) => {
        await take(a, b, offer, () => false);
      }),
      refused('unavailable', /stopped waiting/),
    );
    const row = await store.runtimes.findById(rt.id);
    assert.deepEqual([row?.node, row?.status, row?.statusMessage], ['host-a', 'shutdown', null]);
    assert.ok(driverA.vms.has(rt.id) && !driverB.vms.has(rt.id));
    assert.deepEqual([await driverA.heldCheckpointIds(), await driverB.heldCheckpointIds()], [[rt.baseCheckpointId], []], 'no capture on either host');
    assert.equal((await a.runtimes.lifecycle('acme', 'cold', 'start')).status, 'running');
  });
});

test('an answer lost after the commit: the runtime is where the store says, and runs once', async () => {
  await fleetOf(async ({ a, b, driverA, driverB, store }) => {
    const rt = await a.runtimes.create('acme', { display_name: 'lost-answer' });
    await a.runtimeMoves!.moveOut('acme', 'lost-answer', 'host-b', async (offer) => {
      await take(a, b, offer);
      throw new Error('socket hang up');
    });
    assert.equal((await store.runtimes.findById(rt.id))?.node, 'host-b');
    assert.ok(!driverA.vms.has(rt.id), 'host a gave it up, since host b committed');
    assert.equal(driverB.vms.get(rt.id)?.state, 'running');
  });
});

test('an answer lost before the commit: the moving host keeps it, and a late commit is refused', async () => {
  await fleetOf(async ({ a, b, driverA, driverB, store }) => {
    const rt = await a.runtimes.create('acme', { display_name: 'late' });
    let offered: MoveOffer | null = null;
    let capture: RemoteCheckpoint | null = null;
    await assert.rejects(
      a.runtimeMoves!.moveOut('acme', 'late', 'host-b', async (offer) => {
        offered = offer;
        // Host b got the offer and read the capture's description; then the call broke.
        capture = { description: { manifest: null, image: 'fake-image', files: ['state'] }, open: async () => (async function* () { yield Buffer.from('state'); })() };
        throw new Error('socket hang up');
      }),
      /socket hang up/,
    );
    assert.equal((await store.runtimes.findById(rt.id))?.node, 'host-a');
    assert.equal(driverA.vms.get(rt.id)?.state, 'running');
    await assert.rejects(b.runtimeMoves!.takeHere('acme', rt.id, offered!, capture!, () => true), refused('failed_precondition', /changed since VM host 'host-a' began to move it/));
    assert.ok(!driverB.vms.has(rt.id));

    // One that got past that check and lost the swap: it keeps nothing either.
    await assert.rejects(
      a.runtimeMoves!.moveOut('acme', 'late', 'host-b', async (offer) => {
        await take(a, b, offer, () => false).catch(() => undefined);
        throw new Error('socket hang up');
      }),
      /socket hang up/,
    );
    assert.ok(!driverB.vms.has(rt.id), 'a host that was given up on commits nothing');
    assert.equal((await store.runtimes.findById(rt.id))?.node, 'host-a');
  });
});

test('a restart of the moving host mid-move: its swap back settles it, and the VM runs again there', async () => {
  await fleetOf(async ({ a, b, driverA, driverB, store, restartA }) => {
    const rt = await a.runtimes.create('acme', { display_name: 'cut' });
    // The process dies while host b copies: its move never returns.
    const offered = await moveThatNeverReturns(a, 'cut');
    const again = restartA();
    await again.reconcile();
    const row = await store.runtimes.findById(rt.id);
    assert.deepEqual([row?.node, row?.status, row?.statusMessage], ['host-a', 'running', null]);
    assert.equal(driverA.vms.get(rt.id)?.state, 'running', 'resumed');
    await assert.rejects(b.runtimeMoves!.takeHere('acme', rt.id, offered, captureOf(a, offered), () => true), refused('failed_precondition', /changed since/));
    assert.ok(!driverB.vms.has(rt.id));
  });
});

test('a restart of the moving host after the other committed: the VM left there goes', async () => {
  await fleetOf(async ({ a, b, driverA, store, restartA }) => {
    const rt = await a.runtimes.create('acme', { display_name: 'gone-there' });
    let committed = false;
    void a.runtimeMoves!.moveOut('acme', 'gone-there', 'host-b', async (offer) => {
      await take(a, b, offer);
      committed = true;
      return new Promise<void>(() => undefined);
    });
    while (!committed) await new Promise((r) => setTimeout(r, 5));
    const again = restartA();
    const { orphans } = await again.reconcile();
    assert.equal(orphans, 1);
    assert.ok(!driverA.vms.has(rt.id));
    assert.equal((await store.runtimes.findById(rt.id))?.node, 'host-b');
  });
});

test('the commit itself decides: a moving host restarted after the taker checked the row keeps the runtime, and the taker keeps nothing', async () => {
  await fleetOf(async ({ a, b, driverA, driverB, store, restartA }) => {
    const rt = await a.runtimes.create('acme', { display_name: 'raced' });
    const offered = await moveThatNeverReturns(a, 'raced');
    const source = captureOf(a, offered);
    // Host b has checked the row and is copying when host a restarts and fences the move.
    const racing: RemoteCheckpoint = { ...source, open: async (file) => { const frames = await source.open(file); await restartA().reconcile(); return frames; } };
    await assert.rejects(b.runtimeMoves!.takeHere('acme', rt.id, offered, racing, () => true), refused('failed_precondition', /the move was called off there/));
    assert.ok(!driverB.vms.has(rt.id), 'the taker keeps no VM');
    const row = await store.runtimes.findById(rt.id);
    assert.deepEqual([row?.node, row?.status, row?.statusMessage], ['host-a', 'running', null]);
    assert.equal(driverA.vms.get(rt.id)?.state, 'running');
  });
});

test("a lost answer of either side's swap: the row says which won, and the runtime runs in exactly one place", async () => {
  await fleetOf(async ({ a, b, driverA, driverB, store }) => {
    // The taker's commit took effect, its answer was lost: it learns from the row, and runs it.
    const one = await a.runtimes.create('acme', { display_name: 'commit-lost' });
    loseAnswerOfNextHandOver(store, 'host-b');
    await a.runtimeMoves!.moveOut('acme', 'commit-lost', 'host-b', (offer) => take(a, b, offer).then(() => undefined));
    assert.equal((await store.runtimes.findById(one.id))?.node, 'host-b');
    assert.equal(driverB.vms.get(one.id)?.state, 'running');
    assert.ok(!driverA.vms.has(one.id));

    // The moving host's swap back took effect, its answer was lost: it keeps the runtime, running.
    const two = await a.runtimes.create('acme', { display_name: 'stay-lost' });
    loseAnswerOfNextHandOver(store, 'host-a');
    await assert.rejects(a.runtimeMoves!.moveOut('acme', 'stay-lost', 'host-b', async () => { throw new Error('socket hang up'); }), /socket hang up/);
    const row = await store.runtimes.findById(two.id);
    assert.deepEqual([row?.node, row?.statusMessage], ['host-a', null]);
    assert.equal(driverA.vms.get(two.id)?.state, 'running');
    assert.ok(!driverB.vms.has(two.id));
  });
});
