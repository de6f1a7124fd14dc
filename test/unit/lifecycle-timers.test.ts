/** When lifecycle timers act: the decision alone, at chosen times (RuntimeService acts on it). */
import { test } from 'node:test';
import assert from 'node:assert/strict';
import { dueAction } from '../../src/core/lifecycle-timers.js';
import { DEFAULT_LIFECYCLE, type LifecycleSettings, type Runtime, type RuntimeStatus } from '../../src/core/types.js';

const T0 = Date.parse('2026-01-01T00:00:00Z');

function runtime(status: RuntimeStatus, lifecycle: Partial<LifecycleSettings>, stoppedAt: number | null = null): Runtime {
  const resources = { limits: { memory_mib: 512 }, requests: { memory_mib: 512 }, vcpus: 1 };
  return {
    id: '00000000-0000-4000-8000-000000000001',
    tenantId: 't',
    displayName: 'r',
    status,
    statusMessage: null,
    egressPolicy: { enabled: true, allowed_hosts: [] },
    ingressSpecs: [],
    resources,
    pendingResources: null,
    baseCheckpointId: null,
    templateId: null,
    node: null,
    labels: {},
    env: {},
    lifecycle: { ...DEFAULT_LIFECYCLE, ...lifecycle },
    stoppedAt: stoppedAt === null ? null : new Date(stoppedAt).toISOString(),
    createdAt: new Date(T0).toISOString(),
    updatedAt: new Date(T0).toISOString(),
  };
}

const idle = { busy: false, lastAt: T0 };

test('the idle timeout: its own, else the service default; 0 is never; on_idle says what happens', () => {
  assert.equal(dueAction(runtime('running', { idleTimeoutSecs: 10 }), idle, T0 + 9_999, 0), null);
  assert.deepEqual(dueAction(runtime('running', { idleTimeoutSecs: 10 }), idle, T0 + 10_000, 0)?.action, 'suspend');
  assert.deepEqual(dueAction(runtime('running', { idleTimeoutSecs: 10, onIdle: 'stop' }), idle, T0 + 10_000, 0)?.action, 'stop');
  assert.equal(dueAction(runtime('running', {}), idle, T0 + 1e9, 0), null, 'no default: never');
  assert.equal(dueAction(runtime('running', {}), idle, T0 + 29_000, 30), null);
  assert.equal(dueAction(runtime('running', {}), idle, T0 + 30_000, 30)?.action, 'suspend', 'the default applies');
  assert.equal(dueAction(runtime('running', { idleTimeoutSecs: 0 }), idle, T0 + 1e9, 30), null, '0 overrides the default: never');
  assert.equal(dueAction(runtime('running', { idleTimeoutSecs: 10 }), { busy: true, lastAt: T0 }, T0 + 1e9, 0), null, 'busy: never idle');
  assert.equal(dueAction(runtime('paused', { idleTimeoutSecs: 10 }), idle, T0 + 1e9, 0), null, 'only running runtimes idle');
});

test('auto-delete counts from when the runtime stopped, in every status without a VM', () => {
  for (const status of ['shutdown', 'suspended', 'crashed', 'error'] as const) {
    assert.equal(dueAction(runtime(status, { autoDeleteSecs: 60 }, T0), idle, T0 + 59_999, 0), null, status);
    assert.equal(dueAction(runtime(status, { autoDeleteSecs: 60 }, T0), idle, T0 + 60_000, 0)?.action, 'delete', status);
  }
  assert.equal(dueAction(runtime('shutdown', { autoDeleteSecs: 0 }, T0), idle, T0, 0)?.action, 'delete', '0: at once');
  assert.equal(dueAction(runtime('shutdown', {}, T0), idle, T0 + 1e12, 0), null, 'null: never');
  assert.equal(dueAction(runtime('running', { autoDeleteSecs: 0 }, null), idle, T0 + 1e12, 0), null, 'running: never');
  assert.equal(dueAction(runtime('deleting', { autoDeleteSecs: 0 }, T0), idle, T0 + 1e12, 0), null);
  assert.equal(dueAction(runtime('shutdown', { autoDeleteSecs: 0 }, T0), { busy: true, lastAt: T0 }, T0 + 1e12, 0), null, 'busy: never');
});
