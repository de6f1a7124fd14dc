/**
 * VM benchmarks in one invocation:
 * - create latency through the API (a fork of the system checkpoint) and cold boot latency
 *   (start after stop), p50/p95;
 * - exec round trip of /bin/true through the API against the agent's own round trip on the same
 *   VM, straight on its channel socket (the service is stopped meanwhile; it adopts the VM
 *   again): a buffered run of /bin/true, and a PING (the channel alone);
 * - file write/read MiB/s through the API against the agent's file requests on the raw channel.
 */
import { randomBytes } from 'node:crypto';
import { join } from 'node:path';
import { Service } from '../test/support/service.js';
import { AgentClient } from '../src/vm/agent/agent-client.js';
import { vmPaths } from '../src/vm/qemu-vm.js';

const CREATES = Number(process.env.BENCH_CREATES ?? 3);
const EXECS = Number(process.env.BENCH_EXECS ?? 40);
const FILE_MIB = Number(process.env.BENCH_FILE_MIB ?? 32);
/**
 * Round trips not counted, on each side: the API's come right after a cold boot, when QEMU's
 * translation cache is cold and the guest still settles, and the raw ones after all of the API's.
 */
const WARMUP = Number(process.env.BENCH_WARMUP ?? 20);

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

  const data = randomBytes(FILE_MIB * 1024 * 1024);
  const headers = { authorization: `Bearer ${svc.token}` };
  let t = performance.now();
  const put = await fetch(`${svc.url}/v1/runtimes/bench-0/files?path=/root/bench.bin`, { method: 'PUT', headers: { ...headers, 'content-type': 'application/octet-stream' }, body: new Uint8Array(data) });
  if (put.status !== 200) throw new Error(await put.text());
  const apiWrite = FILE_MIB / ((performance.now() - t) / 1000);
  t = performance.now();
  const got = Buffer.from(await (await fetch(`${svc.url}/v1/runtimes/bench-0/files?path=/root/bench.bin`, { headers })).arrayBuffer());
  const apiRead = FILE_MIB / ((performance.now() - t) / 1000);
  if (!got.equals(data)) throw new Error('API read back different bytes');

  // Raw phase: the service lets go of the agent's socket; the VM keeps running.
  await svc.stop();
  const agent = await AgentClient.connect(vmPaths(join(svc.dataDir, 'runtimes', rt.id)).agentSocket, { timeoutMs: 5000 });
  const rawExec: number[] = [];
  const rawPing: number[] = [];
  for (let i = 0; i < EXECS + WARMUP; i++) {
    const t0 = performance.now();
    const r = await agent.run({ argv: ['/bin/true', '--'], env: ['PATH=/usr/bin:/bin'] });
    if (r.exitCode !== 0) throw new Error(`raw /bin/true exited with ${r.exitCode}`);
    if (i >= WARMUP) rawExec.push(performance.now() - t0);
    const t1 = performance.now();
    await agent.ping();
    if (i >= WARMUP) rawPing.push(performance.now() - t1);
  }
  t = performance.now();
  await agent.writeFile('/root/raw.bin', data);
  const rawWrite = FILE_MIB / ((performance.now() - t) / 1000);
  t = performance.now();
  let rawBytes = 0;
  for await (const chunk of (await agent.readFile('/root/raw.bin')).stream) rawBytes += (chunk as Buffer).length;
  const rawRead = FILE_MIB / ((performance.now() - t) / 1000);
  if (rawBytes !== data.length) throw new Error(`raw read ${rawBytes} bytes of ${data.length}`);
  agent.close();
  await svc.start();

  console.log(`create -> running (API fork of the system checkpoint; the first also builds it), n=${CREATES}: p50 ${ms(pct(creates, 50))}, max ${ms(Math.max(...creates))}`);
  console.log(`cold boot (API start after stop), n=${coldBoots.length}: p50 ${ms(pct(coldBoots, 50))}, p95 ${ms(pct(coldBoots, 95))}`);
  console.log(`exec /bin/true round trip (n=${EXECS}):`);
  console.log(`  raw agent PING:  p50 ${ms(pct(rawPing, 50))}, p99 ${ms(pct(rawPing, 99))} (the channel alone)`);
  console.log(`  raw agent run:   p50 ${ms(pct(rawExec, 50))}, p99 ${ms(pct(rawExec, 99))}`);
  console.log(`  vessel API:      p50 ${ms(pct(apiExec, 50))}, p99 ${ms(pct(apiExec, 99))} (of which in the driver: p50 ${ms(pct(apiDriver, 50))})`);
  console.log(`  ratio API/raw:   p50 ${(pct(apiExec, 50) / pct(rawExec, 50)).toFixed(2)}x, p99 ${(pct(apiExec, 99) / pct(rawExec, 99)).toFixed(2)}x (goal <= 1.2x)`);
  console.log(`files, ${FILE_MIB} MiB (raw: the agent's WRITE_FILE/READ_FILE on the channel socket, fsync'd like the API):`);
  console.log(`  write: API ${apiWrite.toFixed(1)} MiB/s, raw ${rawWrite.toFixed(1)} MiB/s, ratio ${(apiWrite / rawWrite).toFixed(2)}x (goal >= 0.77x: within 1.3x)`);
  console.log(`  read:  API ${apiRead.toFixed(1)} MiB/s, raw ${rawRead.toFixed(1)} MiB/s, ratio ${(apiRead / rawRead).toFixed(2)}x (goal >= 0.77x: within 1.3x)`);
} finally {
  await svc.destroy();
}
