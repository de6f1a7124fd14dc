/** VM cgroups over a fake sysfs tree: both layouts are detected, limits land in the right files, and a host with neither says why. */
import { test } from 'node:test';
import assert from 'node:assert/strict';
import { existsSync, mkdirSync, mkdtempSync, readFileSync, rmSync, writeFileSync } from 'node:fs';
import { tmpdir } from 'node:os';
import { join } from 'node:path';
import { VmCgroups } from '../../src/vm/cgroups.js';

const limits = { memoryBytes: 768 * 1024 * 1024, cpuCores: 2, pids: 256 };

function fakeRoot(): string {
  return mkdtempSync(join(tmpdir(), 'vessel-cg-'));
}

test('cgroup v2: controllers are delegated, limits written, the process attached, the group removed', () => {
  const root = fakeRoot();
  try {
    writeFileSync(join(root, 'cgroup.controllers'), 'cpuset cpu io memory hugetlb pids rdma misc\n');
    const detected = VmCgroups.detect('inst1', root);
    assert.ok(detected.cgroups !== null);
    assert.equal(detected.cgroups.version, 2);
    assert.equal(readFileSync(join(root, 'cgroup.subtree_control'), 'utf8'), '+memory +cpu +pids');
    assert.equal(readFileSync(join(root, 'vessel', 'cgroup.subtree_control'), 'utf8'), '+memory +cpu +pids');
    assert.equal(readFileSync(join(root, 'vessel', 'inst1', 'cgroup.subtree_control'), 'utf8'), '+memory +cpu +pids');
    detected.cgroups.prepare('rt-1', limits);
    // Under the service's instance: another service on the machine has its own, for the same runtime id too.
    const dir = join(root, 'vessel', 'inst1', 'rt-1');
    assert.equal(readFileSync(join(dir, 'memory.max'), 'utf8'), String(limits.memoryBytes));
    assert.equal(readFileSync(join(dir, 'cpu.max'), 'utf8'), '200000 100000');
    assert.equal(readFileSync(join(dir, 'pids.max'), 'utf8'), '256');
    detected.cgroups.attach('rt-1', 4242);
    assert.equal(readFileSync(join(dir, 'cgroup.procs'), 'utf8'), '4242');
    // A real cgroup directory is removed by rmdir once empty; the fake one holds files, so it stays.
    assert.throws(() => detected.cgroups!.release('rt-1'));
    detected.cgroups.release('never-made');
  } finally {
    rmSync(root, { recursive: true, force: true });
  }
});

test('cgroup v1: one group per controller hierarchy', () => {
  const root = fakeRoot();
  try {
    for (const c of ['memory', 'cpu', 'pids']) {
      mkdirSync(join(root, c));
      writeFileSync(join(root, c, 'cgroup.procs'), '');
    }
    const detected = VmCgroups.detect('inst1', root);
    assert.ok(detected.cgroups !== null);
    assert.equal(detected.cgroups.version, 1);
    detected.cgroups.prepare('rt-2', { ...limits, cpuCores: 1.5 });
    assert.equal(readFileSync(join(root, 'memory', 'vessel', 'inst1', 'rt-2', 'memory.limit_in_bytes'), 'utf8'), String(limits.memoryBytes));
    assert.equal(readFileSync(join(root, 'cpu', 'vessel', 'inst1', 'rt-2', 'cpu.cfs_quota_us'), 'utf8'), '150000');
    assert.equal(readFileSync(join(root, 'cpu', 'vessel', 'inst1', 'rt-2', 'cpu.cfs_period_us'), 'utf8'), '100000');
    assert.equal(readFileSync(join(root, 'pids', 'vessel', 'inst1', 'rt-2', 'pids.max'), 'utf8'), '256');
    detected.cgroups.attach('rt-2', 77);
    for (const c of ['memory', 'cpu', 'pids']) assert.equal(readFileSync(join(root, c, 'vessel', 'inst1', 'rt-2', 'cgroup.procs'), 'utf8'), '77');
  } finally {
    rmSync(root, { recursive: true, force: true });
  }
});

test('a v2 root without the controllers, or no cgroups at all, is reported with the reason', () => {
  const root = fakeRoot();
  try {
    writeFileSync(join(root, 'cgroup.controllers'), 'cpu io\n');
    const detected = VmCgroups.detect('inst1', root);
    assert.equal(detected.cgroups, null);
    assert.match((detected as { reason: string }).reason, /no memory, cpu and pids controllers/);
    assert.equal(existsSync(join(root, 'vessel')), false, 'nothing was made');
  } finally {
    rmSync(root, { recursive: true, force: true });
  }
});
