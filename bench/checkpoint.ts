/**
 * Checkpoint benchmarks in one invocation:
 * - create -> running through the API (a fork of the system checkpoint) against a raw restore of
 *   the same checkpoint: QEMU with the same command line, -incoming from its state file, until
 *   the guest agent answers;
 * - checkpoint time through the API against a raw QMP migrate of the same VM to a file;
 * - resident memory of idle forks.
 */
import { spawn } from 'node:child_process';
import { createHash } from 'node:crypto';
import { closeSync, createReadStream, openSync, readFileSync, rmSync, mkdirSync, statSync } from 'node:fs';
import { join } from 'node:path';
import { Service } from '../test/support/service.js';
import type { CheckpointManifest } from '../src/vm/disk-layers.js';
import { digestFile } from '../src/vm/file-digest.js';
import { findImage } from '../src/vm/guest-image.js';
import { hostTscKhz } from '../src/vm/accel.js';
import { INCOMING_FDSET, migrateFromFdset, migrateToFile } from '../src/vm/migration.js';
import { qemuArgs } from '../src/vm/qemu-args.js';
import { QmpClient } from '../src/vm/qmp-client.js';
import { AgentClient } from '../src/vm/agent/agent-client.js';
import { runCommand } from '../src/platform/run-command.js';
import { flushFiles } from '../src/platform/durable-files.js';
import { SHARED_IMAGE_DIR } from '../test/support/service.js';

const N = Number(process.env.BENCH_FORKS ?? 8);
const pct = (xs: number[], p: number) => [...xs].sort((a, b) => a - b)[Math.min(xs.length - 1, Math.floor((p / 100) * xs.length))]!;
const sleep = (ms: number) => new Promise((r) => setTimeout(r, ms));

async function connectRetry<T>(fn: () => Promise<T>, ms = 30_000): Promise<T> {
  const deadline = Date.now() + ms;
  for (;;) {
    try {
      return await fn();
    } catch (err) {
      if (Date.now() > deadline) throw err;
      await sleep(5);
    }
  }
}

/** Resident and private memory of a process, in MiB. */
function memoryOf(pid: number): { rss: number; private: number } {
  const rollup = readFileSync(`/proc/${pid}/smaps_rollup`, 'utf8');
  const kb = (k: string) => Number(new RegExp(`^${k}:\\s+(\\d+)`, 'm').exec(rollup)?.[1] ?? 0);
  return { rss: kb('Rss') / 1024, private: (kb('Private_Clean') + kb('Private_Dirty')) / 1024 };
}

async function plainSha256(path: string): Promise<string> {
  const hash = createHash('sha256');
  for await (const chunk of createReadStream(path, { highWaterMark: 1 << 20 })) hash.update(chunk as Buffer);
  return hash.digest('hex');
}

// The bench measures the host, so no tenant quota stops it first (density holds hundreds of forks).
const svc = new Service({
  VESSEL_TENANT_MAX_RUNTIMES: '100000',
  VESSEL_TENANT_MAX_VCPUS: '100000',
  VESSEL_TENANT_MAX_MEMORY_MIB: String(1 << 30),
  VESSEL_TENANT_MAX_CHECKPOINTS: '100000',
  VESSEL_TENANT_MAX_CHECKPOINT_GIB: '100000',
});
await svc.start();
try {
  // Warm up: the first create makes the system checkpoint.
  await svc.call('POST', '/v1/runtimes', { display_name: 'warm' });
  const sys = (await svc.call('GET', '/v1/checkpoints?include_system=true')).body.data.find((c: any) => c.system);
  const cpDir = join(svc.dataDir, 'checkpoints', sys.id);
  const manifest = JSON.parse(readFileSync(join(cpDir, 'manifest.json'), 'utf8')) as CheckpointManifest;
  const image = findImage(SHARED_IMAGE_DIR)!;

  const apiCreate: number[] = [];
  const coldCreate: number[] = [];
  const rawRestore: number[] = [];
  for (let i = 0; i < N; i++) {
    // A plain create takes a spare from the warm pool when one is ready.
    let t = performance.now();
    const r = await svc.call('POST', '/v1/runtimes', { display_name: `f${i}` });
    if (r.status !== 201) throw new Error(JSON.stringify(r.body));
    apiCreate.push(performance.now() - t);
    // Naming the checkpoint bypasses the pool: the restore happens inside the create.
    t = performance.now();
    const c = await svc.call('POST', '/v1/runtimes', { display_name: `c${i}`, checkpoint: sys.id });
    if (c.status !== 201) throw new Error(JSON.stringify(c.body));
    coldCreate.push(performance.now() - t);

    // Raw: the same restore, driven by hand.
    const dir = join(svc.dataDir, `raw-${i}`);
    mkdirSync(dir);
    t = performance.now();
    await runCommand('qemu-img', ['create', '-q', '-f', 'qcow2', '-u', '-b', join(svc.dataDir, 'layers', `${manifest.chain[0]}.qcow2`), '-F', 'qcow2', join(dir, 'disk.qcow2'), String(manifest.diskSizeBytes)]);
    // The same command line as the driver's: the stream and the disk as inherited descriptors.
    // The backing chain too, bottom first, each file in a fd set of its own.
    const chain = [image.rootfs, ...[...manifest.chain].reverse().map((id) => join(svc.dataDir, 'layers', `${id}.qcow2`))];
    const fds = [openSync(join(cpDir, 'state'), 'r'), openSync(join(dir, 'disk.qcow2'), 'r+'), openSync(join(dir, 'disk.qcow2'), 'r'), ...chain.map((f) => openSync(f, 'r'))];
    const args = qemuArgs({
      accel: 'tcg', kernel: image.kernel, initrd: image.initrd, disk: { node: 'disk-0', fdset: 100 },
      backing: chain.map((_, i) => ({ node: `b${i}`, fdset: 10_000 + i, format: i === 0 ? 'raw' : 'qcow2' })),
      memory: { file: join(cpDir, 'ram'), shared: false }, incoming: true,
      fdsets: [{ fd: 3, set: INCOMING_FDSET }, { fd: 4, set: 100 }, { fd: 5, set: 100 }, ...chain.map((_, i) => ({ fd: 6 + i, set: 10_000 + i }))],
      qmpSocket: join(dir, 'qmp.sock'), agentSocket: join(dir, 'vessel-agent.sock'), serialLog: join(dir, 'serial.log'), memoryMib: manifest.memoryMib, vcpus: manifest.vcpus,
      name: `raw-${i}`, runAs: '299999:299999', chroot: join(svc.dataDir, 'qemu-root'), tscKhz: hostTscKhz(), tapFd: null,
    });
    const child = spawn('qemu-system-x86_64', args, { stdio: ['ignore', 'ignore', 'ignore', ...fds], detached: true });
    for (const fd of fds) closeSync(fd);
    const qmp = await connectRetry(() => QmpClient.connect(join(dir, 'qmp.sock'), 1000));
    await migrateFromFdset(qmp);
    await qmp.execute('cont');
    const agent = await connectRetry(() => AgentClient.connect(join(dir, 'vessel-agent.sock'), { timeoutMs: 1000 }));
    rawRestore.push(performance.now() - t);
    agent.close();
    qmp.close();
    child.kill('SIGKILL');
    rmSync(dir, { recursive: true, force: true });
  }

  // Idle forks: resident and private memory per QEMU.
  await sleep(3000);
  const rss: number[] = [];
  const priv: number[] = [];
  for (const rt of (await svc.call('GET', '/v1/runtimes?limit=1000')).body.data) {
    const m = memoryOf(Number(readFileSync(join(svc.dataDir, 'runtimes', rt.id, 'qemu.pid'), 'utf8')));
    rss.push(m.rss);
    priv.push(m.private);
  }
  // The agent's own memory inside an idle fork (the bar: at most 1 MiB), read by a command
  // it runs: anonymous memory is its heap and stack; its binary's clean pages are page cache.
  const agentMem = (await svc.call('POST', '/v1/runtimes/f0/exec', { command: "grep -E '^(Rss|Anonymous|Private_Dirty):' /proc/$(pidof vessel-agent)/smaps_rollup" })).body.data.stdout as string;
  const agentKb = (k: string) => Number(new RegExp(`^${k}:\\s+(\\d+)`, 'm').exec(agentMem)?.[1] ?? NaN);

  // Checkpoint verification: the service's digest (a hash list that skips hashing zero chunks)
  // against plain SHA-256 of the same files, both in this process.
  const cpFiles = [join(cpDir, 'state'), join(cpDir, 'ram'), ...manifest.chain.map((l) => join(svc.dataDir, 'layers', `${l}.qcow2`))];
  const cpBytes = cpFiles.reduce((n, f) => n + statSync(f).size, 0);
  const verifyMs: number[] = [];
  const sha256Ms: number[] = [];
  for (let i = 0; i < 3; i++) {
    let t = performance.now();
    for (const file of cpFiles) await digestFile(file);
    verifyMs.push(performance.now() - t);
    t = performance.now();
    for (const file of cpFiles) await plainSha256(file);
    sha256Ms.push(performance.now() - t);
  }

  // Memory requests: an idle fork shrunk to 128 MiB (moved onto its own memory first), a fork
  // that filled 200 MiB and then shrank, and a create with a smaller request (its own template).
  const rssOf = (runtimeId: string) => memoryOf(Number(readFileSync(join(svc.dataDir, 'runtimes', runtimeId, 'qemu.pid'), 'utf8'))).rss;
  const shrink = async (name: string) => {
    const id = (await svc.call('GET', `/v1/runtimes/${name}`)).body.data.id;
    const before = rssOf(id);
    const t = performance.now();
    const r = await svc.call('PATCH', `/v1/runtimes/${name}`, { resources: { requests: { memory_mib: 128 } } });
    if (r.status !== 200) throw new Error(JSON.stringify(r.body));
    const ms = performance.now() - t;
    await sleep(5000);
    return { before, after: rssOf(id), ms };
  };
  const idleShrink = await shrink('f1');
  await svc.call('POST', '/v1/runtimes/f2/exec', { command: 'head -c 200M /dev/urandom > /dev/shm/fill && rm /dev/shm/fill' });
  const filledShrink = await shrink('f2');
  const requestCreate: number[] = [];
  for (let i = 0; i < 4; i++) {
    const t = performance.now();
    const r = await svc.call('POST', '/v1/runtimes', { display_name: `r${i}`, resources: { requests: { memory_mib: 192 } } });
    if (r.status !== 201) throw new Error(JSON.stringify(r.body));
    // The first one makes the template of that shape.
    if (i > 0) requestCreate.push(performance.now() - t);
  }
  await sleep(3000);
  const requestRss = rssOf((await svc.call('GET', '/v1/runtimes/r3')).body.data.id);

  // Checkpoint through the API, then a raw migrate of the same VM with the service stopped.
  const apiCkpt: number[] = [];
  for (let i = 0; i < 3; i++) {
    const t = performance.now();
    const r = await svc.call('POST', '/v1/runtimes/f0/checkpoints', {});
    for (;;) {
      const cp = (await svc.call('GET', `/v1/checkpoints/${r.body.data.id}`)).body.data;
      if (cp.state === 'ready') break;
      if (cp.state === 'failed') throw new Error(cp.state_message);
      await sleep(5);
    }
    apiCkpt.push(performance.now() - t);
  }
  const f0 = (await svc.call('GET', '/v1/runtimes/f0')).body.data;
  await svc.stop();
  const rtDir = join(svc.dataDir, 'runtimes', f0.id);
  const qmp = await QmpClient.connect(join(rtDir, 'qmp.sock'));
  // Raw: stop, migrate to a file, cont. The second baseline also has the stream on disk before
  // the VM goes on, which a durable checkpoint must pay whatever its implementation.
  const rawState = join(svc.dataDir, 'raw-state');
  const rawCapture = async (flushed: boolean): Promise<number[]> => {
    const times: number[] = [];
    for (let i = 0; i < 3; i++) {
      const t = performance.now();
      rmSync(rawState, { force: true });
      await qmp.execute('stop');
      await migrateToFile(qmp, rawState);
      if (flushed) await flushFiles([rawState]);
      await qmp.execute('cont');
      times.push(performance.now() - t);
    }
    return times;
  };
  const rawCkpt = await rawCapture(false);
  const streamBytes = statSync(rawState).size;
  const rawDurableCkpt = await rawCapture(true);
  qmp.close();
  await svc.start();

  const f = (x: number) => `${x.toFixed(0)} ms`;
  console.log(`create -> running, n=${N} (TCG):`);
  console.log(`  raw QEMU -incoming restore:  p50 ${f(pct(rawRestore, 50))}, p95 ${f(pct(rawRestore, 95))}`);
  const ratio = (xs: number[]) => `p50 ${(pct(xs, 50) / pct(rawRestore, 50)).toFixed(2)}x, p95 ${(pct(xs, 95) / pct(rawRestore, 95)).toFixed(2)}x`;
  console.log(`  vessel API create (warm pool): p50 ${f(pct(apiCreate, 50))}, p95 ${f(pct(apiCreate, 95))}; ratio ${ratio(apiCreate)} (goal <= 1.2x)`);
  console.log(`  vessel API create (restore):   p50 ${f(pct(coldCreate, 50))}, p95 ${f(pct(coldCreate, 95))}; ratio ${ratio(coldCreate)}`);
  console.log(`checkpoint of a running fork (memory stream ${(streamBytes / 1048576).toFixed(0)} MiB), n=3:`);
  console.log(`  raw QMP stop+migrate+cont:   p50 ${f(pct(rawCkpt, 50))}`);
  console.log(`  raw, stream flushed to disk:  p50 ${f(pct(rawDurableCkpt, 50))}`);
  console.log(`  vessel API (to ready):       p50 ${f(pct(apiCkpt, 50))}`);
  console.log(`  ratio: ${(pct(apiCkpt, 50) / pct(rawCkpt, 50)).toFixed(2)}x against raw (goal <= 1.2x), ${(pct(apiCkpt, 50) / pct(rawDurableCkpt, 50)).toFixed(2)}x against raw flushed`);
  console.log(`idle 512 MiB forks, n=${rss.length}: RSS p50 ${pct(rss, 50).toFixed(0)} MiB, private p50 ${pct(priv, 50).toFixed(0)} MiB`);
  console.log(`  vessel-agent in a fork: RSS ${agentKb('Rss')} kB, anonymous ${agentKb('Anonymous')} kB, private dirty ${agentKb('Private_Dirty')} kB (goal <= 1 MiB)`);
  console.log(`verifying the system checkpoint (${(cpBytes / 1048576).toFixed(0)} MiB in ${cpFiles.length} files), n=3:`);
  console.log(`  plain SHA-256:  p50 ${f(pct(sha256Ms, 50))}`);
  console.log(`  vessel digest:  p50 ${f(pct(verifyMs, 50))}; ratio ${(pct(verifyMs, 50) / pct(sha256Ms, 50)).toFixed(2)}x`);
  console.log(`memory requests:`);
  console.log(`  idle fork shrunk to 128 MiB: PATCH ${f(idleShrink.ms)} (moved onto its own memory), RSS ${idleShrink.before.toFixed(0)} -> ${idleShrink.after.toFixed(0)} MiB`);
  console.log(`  fork that wrote 200 MiB, shrunk to 128 MiB: PATCH ${f(filledShrink.ms)}, RSS ${filledShrink.before.toFixed(0)} -> ${filledShrink.after.toFixed(0)} MiB`);
  console.log(`  create with requests 192 MiB (template made for it), n=${requestCreate.length}: p50 ${f(pct(requestCreate, 50))}; RSS ${requestRss.toFixed(0)} MiB`);

  // Density (opt-in, slow): idle forks until the service answers unavailable, within bounds.
  const maxForks = Number(process.env.BENCH_DENSITY ?? 0);
  if (maxForks > 0) {
    const deadline = Date.now() + Number(process.env.BENCH_DENSITY_SECONDS ?? 600) * 1000;
    let held = (await svc.call('GET', '/v1/runtimes?limit=1000')).body.data.length;
    let stop = 'count limit';
    const memBefore = Number(/^MemAvailable:\s+(\d+)/m.exec(readFileSync('/proc/meminfo', 'utf8'))![1]) / 1024;
    while (held < maxForks) {
      if (Date.now() > deadline) {
        stop = 'time limit';
        break;
      }
      const r = await svc.call('POST', '/v1/runtimes', { display_name: `d${held}` });
      if (r.status === 503) {
        stop = `unavailable: ${r.body.error.message}`;
        break;
      }
      if (r.status !== 201) {
        stop = `error ${r.status}: ${JSON.stringify(r.body)}`;
        break;
      }
      held++;
      if (held % 25 === 0) console.log(`  ${held} forks, MemAvailable ${(Number(/^MemAvailable:\s+(\d+)/m.exec(readFileSync('/proc/meminfo', 'utf8'))![1]) / 1024).toFixed(0)} MiB`);
    }
    const memAfter = Number(/^MemAvailable:\s+(\d+)/m.exec(readFileSync('/proc/meminfo', 'utf8'))![1]) / 1024;
    console.log(`density: ${held} idle 512 MiB forks held (stopped by ${stop}); host memory used by them ${((memBefore - memAfter) / Math.max(1, held - rss.length)).toFixed(0)} MiB per fork`);
  }
} finally {
  rmSync(join(svc.dataDir, 'raw-state'), { force: true });
  await svc.destroy();
}
