/** `vessel tenant limits show|set`: per-tenant overrides in the data directory's store, which the service reads at every admission. */
import { test } from 'node:test';
import assert from 'node:assert/strict';
import { spawnSync } from 'node:child_process';
import { mkdtempSync, rmSync } from 'node:fs';
import { tmpdir } from 'node:os';
import { join } from 'node:path';
import { TenantQuotas } from '../../src/core/quotas.js';
import { SqliteStore } from '../../src/store/sqlite-store.js';
import { sqliteFile } from '../../src/store/open-store.js';
import { REPO_ROOT } from '../support/service.js';

const DEFAULTS = { runtimes: 3, vcpus: 64, memory_mib: 32768, checkpoints: 50, checkpoint_gib: 20, templates: 20, template_gib: 40 };

test('vessel tenant limits: set overrides, show them with the usage, and drop them with default', async () => {
  const dataDir = mkdtempSync(join(tmpdir(), 'vessel-cli-'));
  const vessel = (...args: string[]) => {
    const r = spawnSync(process.execPath, [join(REPO_ROOT, 'dist/src/cli/main.js'), ...args], {
      env: { ...process.env, VESSEL_DATA_DIR: dataDir, VESSEL_TENANT_MAX_RUNTIMES: '3' },
      encoding: 'utf8',
    });
    return { status: r.status, out: r.stdout === '' ? null : JSON.parse(r.stdout), err: r.stderr };
  };
  try {
    const set = vessel('tenant', 'limits', 'set', '--tenant', 'acme', '--runtimes', '7', '--checkpoint-gib', '5');
    assert.equal(set.status, 0, set.err);
    const expected = {
      tenant: 'acme',
      limits: { ...DEFAULTS, runtimes: 7, checkpoint_gib: 5 },
      own: ['runtimes', 'checkpoint_gib'],
      usage: { runtimes: 0, vcpus: 0, memory_mib: 0, checkpoints: 0, checkpoint_bytes: 0, templates: 0, template_bytes: 0 },
    };
    assert.deepEqual(set.out, expected);
    assert.deepEqual(vessel('tenant', 'limits', 'show', '--tenant', 'acme').out, expected);
    assert.deepEqual(vessel('tenant', 'limits', 'show', '--tenant', 'other').out.limits, DEFAULTS);

    // The service's quotas read the same table: its own defaults, the tenant's overrides.
    const store = new SqliteStore(sqliteFile(dataDir));
    try {
      const serviceDefaults = { runtimes: 10, vcpus: 8, memoryMib: 4096, checkpoints: 5, checkpointGib: 1, templates: 3, templateGib: 2 };
      assert.deepEqual(await new TenantQuotas(store, serviceDefaults).limits('acme'), { ...serviceDefaults, runtimes: 7, checkpointGib: 5 });
    } finally {
      await store.close();
    }

    const dropped = vessel('tenant', 'limits', 'set', '--tenant', 'acme', '--runtimes', 'default');
    assert.deepEqual(dropped.out.limits, { ...DEFAULTS, checkpoint_gib: 5 });
    assert.deepEqual(dropped.out.own, ['checkpoint_gib']);

    for (const [args, message] of [
      [['--vcpus', '-1'], /--vcpus must be a whole number or 'default', got '-1'/],
      [['--memory-mib', '1.5'], /--memory-mib must be a whole number/],
      [[], /give at least one limit to set/],
    ] as const) {
      const bad = vessel('tenant', 'limits', 'set', '--tenant', 'acme', ...args);
      assert.equal(bad.status, 1);
      assert.match(bad.err, message);
    }
    const badTenant = vessel('tenant', 'limits', 'show', '--tenant', 'no such tenant');
    assert.equal(badTenant.status, 1);
    assert.match(badTenant.err, /^vessel: tenant must match/);
  } finally {
    rmSync(dataDir, { recursive: true, force: true });
  }
});
