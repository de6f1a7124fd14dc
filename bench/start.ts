/**
 * Start to healthy: from the process's start until GET /healthz answers 200, on a warm data
 * directory (the guest image built, the accelerator probed), in one invocation, three ways:
 * - before: the old `npm start` command, which compiled on every start
 *   (`tsc -p . && node dist/scripts/build-console.js && node dist/src/cli/main.js serve`);
 * - rebuild: `npm start`'s launcher (dist/scripts/start.js) after a source changed, so it runs
 *   `npm run build:service` first (the service, and the console bundled);
 * - no rebuild: the launcher with dist/ newer than every source, the usual start.
 * The rounds interleave the three so a noisy machine weighs on each alike; medians are reported,
 * and their ratios. npm's own start-up is left out of all three (each runs its command itself).
 * The warm pool is off (VESSEL_WARM_POOL=0): it boots VMs after the service is healthy, and on
 * a shared machine they would only slow the next round.
 *
 *   VESSEL_IMAGE_DIR=/path/to/images npm run bench:start     (BENCH_ROUNDS, 3)
 */
import { spawn } from 'node:child_process';
import { once } from 'node:events';
import { mkdtempSync, rmSync, utimesSync } from 'node:fs';
import { tmpdir } from 'node:os';
import { join } from 'node:path';
import { REPO_ROOT, SHARED_IMAGE_DIR, freePort } from '../test/support/service.js';

const ROUNDS = Number(process.env.BENCH_ROUNDS ?? 3);
const dataDir = mkdtempSync(join(tmpdir(), 'vessel-bench-start-'));

const TSC = join(REPO_ROOT, 'node_modules/.bin/tsc');
const MODES = {
  before: ['sh', '-c', `${TSC} -p . && node dist/scripts/build-console.js && exec node dist/src/cli/main.js serve`],
  rebuild: [process.execPath, 'dist/scripts/start.js'],
  'no rebuild': [process.execPath, 'dist/scripts/start.js'],
} as const;
type Mode = keyof typeof MODES;

/** A source the build reads, its modification time made now: the launcher then builds. */
const touchSource = () => {
  const now = new Date();
  utimesSync(join(REPO_ROOT, 'src/cli/main.ts'), now, now);
};

/** Seconds from spawn to a 200 from /healthz; the service is then stopped (SIGTERM) and waited for. */
async function startToHealthy(mode: Mode): Promise<number> {
  if (mode === 'rebuild') touchSource();
  const port = await freePort();
  const [proxy, dns, ingress, internal] = [await freePort(), await freePort(), await freePort(), await freePort()];
  const [cmd, ...args] = MODES[mode];
  const began = performance.now();
  const child = spawn(cmd, args, {
    cwd: REPO_ROOT,
    // Its own process group: the build's and the shell's children are stopped with it.
    detached: true,
    stdio: ['ignore', 'ignore', 'pipe'],
    env: {
      ...process.env,
      VESSEL_DATA_DIR: dataDir,
      VESSEL_IMAGE_DIR: SHARED_IMAGE_DIR,
      VESSEL_PORT: String(port),
      VESSEL_EGRESS_PROXY_PORT: String(proxy),
      VESSEL_EGRESS_DNS_PORT: String(dns),
      VESSEL_INGRESS_PORT: String(ingress),
      VESSEL_INTERNAL_PORT: String(internal),
      VESSEL_WARM_POOL: '0',
      VESSEL_LOG_LEVEL: 'warn',
    },
  });
  let log = '';
  child.stderr!.on('data', (d) => (log = (log + d).slice(-4000)));
  const exited = once(child, 'exit');
  try {
    for (;;) {
      if (child.exitCode !== null) throw new Error(`${mode}: exited (${child.exitCode}) before it was healthy:\n${log}`);
      try {
        if ((await fetch(`http://127.0.0.1:${port}/healthz`)).status === 200) return (performance.now() - began) / 1000;
      } catch {
        // not listening yet
      }
      await new Promise((r) => setTimeout(r, 50));
    }
  } finally {
    if (child.exitCode === null) process.kill(-child.pid!, 'SIGTERM');
    await exited;
  }
}

const median = (xs: number[]): number => [...xs].sort((a, b) => a - b)[Math.floor(xs.length / 2)]!;

try {
  // Warm-up, not counted: builds if stale, and makes the data directory (admin token, CA, accel.json).
  await startToHealthy('no rebuild');
  const times: Record<Mode, number[]> = { before: [], rebuild: [], 'no rebuild': [] };
  for (let round = 1; round <= ROUNDS; round++) {
    for (const mode of Object.keys(MODES) as Mode[]) {
      const s = await startToHealthy(mode);
      times[mode].push(s);
      console.log(`round ${round}: ${mode.padEnd(10)} ${s.toFixed(2)} s`);
    }
  }
  const m = Object.fromEntries(Object.entries(times).map(([k, v]) => [k, median(v)])) as Record<Mode, number>;
  console.log(`\nstart to healthy, median of ${ROUNDS} (warm data directory, image ${SHARED_IMAGE_DIR}):`);
  for (const mode of Object.keys(MODES) as Mode[]) console.log(`  ${mode.padEnd(10)} ${m[mode].toFixed(2)} s`);
  console.log(`  before / no rebuild:  ${(m.before / m['no rebuild']).toFixed(1)}x`);
  console.log(`  rebuild / no rebuild: ${(m.rebuild / m['no rebuild']).toFixed(1)}x`);
} finally {
  rmSync(dataDir, { recursive: true, force: true });
}
