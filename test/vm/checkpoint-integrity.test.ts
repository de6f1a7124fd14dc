/**
 * A checkpoint never changes after `ready`, whatever its forks do: shrink, fill and drop their
 * memory, stop, start, delete. Its files are root's and read-only, every QEMU holds them
 * read-only, their digests stay the same, and a file damaged on purpose is found and refused.
 */
import { test, before, after } from 'node:test';
import assert from 'node:assert/strict';
import { closeSync, openSync, readFileSync, readSync, readdirSync, readlinkSync, statSync, writeSync } from 'node:fs';
import { join } from 'node:path';
import { checkpointFiles as filesOf, fingerprint as fingerprintOf } from '../support/checkpoint-files.js';
import { HEAVY_READ } from '../support/guest.js';
import { Service } from '../support/service.js';

const TIMEOUT = { timeout: 600_000 };
const svc = new Service();
before(() => svc.start(), { timeout: 900_000 });
after(() => svc.destroy());

async function sh(rt: string, command: string): Promise<string> {
  const r = await svc.call('POST', `/v1/runtimes/${rt}/exec`, { command, timeout_secs: 300 });
  assert.equal(r.status, 200, JSON.stringify(r.body));
  assert.equal(r.body.data.exit_code, 0, `${command}: ${r.body.data.stderr}`);
  return r.body.data.stdout.trim();
}

async function create(body: object): Promise<any> {
  const r = await svc.call('POST', '/v1/runtimes', body);
  assert.equal(r.status, 201, JSON.stringify(r.body));
  return r.body.data;
}

async function checkpoint(rt: string, name: string): Promise<any> {
  const r = await svc.call('POST', `/v1/runtimes/${rt}/checkpoints`, { name });
  assert.equal(r.status, 201, JSON.stringify(r.body));
  for (let i = 0; i < 1200; i++) {
    const cp = (await svc.call('GET', `/v1/checkpoints/${r.body.data.id}`)).body.data;
    if (cp.state !== 'creating') {
      assert.equal(cp.state, 'ready', cp.state_message);
      return cp;
    }
    await new Promise((res) => setTimeout(res, 100));
  }
  throw new Error('checkpoint never settled');
}

/**
 * The balloon inflates in the background: waits until the memory the guest has available comes
 * down below `mib`. (With deflate-on-oom the balloon's pages still count in MemTotal.)
 */
async function guestMemoryFallsBelow(rt: string, mib: number): Promise<number> {
  let available = Infinity;
  for (let i = 0; i < 120 && available >= mib; i++) {
    if (i > 0) await new Promise((r) => setTimeout(r, 500));
    available = Number(await sh(rt, "awk '/^MemAvailable:/ {print int($2 / 1024)}' /proc/meminfo"));
  }
  assert.ok(available < mib, `the guest has about its request available (${available} MiB)`);
  return available;
}

const systemCheckpoint = async (): Promise<any> => (await svc.call('GET', '/v1/checkpoints?include_system=true')).body.data.find((c: any) => c.system);

const checkpointFiles = (cpId: string): string[] => filesOf(svc.dataDir, cpId);
const fingerprint = (cpId: string): Record<string, string> => fingerprintOf(svc.dataDir, cpId);

const qemuPid = (runtimeId: string): number => Number(readFileSync(join(svc.dataDir, 'runtimes', runtimeId, 'qemu.pid'), 'utf8'));

function rssMib(runtimeId: string): number {
  const rollup = readFileSync(`/proc/${qemuPid(runtimeId)}/smaps_rollup`, 'utf8');
  return Number(/^Rss:\s+(\d+) kB/m.exec(rollup)![1]) / 1024;
}

/** Every descriptor a running QEMU holds on a checkpoint file or layer, with its access mode. */
function checkpointFdsOf(pid: number): Array<{ target: string; writable: boolean }> {
  const found: Array<{ target: string; writable: boolean }> = [];
  for (const fd of readdirSync(`/proc/${pid}/fd`)) {
    let target: string;
    try {
      target = readlinkSync(`/proc/${pid}/fd/${fd}`);
    } catch {
      continue;
    }
    if (!target.startsWith(join(svc.dataDir, 'checkpoints')) && !target.startsWith(join(svc.dataDir, 'layers'))) continue;
    const flags = parseInt(/^flags:\s+(\d+)/m.exec(readFileSync(`/proc/${pid}/fdinfo/${fd}`, 'utf8'))![1]!, 8);
    found.push({ target, writable: (flags & 3) !== 0 });
  }
  return found;
}

function assertSealed(cpId: string): void {
  for (const f of checkpointFiles(cpId)) {
    const st = statSync(f);
    assert.equal(st.uid, 0, `${f} belongs to root`);
    assert.equal(st.mode & 0o777, 0o400, `${f} is read-only to root alone`);
  }
}

let heavyDigest = '';
let systemPrint: Record<string, string> = {};
let systemId = '';

test('a shrunk fork of the system checkpoint leaves it intact for the creates after it', TIMEOUT, async () => {
  const base = await create({ display_name: 'base' });
  const sys = await systemCheckpoint();
  systemId = sys.id;
  systemPrint = fingerprint(sys.id);
  assertSealed(sys.id);
  heavyDigest = (await sh('base', HEAVY_READ)).split('\n').pop()!;

  const patched = await svc.call('PATCH', '/v1/runtimes/base', { resources: { requests: { memory_mib: 128 } } });
  assert.equal(patched.status, 200, JSON.stringify(patched.body));
  assert.equal(patched.body.data.resources.requests.memory_mib, 128);
  await guestMemoryFallsBelow('base', 128);
  assert.equal(await sh('base', 'echo alive'), 'alive');
  assert.deepEqual(fingerprint(sys.id), systemPrint, 'the shrink did not touch the system checkpoint');

  // Two forks of their own, each made and read at once: a guest is one TCG thread, so the two
  // take the host's two cores instead of waiting for each other.
  await Promise.all(
    ['after-1', 'after-2'].map(async (name) => {
      await create({ display_name: name });
      const out = (await sh(name, HEAVY_READ)).split('\n');
      assert.equal(out[0], 'imports ok');
      assert.equal(out[1], heavyDigest, `${name} reads the image as the first VM did`);
    }),
  );
  for (const pid of [qemuPid(base.id)]) assert.ok(checkpointFdsOf(pid).every((f) => !f.writable));
  for (const name of ['after-1', 'after-2']) assert.equal((await svc.call('DELETE', `/v1/runtimes/${name}`)).status, 200);
});

test('a fork that fills its memory, shrinks, stops, starts and goes leaves its checkpoint as it was', TIMEOUT, async () => {
  await create({ display_name: 'holder' });
  await sh('holder', 'head -c 24M /dev/urandom > /root/blob; sync');
  const blobSum = await sh('holder', "sha256sum /root/blob | cut -d' ' -f1");
  const cp = await checkpoint('holder', 'blob-cp');
  const print = fingerprint(cp.id);
  assertSealed(cp.id);

  const fork = await create({ display_name: 'filler', checkpoint: 'blob-cp' });
  assert.ok(checkpointFdsOf(qemuPid(fork.id)).length > 0, 'the fork holds its checkpoint open');
  assert.ok(checkpointFdsOf(qemuPid(fork.id)).every((f) => !f.writable), 'and only for reading');
  // Dirty much of the fork's memory (tmpfs, whose default size is half of it, and the page
  // cache), then drop it again.
  await sh('filler', 'head -c 200M /dev/urandom > /dev/shm/fill && cat /root/blob /usr/bin/* > /dev/null && rm /dev/shm/fill && sync && echo 3 > /proc/sys/vm/drop_caches');
  const before = rssMib(fork.id);
  const patched = await svc.call('PATCH', '/v1/runtimes/filler', { resources: { requests: { memory_mib: 128 } } });
  assert.equal(patched.status, 200, JSON.stringify(patched.body));
  // The balloon gives memory back as the guest frees it, at the pace of a (possibly loaded)
  // host: wait for the drop, bounded, rather than for a fixed time.
  let after = rssMib(fork.id);
  for (let i = 0; i < 240 && after >= before - 100; i++) {
    await new Promise((r) => setTimeout(r, 500));
    after = rssMib(fork.id);
  }
  console.log(`fork RSS before the shrink ${before.toFixed(0)} MiB, after ${after.toFixed(0)} MiB`);
  assert.ok(before > 250, `the fork held what it wrote (${before.toFixed(0)} MiB)`);
  assert.ok(after < before - 100, `the shrink returned memory to the host (${before.toFixed(0)} -> ${after.toFixed(0)} MiB)`);
  assert.equal(await sh('filler', "sha256sum /root/blob | cut -d' ' -f1"), blobSum, 'the fork still reads its file after the move');
  assert.deepEqual(fingerprint(cp.id), print);

  assert.equal((await svc.call('POST', '/v1/runtimes/filler/stop')).status, 200);
  assert.equal((await svc.call('POST', '/v1/runtimes/filler/start')).status, 200);
  assert.equal(await sh('filler', "sha256sum /root/blob | cut -d' ' -f1"), blobSum);
  assert.equal((await svc.call('DELETE', '/v1/runtimes/filler')).status, 200);

  await Promise.all(
    ['late-1', 'late-2'].map(async (name) => {
      await create({ display_name: name, checkpoint: 'blob-cp' });
      assert.equal(await sh(name, "sha256sum /root/blob | cut -d' ' -f1"), blobSum, `${name} sees the file as it was checkpointed`);
      const out = (await sh(name, HEAVY_READ)).split('\n');
      assert.deepEqual(out, ['imports ok', heavyDigest]);
    }),
  );
  assert.deepEqual(fingerprint(cp.id), print, 'the user checkpoint is byte for byte what it was');
  assert.deepEqual(fingerprint(systemId), systemPrint, 'and so is the system checkpoint');
});

test('a create with a smaller request forks a template made for it, and a later shrink moves it onto its own memory', TIMEOUT, async () => {
  const rt = await create({ display_name: 'small', resources: { limits: { memory_mib: 512 }, requests: { memory_mib: 192 } } });
  assert.equal(rt.resources.requests.memory_mib, 192);
  await guestMemoryFallsBelow('small', 192);
  const template = (await svc.call('GET', '/v1/checkpoints?include_system=true')).body.data.find((c: any) => c.display_name.endsWith('-512m-r192m-1c'));
  assert.ok(template, 'a template of that shape exists');
  const templatePrint = fingerprint(template.id);
  const maps = () => readFileSync(`/proc/${qemuPid(rt.id)}/maps`, 'utf8');
  assert.ok(maps().includes(join(svc.dataDir, 'checkpoints', template.id, 'ram')), 'it shares the template memory, balloon and all');
  assert.ok(rssMib(rt.id) < 200, `giving up memory did not make the fork hold it (${rssMib(rt.id).toFixed(0)} MiB)`);
  assert.ok(!readFileSync(join(svc.dataDir, 'runtimes', rt.id, 'qemu.log'), 'utf8').includes('Discarding RAM'), 'QEMU was never asked to discard a page of the template');

  const patched = await svc.call('PATCH', '/v1/runtimes/small', { resources: { requests: { memory_mib: 128 } } });
  assert.equal(patched.status, 200, JSON.stringify(patched.body));
  await guestMemoryFallsBelow('small', 128);
  assert.ok(!maps().includes(join(svc.dataDir, 'checkpoints')), 'to shrink further it moved onto memory of its own');
  assert.equal((await svc.call('PATCH', '/v1/runtimes/small', { resources: { requests: { memory_mib: 512 } } })).status, 200);
  assert.equal(await sh('small', 'echo alive'), 'alive');
  assert.deepEqual(fingerprint(template.id), templatePrint);
  assert.deepEqual(fingerprint(systemId), systemPrint);
  assert.equal((await svc.call('DELETE', '/v1/runtimes/small')).status, 200);
});

test('a damaged checkpoint is found after a restart, failed and never forked; a damaged template is made again', TIMEOUT, async () => {
  const cp = (await svc.call('GET', '/v1/checkpoints/blob-cp')).body.data;
  for (const rt of (await svc.call('GET', '/v1/runtimes')).body.data) await svc.call('DELETE', `/v1/runtimes/${rt.id}`);
  await svc.stop();
  // One flipped byte in each: the user checkpoint's device state and the template's memory.
  for (const file of [join(svc.dataDir, 'checkpoints', cp.id, 'state'), join(svc.dataDir, 'checkpoints', systemId, 'ram')]) {
    const fd = openSync(file, 'r+');
    const at = Math.floor(statSync(file).size / 3);
    // The one byte read where it is: the RAM file is the guest's whole memory.
    const byte = Buffer.alloc(1);
    assert.equal(readSync(fd, byte, 0, 1, at), 1);
    writeSync(fd, Buffer.from([byte[0]! ^ 0x5a]), 0, 1, at);
    closeSync(fd);
  }
  await svc.start();
  const fork = await svc.call('POST', '/v1/runtimes', { display_name: 'from-damaged', checkpoint: 'blob-cp' });
  assert.equal(fork.status, 409, JSON.stringify(fork.body));
  assert.equal(fork.body.error.code, 'failed_precondition');
  assert.match(fork.body.error.message, /state file has changed/);
  const failed = (await svc.call('GET', '/v1/checkpoints/blob-cp')).body.data;
  assert.equal(failed.state, 'failed');
  assert.match(failed.state_message, /damaged/);
  assert.equal((await svc.call('GET', '/v1/runtimes/from-damaged')).status, 404, 'the refused fork left nothing behind');

  await create({ display_name: 'fresh' });
  const sys = await systemCheckpoint();
  assert.notEqual(sys.id, systemId, 'the damaged template was replaced');
  assert.deepEqual((await sh('fresh', HEAVY_READ)).split('\n'), ['imports ok', heavyDigest]);
});
