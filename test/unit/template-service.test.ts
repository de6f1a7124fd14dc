/**
 * The core's templates (core/templates.ts) on the SQLite store with a fake builder: states, the
 * build log, failures, cancellation by delete, quotas, registry credentials, restarts.
 */
import { test } from 'node:test';
import assert from 'node:assert/strict';
import { randomBytes } from 'node:crypto';
import { mkdtempSync, rmSync } from 'node:fs';
import { tmpdir } from 'node:os';
import { join } from 'node:path';
import { Readable } from 'node:stream';
import { BuildLog, MAX_LOG_OUTPUT_BYTES, type BuildEvent } from '../../src/core/build-log.js';
import { VesselError } from '../../src/core/errors.js';
import { TenantQuotas } from '../../src/core/quotas.js';
import { SecretBox } from '../../src/core/secret-box.js';
import { SecretService } from '../../src/core/secrets.js';
import { TemplateService } from '../../src/core/templates.js';
import type { TenantLimits } from '../../src/core/types.js';
import { SqliteStore } from '../../src/store/sqlite-store.js';
import { FAKE_DISK_BYTES, FakeTemplateBuilder } from '../support/fake-template-builder.js';

const LIMITS: TenantLimits = { runtimes: 10, vcpus: 10, memoryMib: 10_000, checkpoints: 10, checkpointGib: 10, templates: 2, templateGib: 1 };
const quiet = { info: () => undefined, warn: () => undefined, error: () => undefined };

async function withService(work: (s: TemplateService, builder: FakeTemplateBuilder, ctx: { store: SqliteStore; secrets: SecretService; reopen: () => TemplateService }) => Promise<void>): Promise<void> {
  const dir = mkdtempSync(join(tmpdir(), 'vessel-templates-'));
  const store = new SqliteStore(join(dir, 'vessel.db'));
  const builder = new FakeTemplateBuilder();
  const secrets = new SecretService(store, new SecretBox(randomBytes(32)));
  const make = () => new TemplateService(store, secrets, builder, new TenantQuotas(store, LIMITS), quiet);
  const service = make();
  try {
    await work(service, builder, { store, secrets, reopen: make });
    await service.settled();
  } finally {
    await store.close();
    rmSync(dir, { recursive: true, force: true });
  }
}

const collect = async (events: AsyncIterable<BuildEvent>): Promise<BuildEvent[]> => {
  const all: BuildEvent[] = [];
  for await (const e of events) all.push(e);
  return all;
};

const codeOf = (code: string) => (e: unknown) => e instanceof VesselError && e.code === code;

test('an image template answers building, streams its steps, and ends ready with its disk and config', async () => {
  await withService(async (templates, builder) => {
    const release = builder.hold();
    const t = await templates.create('acme', { name: 'py', image: 'registry.example.com:5000/team/py:3.12' });
    assert.equal(t.state, 'building');
    assert.deepEqual(t.source, { kind: 'image', image: 'registry.example.com:5000/team/py:3.12', registrySecretId: null });
    await builder.reached();
    assert.equal((await templates.get('acme', 'py')).state, 'building');
    const { events } = await templates.buildLog('acme', 'py');
    release();
    const log = await collect(events);
    assert.deepEqual(log.map((e) => e.event), ['step', 'output', 'step_done', 'step', 'step_done', 'step', 'step_done', 'done']);
    assert.deepEqual(log.filter((e) => e.event === 'step').map((e) => (e as { name: string }).name), ['pull registry.example.com:5000/team/py:3.12', 'apply the layers', 'write the root disk']);
    for (const e of log) if (e.event === 'step_done') assert.equal(e.cached, false);
    assert.deepEqual(log.at(-1), { event: 'done', state: 'ready', failure: null });
    const ready = await templates.get('acme', t.id);
    assert.equal(ready.state, 'ready');
    assert.equal(ready.diskBytes, FAKE_DISK_BYTES);
    assert.deepEqual(ready.config?.cmd, ['sh']);
    assert.deepEqual((await collect((await templates.buildLog('acme', 'py')).events)).map((e) => e.event), log.map((e) => e.event), 'a late reader gets the whole log');
  });
});

test('a failing step makes the template failed with that step, its exit code and the end of its output', async () => {
  await withService(async (templates, builder) => {
    await templates.create('acme', { name: 'bad', image: 'example.com/team/fail-3' });
    await templates.settled();
    const t = await templates.get('acme', 'bad');
    assert.equal(t.state, 'failed');
    assert.equal(t.failure?.step, 'apply the layers');
    assert.equal(t.failure?.exitCode, 3);
    assert.equal(t.failure?.outputTail, 'layer 2: refused\nthe layers could not be applied\n');
    assert.deepEqual(builder.discarded, [t.id], "a failed build's files go");
    const log = await collect((await templates.buildLog('acme', 'bad')).events);
    assert.deepEqual(log.at(-2), { event: 'step_done', step: 2, duration_ms: (log.at(-2) as { duration_ms: number }).duration_ms, cached: false, exit_code: 3 });
    assert.deepEqual(log.at(-1), { event: 'done', state: 'failed', failure: t.failure });
  });
});

test('names and sources are checked before anything is recorded', async () => {
  await withService(async (templates, _builder, { store }) => {
    await assert.rejects(templates.create('acme', { name: 'no spaces', image: 'debian:12' }), codeOf('invalid_argument'));
    await assert.rejects(templates.create('acme', { name: '0b7c5c1e-8a5e-4c6f-9d1e-2f3a4b5c6d7e', image: 'debian:12' }), codeOf('invalid_argument'));
    for (const image of ['--insecure-policy', 'docker://debian:12', 'debian 12', 'a'.repeat(513)]) {
      await assert.rejects(templates.create('acme', { name: 'x', image }), codeOf('invalid_argument'), image);
    }
    await assert.rejects(templates.create('acme', { name: 'x' }), codeOf('invalid_argument'), 'neither image nor archive');
    await assert.rejects(templates.create('acme', { name: 'x', image: 'debian:12' }, Readable.from([Buffer.from('tar')])), codeOf('invalid_argument'), 'both');
    await assert.rejects(templates.create('acme', { name: 'x', image: 'debian:12', registry_secret: 'nope' }), codeOf('not_found'));
    assert.equal((await store.templates.listAll()).length, 0);
  });
});

test('an archive is taken before the answer; an empty or oversized one leaves nothing behind', async () => {
  await withService(async (templates, builder, { store }) => {
    const t = await templates.create('acme', { name: 'up' }, Readable.from([Buffer.from('docker save bytes')]));
    assert.deepEqual(t.source, { kind: 'archive', archiveBytes: 17 });
    await templates.settled();
    assert.equal((await templates.get('acme', 'up')).state, 'ready');
    assert.deepEqual(builder.sources.at(-1)?.source, { kind: 'archive' });
    await assert.rejects(templates.create('other', { name: 'empty' }, Readable.from([])), codeOf('invalid_argument'));
    assert.equal(await store.templates.find('other', 'empty'), undefined);
    assert.deepEqual((await store.quotas.usage('other')).templates, 0);
  });
});

test('registry credentials come from a secret of the tenant, revealed only for the build', async () => {
  await withService(async (templates, builder, { secrets, store }) => {
    const secret = await secrets.create('acme', { name: 'registry', value: 'robot$ci:s3cr:et' });
    const t = await templates.create('acme', { name: 'private', image: 'registry.example.com/team/app:1', registry_secret: 'registry' });
    assert.deepEqual(t.source, { kind: 'image', image: 'registry.example.com/team/app:1', registrySecretId: secret.id });
    await templates.settled();
    assert.deepEqual(builder.sources.at(-1)?.source, { kind: 'image', image: 'registry.example.com/team/app:1', credentials: { username: 'robot$ci', password: 's3cr:et' } });
    assert.doesNotMatch(JSON.stringify(await store.templates.find('acme', 'private')), /s3cr/, 'the record holds the secret id, never its value');
    await assert.rejects(templates.create('other', { name: 'theirs', image: 'registry.example.com/team/app:1', registry_secret: secret.id }), codeOf('not_found'), "another tenant's secret");
  });
});

test('delete stops a build still running; the template, its files and its log go', async () => {
  await withService(async (templates, builder) => {
    builder.hold();
    const t = await templates.create('acme', { name: 'slow', image: 'debian:12' });
    await builder.reached();
    const { events } = await templates.buildLog('acme', 'slow');
    await templates.delete('acme', 'slow');
    assert.deepEqual((await collect(events)).at(-1), { event: 'done', state: 'failed', failure: { step: 'apply the layers', exitCode: null, outputTail: 'the build was cancelled\n' } });
    await assert.rejects(templates.get('acme', t.id), codeOf('not_found'));
    assert.ok(builder.discarded.includes(t.id));
  });
});

test('quotas: templates per tenant, and refusal once the ready ones take the disk limit', async () => {
  await withService(async (templates) => {
    await templates.create('acme', { name: 'a', image: 'debian:12' });
    await templates.settled();
    await assert.rejects(templates.create('acme', { name: 'b', image: 'debian:12' }), (e: unknown) => codeOf('failed_precondition')(e) && /1 GiB in template disks, at or past its limit of 1 GiB/.test((e as Error).message));
    await templates.delete('acme', 'a');
    await templates.create('acme', { name: 'b', image: 'example.com/x/fail-1' });
    await templates.create('acme', { name: 'c', image: 'example.com/x/fail-1' });
    await assert.rejects(templates.create('acme', { name: 'd', image: 'debian:12' }), (e: unknown) => codeOf('failed_precondition')(e) && /has 2 templates, its limit/.test((e as Error).message));
    await assert.rejects(templates.create('acme', { name: 'c', image: 'debian:12' }), codeOf('failed_precondition'), 'the count comes first');
    await templates.create('other', { name: 'c', image: 'debian:12' });
  });
});

test('after a restart, a build cut short is failed and its files go', async () => {
  await withService(async (templates, builder, { reopen }) => {
    builder.hold();
    const t = await templates.create('acme', { name: 'cut', image: 'debian:12' });
    await builder.reached();
    const restarted = reopen();
    await restarted.reconcile();
    const after = await restarted.get('acme', 'cut');
    assert.equal(after.state, 'failed');
    assert.equal(after.failure?.outputTail, 'the service restarted during the build');
    assert.deepEqual(await collect((await restarted.buildLog('acme', 'cut')).events), [{ event: 'done', state: 'failed', failure: after.failure }]);
    assert.ok(builder.discarded.includes(t.id));
    templates.close();
  });
});

test('builds take turns for the build slot, and the log says a build waits', async () => {
  await withService(async (templates, builder) => {
    const release = builder.hold();
    await templates.create('acme', { name: 'first', image: 'debian:12' });
    await templates.create('other', { name: 'second', image: 'debian:12' });
    await builder.reached(1);
    const second = (await templates.buildLog('other', 'second')).events;
    release();
    const log = await collect(second);
    assert.deepEqual(log[0], { event: 'step', step: 1, name: 'wait for a build slot' });
    assert.equal(log.at(-1)?.event, 'done');
  });
});

test('the build log keeps at most its output budget, says what it left out, and keeps the tail for a failure', async () => {
  const log = new BuildLog(() => 0);
  log.step('run');
  const chunk = 'x'.repeat(64 * 1024) + '\n';
  for (let i = 0; i < 20; i++) log.output(chunk);
  log.output('the end é\n');
  log.finish('failed', { step: 'run', exitCode: 1, outputTail: log.tail });
  const events = await collect(log.read());
  const output = events.filter((e) => e.event === 'output').reduce((n, e) => n + Buffer.byteLength((e as { text: string }).text), 0);
  assert.ok(output <= MAX_LOG_OUTPUT_BYTES);
  const done = events.find((e) => e.event === 'step_done') as { output_omitted_bytes?: number; exit_code: number | null };
  assert.equal(output + (done.output_omitted_bytes ?? 0), 20 * chunk.length + Buffer.byteLength('the end é\n'));
  assert.equal(done.exit_code, 1);
  assert.ok(log.tail.endsWith('the end é\n'));
  assert.equal(Buffer.byteLength(log.tail), 4096);
});
