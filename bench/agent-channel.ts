/**
 * vessel-agent's channel on the host, no VM: the agent connects to a Unix socket we listen on
 * (its test mode), so this measures the protocol, the agent and the client, not virtio-serial.
 * - request round trip (PING) and a buffered /bin/true (spawn to exit), p50/p99;
 * - process output MiB/s (head -c N /dev/zero through OUTPUT frames and credit), against the
 *   same bytes read by Node straight from a pipe (the baseline: what Node itself can take);
 * - file write MiB/s (fsync'd) and read MiB/s, in a temporary directory;
 * - the same through the GuestAgent port as the service uses it, in two ways side by side: the
 *   port's code over a client in this process (the service before the agent's process), and the
 *   agent's process (src/vm/agent-part.ts: one more hop, over its link), both behind a QEMU-like
 *   relay, and the ratio of the two (needs root: the process drops to its own user).
 *
 * Knobs: BENCH_AGENT_MIB (256), BENCH_AGENT_PINGS (2000), BENCH_AGENT_EXECS (200).
 */
import { spawn } from 'node:child_process';
import { mkdtempSync, rmSync } from 'node:fs';
import { createServer, type Socket } from 'node:net';
import { tmpdir } from 'node:os';
import { join } from 'node:path';
import { Readable } from 'node:stream';
import type { GuestAgent } from '../src/core/ports.js';
import type { ProcessSpec } from '../src/core/types.js';
import { AgentPart } from '../src/vm/agent-part.js';
import { AgentClient } from '../src/vm/agent/agent-client.js';
import { readGuestFile, writeGuestFile } from '../src/vm/guest-files.js';
import { spawnProcess } from '../src/vm/guest-processes.js';
import { statGuestPath } from '../src/vm/guest-directories.js';
import { RemoteGuestAgent } from '../src/vm/remote-guest-agent.js';
import { RelayedAgent, buildAgent } from '../test/support/agent-harness.js';

const MIB = 1024 * 1024;
const SIZE_MIB = Number(process.env.BENCH_AGENT_MIB ?? 256);
const PINGS = Number(process.env.BENCH_AGENT_PINGS ?? 2000);
const EXECS = Number(process.env.BENCH_AGENT_EXECS ?? 200);
const ENV = ['PATH=/usr/local/bin:/usr/bin:/bin'];

const pct = (xs: number[], p: number) => [...xs].sort((a, b) => a - b)[Math.min(xs.length - 1, Math.floor((p / 100) * xs.length))]!;
const rate = (mib: number, ms: number) => `${((mib / ms) * 1000).toFixed(0)} MiB/s`;

const build = buildAgent();
if ('skip' in build) {
  console.log(`skipped: ${build.skip}`);
  process.exit(0);
}
const dir = mkdtempSync(join(tmpdir(), 'vessel-agent-bench-'));
const path = join(dir, 'host.sock');
const accepted = new Promise<Socket>((resolve) => {
  const server = createServer((s) => {
    server.close();
    resolve(s);
  });
  server.listen(path);
});
const agent = spawn(build.binary, ['--channel', path], { stdio: ['ignore', 'ignore', 'inherit'] });
try {
  const client = await AgentClient.over(await accepted);

  const pings: number[] = [];
  for (let i = 0; i < PINGS; i++) {
    const t = performance.now();
    await client.ping();
    pings.push(performance.now() - t);
  }
  console.log(`ping round trip          p50 ${pct(pings, 50).toFixed(3)} ms   p99 ${pct(pings, 99).toFixed(3)} ms   (${PINGS})`);

  const execs: number[] = [];
  for (let i = 0; i < EXECS; i++) {
    const t = performance.now();
    const proc = client.spawn({ argv: ['/bin/true'], env: ENV, hold: true, forgetOnExit: true });
    for await (const _ of proc);
    await proc.done;
    execs.push(performance.now() - t);
  }
  console.log(`run /bin/true            p50 ${pct(execs, 50).toFixed(3)} ms   p99 ${pct(execs, 99).toFixed(3)} ms   (${EXECS})`);

  const bytes = String(SIZE_MIB * MIB);
  let t = performance.now();
  let got = 0;
  for await (const c of client.spawn({ argv: ['head', '-c', bytes, '/dev/zero'], env: ENV, hold: true, window: 4 * MIB })) got += c.data.length;
  const outputMs = performance.now() - t;
  if (got !== SIZE_MIB * MIB) throw new Error(`got ${got} bytes of output`);
  t = performance.now();
  const pipe = spawn('head', ['-c', bytes, '/dev/zero'], { stdio: ['ignore', 'pipe', 'ignore'] });
  got = 0;
  for await (const c of pipe.stdout) got += (c as Buffer).length;
  const pipeMs = performance.now() - t;
  console.log(`process output           ${rate(SIZE_MIB, outputMs)}   (Node reading a pipe: ${rate(SIZE_MIB, pipeMs)}, ratio ${(pipeMs / outputMs).toFixed(2)})`);

  const chunk = Buffer.alloc(MIB, 0x5a);
  async function* source() {
    for (let i = 0; i < SIZE_MIB; i++) yield chunk;
  }
  t = performance.now();
  await client.writeFile(join(dir, 'file'), source());
  const writeMs = performance.now() - t;
  t = performance.now();
  got = 0;
  for await (const c of (await client.readFile(join(dir, 'file'), { window: 4 * MIB })).stream) got += (c as Buffer).length;
  const readMs = performance.now() - t;
  console.log(`file write (fsync'd)     ${rate(SIZE_MIB, writeMs)}`);
  console.log(`file read                ${rate(SIZE_MIB, readMs)}   (${SIZE_MIB} MiB)`);
  client.close();
  if (process.getuid?.() === 0) await throughThePort(build.binary);
  else console.log('the GuestAgent port through the agent process: skipped (needs root)');
} finally {
  agent.kill('SIGKILL');
  rmSync(dir, { recursive: true, force: true });
}

type PortPath = Pick<GuestAgent, 'statPath' | 'spawnProcess' | 'writeFile' | 'readFile'>;

/** One path's numbers: request p50 (a stat), /bin/true p50, output, write and read MiB/s. */
async function measure(port: PortPath): Promise<number[]> {
  const spec = (command: string): ProcessSpec => ({ command, args: [], cwd: null, env: {}, user: null, pty: null, stdin: false, ringBytes: 1 << 20, hold: true, forgetOnExit: true });
  const stats: number[] = [];
  for (let i = 0; i < PINGS; i++) {
    const t = performance.now();
    await port.statPath('/', true);
    stats.push(performance.now() - t);
  }
  const runs: number[] = [];
  for (let i = 0; i < EXECS; i++) {
    const t = performance.now();
    const ps = await port.spawnProcess(spec('/bin/true'));
    for await (const _ of ps);
    await ps.done;
    runs.push(performance.now() - t);
  }
  let t = performance.now();
  let got = 0;
  const ps = await port.spawnProcess(spec(`head -c ${SIZE_MIB * MIB} /dev/zero`));
  for await (const c of ps) got += c.data.length;
  const outputMs = performance.now() - t;
  if (got !== SIZE_MIB * MIB) throw new Error(`got ${got} bytes of output`);
  const chunk = Buffer.alloc(MIB, 0x5a);
  const file = join(dir, 'port-file');
  t = performance.now();
  await port.writeFile(file, Readable.from((function* () { for (let i = 0; i < SIZE_MIB; i++) yield chunk; })()), SIZE_MIB * MIB);
  const writeMs = performance.now() - t;
  t = performance.now();
  got = 0;
  for await (const c of await port.readFile(file)) got += (c as Buffer).length;
  const readMs = performance.now() - t;
  return [pct(stats, 50), pct(runs, 50), (SIZE_MIB / outputMs) * 1000, (SIZE_MIB / writeMs) * 1000, (SIZE_MIB / readMs) * 1000];
}

async function throughThePort(binary: string): Promise<void> {
  const relay = await RelayedAgent.start(binary, dir);
  const part = new AgentPart({ logLevel: 'warn', log: { info: () => undefined, warn: () => undefined, error: () => undefined } });
  try {
    const client = await AgentClient.connect(relay.path);
    const agent = async () => client;
    const inProcess: PortPath = {
      statPath: (path, follow) => statGuestPath(agent, path, follow),
      spawnProcess: (spec) => spawnProcess(agent, spec),
      writeFile: (path, body, max) => writeGuestFile(agent, path, body, max),
      readFile: (path) => readGuestFile(agent, path),
    };
    const before = await measure(inProcess);
    client.close();
    await part.start();
    const after = await measure(new RemoteGuestAgent(() => part.runtime('bench', relay.path, () => false)));
    const names = ['stat round trip p50 (ms)', 'run /bin/true p50 (ms)', 'process output (MiB/s)', "file write, fsync'd (MiB/s)", 'file read (MiB/s)'];
    console.log('\nthe GuestAgent port, in the service (before) and through the agent process (after); speed is after against before (1.00: the hop costs nothing):');
    names.forEach((name, i) => {
      const ratio = i < 2 ? before[i]! / after[i]! : after[i]! / before[i]!;
      console.log(`  ${name.padEnd(30)} ${before[i]!.toFixed(i < 2 ? 3 : 0).padStart(8)}  ${after[i]!.toFixed(i < 2 ? 3 : 0).padStart(8)}   speed ${ratio.toFixed(2)}`);
    });
  } finally {
    await part.close();
    await relay.stop();
  }
}
