/**
 * VM benchmarks in one invocation:
 * - create latency through the API (a fork of the system checkpoint) and cold boot latency
 *   (start after stop), p50/p95;
 * - exec round trip of /bin/true through the API against the agent's own round trip on the same
 *   VM, straight on its channel socket (the service is stopped meanwhile; it adopts the VM
 *   again): a buffered run of /bin/true, and a PING (the channel alone);
 * - file write/read MiB/s through the API against the agent's file requests on the raw channel;
 * - time to the first byte of a streamed exec (SSE) against a raw SPAWN's first OUTPUT;
 * - an idle VM's QEMU CPU and memory with the service attached against the same VM with nothing
 *   connected (what holding the agent channel costs).
 */
import { randomBytes } from 'node:crypto';
import { readFileSync } from 'node:fs';
import { get } from 'node:http';
import { join } from 'node:path';
import { Service } from '../test/support/service.js';
import { AgentClient } from '../src/vm/agent/agent-client.js';
import { vmPaths } from '../src/vm/qemu-vm.js';
import { GUEST_BASE_ENV } from '../src/vm/guest-exec.js';

/** The raw runs get the environment the API gives every command: its LANG alone costs an exec a locale load. */
const GUEST_ENV = Object.entries(GUEST_BASE_ENV).map(([k, v]) => `${k}=${v}`);

const CREATES = Number(process.env.BENCH_CREATES ?? 3);
const EXECS = Number(process.env.BENCH_EXECS ?? 40);
const FILE_MIB = Number(process.env.BENCH_FILE_MIB ?? 32);
/** Each file figure is the median of this many transfers: one 32 MiB transfer is a noisy sample. */
const FILE_ROUNDS = Number(process.env.BENCH_FILE_ROUNDS ?? 4);
/**
 * Round trips not counted, on each side: the API's come right after a cold boot, when QEMU's
 * translation cache is cold and the guest still settles, and the raw ones after all of the API's.
 */
const WARMUP = Number(process.env.BENCH_WARMUP ?? 20);

const IDLE_SECS = Number(process.env.BENCH_IDLE_SECS ?? 10);
const CLOCK_TICKS = 100; // USER_HZ on Linux

/** CPU seconds (user + system) and resident MiB of a process, from /proc. */
function usage(pid: number): { cpu: number; rssMib: number } {
  const stat = readFileSync(`/proc/${pid}/stat`, 'utf8');
  const fields = stat.slice(stat.lastIndexOf(')') + 2).split(' ');
  const rss = Number(/^VmRSS:\s+(\d+)/m.exec(readFileSync(`/proc/${pid}/status`, 'utf8'))?.[1] ?? NaN);
  return { cpu: (Number(fields[11]) + Number(fields[12])) / CLOCK_TICKS, rssMib: rss / 1024 };
}

/** The VM's QEMU over IDLE_SECS of doing nothing: CPU as a share of one core, and its RSS. */
async function idleCost(pid: number): Promise<{ cpuPct: number; rssMib: number }> {
  const a = usage(pid);
  await new Promise((r) => setTimeout(r, IDLE_SECS * 1000));
  const b = usage(pid);
  return { cpuPct: ((b.cpu - a.cpu) / IDLE_SECS) * 100, rssMib: b.rssMib };
}

/** Milliseconds from sending a streamed exec to its first stdout event. */
async function apiFirstByte(url: string, token: string): Promise<number> {
  const t = performance.now();
  const res = await fetch(`${url}/v1/runtimes/bench-0/exec`, {
    method: 'POST',
    headers: { authorization: `Bearer ${token}`, 'content-type': 'application/json', accept: 'text/event-stream' },
    body: JSON.stringify({ command: '/bin/echo', args: ['x'] }),
  });
  let seen = '';
  let first = NaN;
  for await (const chunk of res.body as unknown as AsyncIterable<Uint8Array>) {
    seen += Buffer.from(chunk).toString('utf8');
    if (Number.isNaN(first) && seen.includes('event: stdout')) first = performance.now() - t;
  }
  if (Number.isNaN(first) || !seen.includes('event: exit')) throw new Error(`streamed exec: ${seen}`);
  return first;
}

/**
 * A GET's body through node:http, as curl would take it: fetch's web streams cost the client more
 * CPU per byte than the service spends, which on 2 cores shows up as the service's read rate.
 */
function download(url: string, headers: Record<string, string>): Promise<Buffer> {
  return new Promise((resolve, reject) => {
    get(url, { headers }, (res) => {
      const chunks: Buffer[] = [];
      res.on('data', (c: Buffer) => chunks.push(c));
      res.on('end', () => (res.statusCode === 200 ? resolve(Buffer.concat(chunks)) : reject(new Error(`GET ${res.statusCode}: ${Buffer.concat(chunks).toString()}`))));
      res.on('error', reject);
    }).on('error', reject);
  });
}

const rounds = (xs: number[]) => xs.map((x) => x.toFixed(1)).join(', ');
const pct = (xs: number[], p: number) => [...xs].sort((a, b) => a - b)[Math.min(xs.length - 1, Math.floor((p / 100) * xs.length))]!;
const ms = (x: number) => `${x.toFixed(1)} ms`;

const svc = new Service();
await svc.start();
try {
  const creates: number[] = [];
  for (let i = 0; i < CREATES; i++) {
    const t = performance.now();
    const r = await svc.call('POST', '/v1/runtimes', { display_name: `bench-${i}` });
    if (r.status !== 201) throw new Error(JSON.stringify(r.body));
    creates.push(performance.now() - t);
    if (i > 0) await svc.call('DELETE', `/v1/runtimes/bench-${i}`);
  }
  const rt = (await svc.call('GET', '/v1/runtimes/bench-0')).body.data;

  // A cold boot of the same disk: stop, then start.
  const coldBoots: number[] = [];
  for (let i = 0; i < Math.max(2, CREATES - 1); i++) {
    await svc.call('POST', '/v1/runtimes/bench-0/stop');
    const t0 = performance.now();
    const r = await svc.call('POST', '/v1/runtimes/bench-0/start');
    if (r.status !== 200) throw new Error(JSON.stringify(r.body));
    coldBoots.push(performance.now() - t0);
  }

  const apiExec: number[] = [];
  /** The driver's part of each: the result's duration_ms, measured in the service around the agent's run. */
  const apiDriver: number[] = [];
  for (let i = 0; i < EXECS + WARMUP; i++) {
    const t = performance.now();
    const r = await svc.call('POST', '/v1/runtimes/bench-0/exec', { command: '/bin/true', args: ['--'] });
    if (r.status !== 200) throw new Error(JSON.stringify(r.body));
    if (i >= WARMUP) apiExec.push(performance.now() - t);
    if (i >= WARMUP) apiDriver.push(r.body.data.duration_ms as number);
  }

  const apiFirst: number[] = [];
  for (let i = 0; i < EXECS + WARMUP; i++) {
    const first = await apiFirstByte(svc.url, svc.token);
    if (i >= WARMUP) apiFirst.push(first);
  }
  const qemuPid = Number(readFileSync(vmPaths(join(svc.dataDir, 'runtimes', rt.id)).pidFile, 'utf8'));
  const idleAttached = await idleCost(qemuPid);

  const data = randomBytes(FILE_MIB * 1024 * 1024);
  const headers = { authorization: `Bearer ${svc.token}` };
  const apiWrites: number[] = [];
  const apiReads: number[] = [];
  /** API file rounds run before and after the raw ones: a VM's rate drifts, and this splits the drift. */
  const apiFileRounds = async (n: number) => {
    for (let round = 0; round < n; round++) {
      let t = performance.now();
      const put = await fetch(`${svc.url}/v1/runtimes/bench-0/files?path=/root/bench.bin`, { method: 'PUT', headers: { ...headers, 'content-type': 'application/octet-stream' }, body: new Uint8Array(data) });
      if (put.status !== 200) throw new Error(await put.text());
      apiWrites.push(FILE_MIB / ((performance.now() - t) / 1000));
      t = performance.now();
      const got = await download(`${svc.url}/v1/runtimes/bench-0/files?path=/root/bench.bin`, headers);
      apiReads.push(FILE_MIB / ((performance.now() - t) / 1000));
      if (!got.equals(data)) throw new Error('API read back different bytes');
    }
  };
  await apiFileRounds(Math.ceil(FILE_ROUNDS / 2));

  // Raw phase: the service lets go of the agent's socket; the VM keeps running.
  await svc.stop();
  const idleDetached = await idleCost(qemuPid);
  const agent = await AgentClient.connect(vmPaths(join(svc.dataDir, 'runtimes', rt.id)).agentSocket, { timeoutMs: 5000 });
  const rawExec: number[] = [];
  const rawPing: number[] = [];
  for (let i = 0; i < EXECS + WARMUP; i++) {
    const t0 = performance.now();
    const proc = agent.spawn({ argv: ['/bin/true', '--'], env: GUEST_ENV, hold: true, forgetOnExit: true });
    for await (const _ of proc);
    const r = await proc.done;
    if (r?.code !== 0) throw new Error(`raw /bin/true exited with ${r?.code}`);
    if (i >= WARMUP) rawExec.push(performance.now() - t0);
    const t1 = performance.now();
    await agent.ping();
    if (i >= WARMUP) rawPing.push(performance.now() - t1);
  }
  const rawFirst: number[] = [];
  for (let i = 0; i < EXECS + WARMUP; i++) {
    const t0 = performance.now();
    const proc = agent.spawn({ argv: ['/bin/echo', 'x'], env: GUEST_ENV, hold: true, forgetOnExit: true });
    let first = NaN;
    for await (const _chunk of proc) if (Number.isNaN(first)) first = performance.now() - t0;
    if (i >= WARMUP) rawFirst.push(first);
  }
  const rawWrites: number[] = [];
  const rawReads: number[] = [];
  for (let round = 0; round < FILE_ROUNDS; round++) {
    let t = performance.now();
    await agent.writeFile('/root/raw.bin', data);
    rawWrites.push(FILE_MIB / ((performance.now() - t) / 1000));
    t = performance.now();
    let rawBytes = 0;
    for await (const chunk of (await agent.readFile('/root/raw.bin')).stream) rawBytes += (chunk as Buffer).length;
    rawReads.push(FILE_MIB / ((performance.now() - t) / 1000));
    if (rawBytes !== data.length) throw new Error(`raw read ${rawBytes} bytes of ${data.length}`);
  }
  const rawWrite = pct(rawWrites, 50);
  const rawRead = pct(rawReads, 50);
  agent.close();
  await svc.start();
  await apiFileRounds(Math.floor(FILE_ROUNDS / 2));
  const apiWrite = pct(apiWrites, 50);
  const apiRead = pct(apiReads, 50);

  console.log(`create -> running (API fork of the system checkpoint; the first also builds it), n=${CREATES}: p50 ${ms(pct(creates, 50))}, max ${ms(Math.max(...creates))}`);
  console.log(`cold boot (API start after stop), n=${coldBoots.length}: p50 ${ms(pct(coldBoots, 50))}, p95 ${ms(pct(coldBoots, 95))}`);
  console.log(`exec /bin/true round trip (n=${EXECS}):`);
  console.log(`  raw agent PING:  p50 ${ms(pct(rawPing, 50))}, p99 ${ms(pct(rawPing, 99))} (the channel alone)`);
  console.log(`  raw agent run:   p50 ${ms(pct(rawExec, 50))}, p99 ${ms(pct(rawExec, 99))}`);
  console.log(`  vessel API:      p50 ${ms(pct(apiExec, 50))}, p99 ${ms(pct(apiExec, 99))} (of which in the driver: p50 ${ms(pct(apiDriver, 50))})`);
  console.log(`  ratio API/raw:   p50 ${(pct(apiExec, 50) / pct(rawExec, 50)).toFixed(2)}x, p99 ${(pct(apiExec, 99) / pct(rawExec, 99)).toFixed(2)}x (goal <= 1.2x)`);
  console.log(`files, ${FILE_MIB} MiB, median of ${FILE_ROUNDS}, API rounds split around the raw ones (raw: the agent's WRITE_FILE/READ_FILE on the channel socket, fsync'd like the API):`);
  console.log(`  write: API ${apiWrite.toFixed(1)} MiB/s, raw ${rawWrite.toFixed(1)} MiB/s, ratio ${(apiWrite / rawWrite).toFixed(2)}x (goal >= 0.77x: within 1.3x; rounds ${rounds(apiWrites)} / ${rounds(rawWrites)})`);
  console.log(`  read:  API ${apiRead.toFixed(1)} MiB/s, raw ${rawRead.toFixed(1)} MiB/s, ratio ${(apiRead / rawRead).toFixed(2)}x (goal >= 0.77x: within 1.3x; rounds ${rounds(apiReads)} / ${rounds(rawReads)})`);
  console.log(`streamed exec, time to the first stdout byte (n=${EXECS}):`);
  console.log(`  raw agent SPAWN: p50 ${ms(pct(rawFirst, 50))}, p99 ${ms(pct(rawFirst, 99))}`);
  console.log(`  vessel API SSE:  p50 ${ms(pct(apiFirst, 50))}, p99 ${ms(pct(apiFirst, 99))}, ratio p50 ${(pct(apiFirst, 50) / pct(rawFirst, 50)).toFixed(2)}x`);
  console.log(`idle VM over ${IDLE_SECS} s (QEMU process; baseline: the same VM with nothing connected):`);
  console.log(`  service attached: CPU ${idleAttached.cpuPct.toFixed(2)}% of a core, RSS ${idleAttached.rssMib.toFixed(0)} MiB`);
  console.log(`  nothing attached: CPU ${idleDetached.cpuPct.toFixed(2)}% of a core, RSS ${idleDetached.rssMib.toFixed(0)} MiB`);
} finally {
  await svc.destroy();
}
