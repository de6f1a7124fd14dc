/**
 * Two API processes, each with its own connection pool, on one PostgreSQL: creates of one name
 * sent to both at once are decided by the database's unique constraint, not by either process's
 * in-memory locks. Exactly one wins; the other answers 409 already_exists.
 */
import { after, before, test } from 'node:test';
import assert from 'node:assert/strict';
import { spawn, type ChildProcess } from 'node:child_process';
import { once } from 'node:events';
import { fileURLToPath } from 'node:url';
import { createInterface } from 'node:readline';
import { generateTokenValue } from '../../src/core/tokens.js';
import { startPostgres, type PostgresCluster } from '../support/postgres-cluster.js';

const API_PROCESS = fileURLToPath(new URL('../support/api-process.js', import.meta.url));
const admin = generateTokenValue();
let cluster: PostgresCluster;
const processes: ChildProcess[] = [];
let ports: number[] = [];

/** Starts one API process and resolves with its port once it says it listens. */
async function startApi(url: string): Promise<number> {
  const child = spawn(process.execPath, [API_PROCESS], {
    env: { ...process.env, VESSEL_DATABASE_URL: url, VESSEL_ADMIN_TOKEN: admin },
    stdio: ['ignore', 'pipe', 'inherit'],
  });
  processes.push(child);
  const exited = once(child, 'exit').then(([code]) => {
    throw new Error(`the API process exited (${String(code)}) before it listened`);
  });
  const listening = (async () => {
    for await (const line of createInterface({ input: child.stdout! })) {
      const m = /^listening (\d+)$/.exec(line);
      if (m !== null) return Number(m[1]);
    }
    throw new Error('the API process closed its output before it listened');
  })();
  return Promise.race([listening, exited]);
}

before(async () => {
  cluster = startPostgres();
  const url = await cluster.createDatabase('race');
  // Both start at once on the empty database: they also race to migrate it.
  ports = await Promise.all([startApi(url), startApi(url)]);
  assert.notEqual(ports[0], ports[1]);
});

after(async () => {
  await Promise.all(
    processes.map(async (child) => {
      if (child.exitCode !== null || child.signalCode !== null) return;
      const exited = once(child, 'exit');
      child.kill('SIGTERM');
      await exited;
    }),
  );
  cluster?.stop();
});

const call = async (port: number, method: string, path: string, body?: unknown): Promise<{ status: number; body: any }> => {
  const res = await fetch(`http://127.0.0.1:${port}${path}`, {
    method,
    headers: { authorization: `Bearer ${admin}`, ...(body === undefined ? {} : { 'content-type': 'application/json' }) },
    ...(body === undefined ? {} : { body: JSON.stringify(body) }),
  });
  return { status: res.status, body: await res.json() };
};

test('two API processes creating the same runtime name at once: exactly one wins, the other gets 409 already_exists', async () => {
  const rounds = 20;
  const winners = new Set<string>();
  for (let i = 0; i < rounds; i++) {
    const name = `race-${i}`;
    const [a, b] = await Promise.all(ports.map((port) => call(port, 'POST', '/v1/runtimes', { display_name: name })));
    const results = [a!, b!].sort((x, y) => x.status - y.status);
    assert.deepEqual(results.map((r) => r.status), [201, 409], `round ${i}: ${JSON.stringify(results)}`);
    assert.equal(results[1]!.body.error.code, 'already_exists');
    assert.equal(results[0]!.body.data.display_name, name);
    winners.add(results[0]!.body.data.id);
  }
  // Both processes see the same rows: one runtime per name, each the winner's.
  for (const port of ports) {
    const listed = await call(port, 'GET', '/v1/runtimes?limit=100');
    assert.equal(listed.status, 200);
    assert.deepEqual(new Set(listed.body.data.map((r: { id: string }) => r.id)), winners);
    assert.equal(listed.body.data.length, rounds);
  }
});
