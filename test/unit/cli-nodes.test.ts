/** `vessel node ls|drain|undrain|evacuate`: a fleet's VM hosts in the shared store, which API nodes place by. */
import { test } from 'node:test';
import assert from 'node:assert/strict';
import { spawnSync } from 'node:child_process';
import { mkdtempSync, rmSync } from 'node:fs';
import { tmpdir } from 'node:os';
import { join } from 'node:path';
import { SqliteStore } from '../../src/store/sqlite-store.js';
import { sqliteFile } from '../../src/store/open-store.js';
import { REPO_ROOT } from '../support/service.js';
import { hostKey } from '../../src/cluster/fleet-keys.js';

/** What the operator's fleet commands act with, as API nodes do. */
const fleetKeys = { VESSEL_INTERNAL_SECRET: 'x'.repeat(32), VESSEL_MASTER_KEY: 'a'.repeat(64) };

test('vessel node: ls shows leases, capacity and load; drain and undrain flip placement; an unknown name fails', async () => {
  const dataDir = mkdtempSync(join(tmpdir(), 'vessel-cli-'));
  const vessel = (...args: string[]) => {
    const r = spawnSync(process.execPath, [join(REPO_ROOT, 'dist/src/cli/main.js'), ...args], { env: { ...process.env, VESSEL_DATA_DIR: dataDir }, encoding: 'utf8' });
    return { status: r.status, lines: r.stdout.split('\n').filter((l) => l !== '').map((l) => JSON.parse(l)), err: r.stderr };
  };
  try {
    assert.deepEqual(vessel('node', 'ls').lines, [], 'a single host registers nothing');
    const store = new SqliteStore(sqliteFile(dataDir));
    try {
      const capacity = { memoryMib: 65_536, vcpus: 16, runtimes: 1000, diskBytes: 500 * 1024 ** 3 };
      await store.nodes.renew({ name: 'host-a', holder: 'h-a', internalUrl: 'http://10.0.0.1:8082', ingressAddress: '10.0.0.1:8081', capacity }, 60);
      await store.nodes.renew({ name: 'host-b', holder: 'h-b', internalUrl: 'http://10.0.0.2:8082', ingressAddress: null, capacity }, 0);
    } finally {
      await store.close();
    }
    const ls = vessel('node', 'ls');
    assert.equal(ls.status, 0, ls.err);
    assert.deepEqual(
      ls.lines.map((n) => [n.name, n.alive, n.draining, n.capacity.memory_mib, n.load.runtimes]),
      [['host-a', true, false, 65_536, 0], ['host-b', false, false, 65_536, 0]],
    );
    assert.deepEqual(vessel('node', 'drain', 'host-a').lines, [{ name: 'host-a', draining: true }]);
    assert.equal(vessel('node', 'ls').lines[0].draining, true);
    assert.deepEqual(vessel('node', 'undrain', 'host-a').lines, [{ name: 'host-a', draining: false }]);
    assert.equal(vessel('node', 'ls').lines[0].draining, false);
    const unknown = vessel('node', 'drain', 'host-z');
    assert.equal(unknown.status, 1);
    // Reported as every CLI error is: one line with its code (docs/cli.md, "Output").
    assert.equal(unknown.err, "vessel: no VM host is registered as 'host-z' (cli)\n");
    // Evacuation moves files between hosts with signed calls over TLS: it needs the fleet secret and the master key.
    const unsigned = vessel('node', 'evacuate', 'host-a');
    assert.notEqual(unsigned.status, 0);
    assert.match(unsigned.err, /VESSEL_INTERNAL_SECRET and VESSEL_MASTER_KEY must be set/);
    assert.equal(vessel('node', 'ls').lines[0].draining, false, 'nothing was done without it');
    const r = spawnSync(process.execPath, [join(REPO_ROOT, 'dist/src/cli/main.js'), 'node', 'evacuate', 'host-z'], {
      env: { ...process.env, VESSEL_DATA_DIR: dataDir, ...fleetKeys },
      encoding: 'utf8',
    });
    assert.notEqual(r.status, 0);
    assert.match(r.stderr, /no VM host is registered as 'host-z'/);
    // Enrollment: refused without the keys; with them, the host's key (the one API nodes derive) is printed, and nothing else of it is kept.
    assert.match(vessel('node', 'enroll', 'host-a').err, /VESSEL_INTERNAL_SECRET and VESSEL_MASTER_KEY must be set/);
    const enroll = spawnSync(process.execPath, [join(REPO_ROOT, 'dist/src/cli/main.js'), 'node', 'enroll', 'host-a'], { env: { ...process.env, VESSEL_DATA_DIR: dataDir, ...fleetKeys }, encoding: 'utf8' });
    assert.equal(enroll.status, 0, enroll.stderr);
    const printed = JSON.parse(enroll.stdout) as { name: string; node_key: string };
    assert.deepEqual([printed.name, printed.node_key], ['host-a', hostKey(fleetKeys.VESSEL_INTERNAL_SECRET, 'host-a')]);
  } finally {
    rmSync(dataDir, { recursive: true, force: true });
  }
});

test('vessel serve --role: api and node refuse to start without PostgreSQL and the hop secret, before touching the host', () => {
  const dataDir = mkdtempSync(join(tmpdir(), 'vessel-cli-'));
  const serve = (role: string, env: Record<string, string>) =>
    spawnSync(process.execPath, [join(REPO_ROOT, 'dist/src/cli/main.js'), 'serve', '--role', role], { env: { ...process.env, VESSEL_DATA_DIR: dataDir, ...env }, encoding: 'utf8', timeout: 30_000 });
  try {
    for (const role of ['api', 'node']) {
      let r = serve(role, {});
      assert.notEqual(r.status, 0);
      assert.match(r.stderr, new RegExp(`--role ${role} needs VESSEL_DATABASE_URL`));
      r = serve(role, { VESSEL_DATABASE_URL: 'postgres://nobody@127.0.0.1:1/none', VESSEL_INTERNAL_SECRET: 'short' });
      assert.notEqual(r.status, 0);
      assert.match(r.stderr, /needs VESSEL_INTERNAL_SECRET.*, the same on every API node of the fleet, of at least 32 characters/);
    }
    // An enrolled host's own key must be the one `vessel node enroll` printed, in its form.
    const badKey = serve('node', { VESSEL_DATABASE_URL: 'postgres://nobody@127.0.0.1:1/none', VESSEL_NODE_KEY: 'not-a-key' });
    assert.notEqual(badKey.status, 0);
    assert.match(badKey.stderr, /VESSEL_NODE_KEY must be the 64 hex characters/);
    const bad = serve('everything', {});
    assert.notEqual(bad.status, 0);
    assert.match(bad.stderr, /Allowed choices are all, api, node/);
    const badName = serve('node', { VESSEL_NODE_NAME: 'Not a host name!' });
    assert.notEqual(badName.status, 0);
    assert.match(badName.stderr, /VESSEL_NODE_NAME must be a host name/);
  } finally {
    rmSync(dataDir, { recursive: true, force: true });
  }
});
