/**
 * What every Store adapter must do, run against each of them (sqlite.test.ts, postgres.test.ts):
 * the behaviour the core relies on, including the errors it maps to API codes.
 */
import { test } from 'node:test';
import assert from 'node:assert/strict';
import { randomUUID } from 'node:crypto';
import { VesselError } from '../../src/core/errors.js';
import { LIVE_STATUSES } from '../../src/core/lifecycle.js';
import type { Store } from '../../src/core/ports.js';
import type { Audit, Checkpoint, InjectionRule, NodeRegistration, Runtime, RuntimeFilter, RuntimeStatus, SealedSecret, Secret, Template, Token } from '../../src/core/types.js';

export interface StoreUnderTest {
  /** An empty store of its own; `reopen` opens the same data again, as a restarted service would. */
  fresh(): Promise<{ store: Store; reopen: () => Promise<Store> }>;
}

const resources = (vcpus: number, memoryMib: number) => ({ limits: { memory_mib: memoryMib }, requests: { memory_mib: memoryMib }, vcpus });
let clock = Date.parse('2026-01-01T00:00:00Z');
const at = (): string => new Date((clock += 1000)).toISOString();

export const runtime = (tenantId: string, displayName: string, status: RuntimeStatus = 'running', vcpus = 1, memoryMib = 512): Runtime => ({
  id: randomUUID(),
  tenantId,
  displayName,
  status,
  statusMessage: null,
  egressPolicy: { enabled: true, allowed_hosts: ['example.com'] },
  ingressSpecs: [{ protocol: 'http', runtime_port: 8000 }],
  resources: resources(vcpus, memoryMib),
  pendingResources: null,
  baseCheckpointId: null,
  templateId: null,
  node: null,
  labels: {},
  env: { GREETING: 'hello' },
  lifecycle: { idleTimeoutSecs: null, onIdle: 'suspend', autoDeleteSecs: null },
  stoppedAt: null,
  createdAt: at(),
  updatedAt: at(),
});

const secret = (tenantId: string, displayName: string): SealedSecret => ({
  id: randomUUID(),
  tenantId,
  displayName,
  cacheTtlSecs: 60,
  sealedValue: 'sealed:' + displayName,
  createdAt: at(),
});

const rule = (rt: Runtime, s: Secret): InjectionRule => ({
  id: randomUUID(),
  tenantId: rt.tenantId,
  runtimeId: rt.id,
  secretId: s.id,
  hostPattern: 'api.example.com',
  pathPattern: '/v1/*',
  injection: { headerName: 'Authorization', valueFormat: 'Bearer {value}' },
  createdAt: at(),
});

const checkpoint = (tenantId: string | null, displayName: string, extra: Partial<Checkpoint> = {}): Checkpoint => ({
  id: randomUUID(),
  tenantId,
  displayName,
  state: 'ready',
  stateMessage: null,
  resources: resources(1, 512),
  sourceRuntimeId: null,
  templateId: null,
  parentCheckpointId: null,
  deleted: false,
  diskBytes: 1000,
  node: null,
  createdAt: at(),
  ...extra,
});

const template = (tenantId: string, displayName: string, extra: Partial<Template> = {}): Template => ({
  id: randomUUID(),
  tenantId,
  displayName,
  state: 'building',
  source: { kind: 'image', image: 'debian:12', registrySecretId: null },
  failure: null,
  config: null,
  diskBytes: null,
  checkpointId: null,
  node: null,
  createdAt: at(),
  updatedAt: at(),
  ...extra,
});

type EgressAudit = Extract<Audit, { category: 'egress' }>;
const audit = (rt: Runtime, host: string): Audit => ({
  id: randomUUID(),
  tenantId: rt.tenantId,
  runtimeId: rt.id,
  category: 'egress',
  // The store keeps the payload as it is given; `host` marks each audit for the assertions.
  payload: { egress: { kind: 'tcp_connection', host } as unknown as EgressAudit['payload']['egress'] },
  createdAt: at(),
});

const hostOf = (a: Audit): string => ((a as EgressAudit).payload.egress as unknown as { host: string }).host;

const token = (tenantId: string, name: string): Token => ({
  id: randomUUID(),
  tenantId,
  name,
  hash: randomUUID(),
  scopes: ['runtimes:read'],
  createdAt: at(),
  revokedAt: null,
});

const registration = (name: string, extra: Partial<NodeRegistration> = {}): NodeRegistration => ({
  name,
  holder: `holder-of-${name}`,
  internalUrl: `http://${name}.internal:8082`,
  ingressAddress: `${name}.internal:8081`,
  capacity: { memoryMib: 16_384, vcpus: 8, runtimes: 50, diskBytes: 500_000_000_000 },
  ...extra,
});

/** Polls `read` until `done` holds of what it returns; fails (instead of hanging) after `withinMs`. */
async function eventually<T>(read: () => Promise<T>, done: (value: T) => boolean, withinMs: number): Promise<T> {
  const deadline = Date.now() + withinMs;
  for (;;) {
    const value = await read();
    if (done(value)) return value;
    assert.ok(Date.now() < deadline, `not so within ${withinMs} ms: ${JSON.stringify(value)}`);
    await new Promise((resolve) => setTimeout(resolve, 50));
  }
}

async function rejectsWith(work: Promise<unknown>, code: string): Promise<void> {
  await assert.rejects(work, (err: unknown) => err instanceof VesselError && err.code === code);
}

/** Every page of a list, following the tokens; fails on a page twice or a token that loops. */
async function allPages<T>(list: (pageToken: string | undefined) => Promise<{ items: T[]; nextPageToken?: string | undefined }>): Promise<T[]> {
  const items: T[] = [];
  let next: string | undefined;
  const seen = new Set<string>();
  do {
    const p = await list(next);
    items.push(...p.items);
    next = p.nextPageToken;
    if (next !== undefined) {
      assert.ok(!seen.has(next), 'a page token came back twice');
      seen.add(next);
    }
  } while (next !== undefined);
  return items;
}

export function storeContract(subject: StoreUnderTest): void {
  // node:test awaits the tests it registers; the wrapper hands back nothing to float.
  const withStore = (name: string, body: (store: Store, reopen: () => Promise<Store>) => Promise<void>): void =>
    void test(name, async () => {
      const { store, reopen } = await subject.fresh();
      try {
        await body(store, reopen);
      } finally {
        await store.close();
      }
    });

  withStore('runtimes: found by id or name, updated, listed newest first a page at a time, deleted', async (store) => {
    const rts = Array.from({ length: 5 }, (_, i) => runtime('acme', `rt-${i}`));
    for (const rt of rts) await store.runtimes.insert(rt);
    await store.runtimes.insert(runtime('other', 'rt-0'));
    assert.deepEqual(await store.runtimes.find('acme', rts[1]!.id.toUpperCase()), rts[1]);
    assert.deepEqual(await store.runtimes.find('acme', 'rt-2'), rts[2]);
    assert.equal(await store.runtimes.find('other', rts[1]!.id), undefined, 'another tenant does not see it');
    assert.deepEqual(await store.runtimes.findById(rts[3]!.id), rts[3]);

    const changed: Runtime = { ...rts[0]!, status: 'suspended', statusMessage: 'idle', pendingResources: resources(2, 1024), baseCheckpointId: randomUUID(), templateId: randomUUID() };
    await store.runtimes.update(changed);
    assert.deepEqual(await store.runtimes.find('acme', 'rt-0'), changed);

    const listed = await allPages((pageToken) => store.runtimes.list('acme', { limit: 2, pageToken }));
    assert.deepEqual(listed.map((r) => r.displayName), ['rt-4', 'rt-3', 'rt-2', 'rt-1', 'rt-0']);
    assert.equal((await store.runtimes.listAll()).length, 6);

    assert.equal(await store.runtimes.delete('other', rts[4]!.id), false, 'another tenant cannot delete it');
    assert.equal(await store.runtimes.delete('acme', rts[4]!.id), true);
    assert.equal(await store.runtimes.delete('acme', rts[4]!.id), false);
    assert.equal(await store.runtimes.find('acme', 'rt-4'), undefined);
  });

  withStore('runtimes by label and status: filtered in the query, so each page but the last is full; labels and lifecycle kept', async (store) => {
    const labelled = (name: string, labels: Record<string, string>, status: RuntimeStatus = 'running'): Runtime => ({ ...runtime('acme', name, status), labels });
    const rts = [
      labelled('a', { env: 'prod', team: 'core' }),
      labelled('b', { env: 'dev' }),
      labelled('c', { env: 'prod' }, 'shutdown'),
      labelled('d', { team: 'core' }),
      labelled('e', { env: 'prod', team: 'web' }),
      { ...labelled('f', { 'env.x': 'prod' }), lifecycle: { idleTimeoutSecs: 30, onIdle: 'stop' as const, autoDeleteSecs: 600 } },
    ];
    for (const rt of rts) await store.runtimes.insert(rt);
    await store.runtimes.insert({ ...runtime('other', 'z'), labels: { env: 'prod' } });
    const names = async (filter: RuntimeFilter) => (await allPages((pageToken) => store.runtimes.listMatching('acme', filter, { limit: 1, pageToken }))).map((r) => r.displayName);
    assert.deepEqual(await names({ labels: [['env', 'prod']], statuses: [] }), ['e', 'c', 'a']);
    assert.deepEqual(await names({ labels: [['env', 'prod']], statuses: ['running'] }), ['e', 'a']);
    assert.deepEqual(await names({ labels: [['team', null]], statuses: [] }), ['e', 'd', 'a']);
    assert.deepEqual(await names({ labels: [['env', 'prod'], ['team', 'core']], statuses: [] }), ['a']);
    assert.deepEqual(await names({ labels: [], statuses: ['shutdown', 'paused'] }), ['c']);
    assert.deepEqual(await names({ labels: [['env', 'pro']], statuses: [] }), [], 'values match whole');
    assert.deepEqual(await names({ labels: [], statuses: [] }), ['f', 'e', 'd', 'c', 'b', 'a']);
    const first = await store.runtimes.listMatching('acme', { labels: [['env', 'prod']], statuses: [] }, { limit: 2 });
    assert.equal(first.items.length, 2, 'a page holds `limit` matches');
    assert.deepEqual(await store.runtimes.find('acme', 'f'), rts[5]);
  });

  withStore('runtimes with timers: every running one, and stopped ones with auto-delete and a stop time', async (store) => {
    const off = { idleTimeoutSecs: null, onIdle: 'suspend' as const, autoDeleteSecs: null };
    const autoDelete = { ...off, autoDeleteSecs: 60 };
    const rts: Runtime[] = [
      { ...runtime('acme', 'running'), lifecycle: off },
      { ...runtime('acme', 'stopped-plain', 'shutdown'), stoppedAt: at() },
      { ...runtime('acme', 'stopped-timed', 'shutdown'), lifecycle: autoDelete, stoppedAt: at() },
      { ...runtime('acme', 'crashed-timed', 'crashed'), lifecycle: autoDelete, stoppedAt: at() },
      { ...runtime('acme', 'paused-timed', 'paused'), lifecycle: autoDelete, stoppedAt: null },
    ];
    for (const rt of rts) await store.runtimes.insert(rt);
    assert.deepEqual((await store.runtimes.listTimed(null)).map((r) => r.displayName), ['running', 'stopped-timed', 'crashed-timed']);
    // In a fleet, each host asks for its own: another host's runtimes never come back.
    await store.runtimes.insert({ ...runtime('acme', 'on-h1'), lifecycle: off, node: 'h1' });
    await store.runtimes.insert({ ...runtime('acme', 'on-h2'), lifecycle: off, node: 'h2' });
    assert.deepEqual((await store.runtimes.listTimed('h1')).map((r) => r.displayName), ['on-h1']);
    assert.equal((await store.runtimes.listTimed(null)).length, 3);
  });

  withStore('audits keep their category: a lifecycle audit reads back as one, and filters by it', async (store) => {
    const rt = runtime('acme', 'timed');
    await store.runtimes.insert(rt);
    const lifecycle: Audit = { id: randomUUID(), tenantId: 'acme', runtimeId: rt.id, category: 'lifecycle', payload: { lifecycle: { action: 'stop', reason: 'idle', runtime_name: 'timed' } }, createdAt: at() };
    await store.audits.insert([audit(rt, 'a.example'), lifecycle]);
    assert.deepEqual((await store.audits.list('acme', { limit: 10, category: 'lifecycle' })).items, [lifecycle]);
    assert.deepEqual((await store.audits.list('acme', { limit: 10 })).items.map((a) => a.category), ['lifecycle', 'egress']);
  });

  withStore('an audit batch sent again (its sender never heard it was stored) is stored once, with what is new in it', async (store) => {
    const rt = runtime('acme', 'resent');
    await store.runtimes.insert(rt);
    const [a, b, c] = [audit(rt, 'a.example'), audit(rt, 'b.example'), audit(rt, 'c.example')];
    await store.audits.insert([a, b]);
    await store.audits.insert([a, b, c]);
    assert.deepEqual((await store.audits.list('acme', { limit: 10 })).items.map((x) => x.id), [c.id, b.id, a.id]);
  });

  withStore('names are unique per tenant: a second insert or a rename onto a taken name is already_exists', async (store) => {
    await store.runtimes.insert(runtime('acme', 'web'));
    await rejectsWith(store.runtimes.insert(runtime('acme', 'web')), 'already_exists');
    await store.runtimes.insert(runtime('other', 'web'));
    const api = runtime('acme', 'api');
    await store.runtimes.insert(api);
    await rejectsWith(store.runtimes.update({ ...api, displayName: 'web' }), 'already_exists');
    await store.secrets.insert(secret('acme', 'key'));
    await rejectsWith(store.secrets.insert(secret('acme', 'key')), 'already_exists');
  });

  withStore('concurrent inserts of one name: exactly one is stored, every other is already_exists', async (store) => {
    const results = await Promise.allSettled(Array.from({ length: 12 }, () => store.runtimes.insert(runtime('acme', 'race'))));
    assert.equal(results.filter((r) => r.status === 'fulfilled').length, 1);
    for (const r of results) if (r.status === 'rejected') assert.ok(r.reason instanceof VesselError && r.reason.code === 'already_exists', String(r.reason));
    assert.equal((await store.runtimes.list('acme', { limit: 100 })).items.length, 1);
  });

  withStore('a page token the store did not issue is invalid_argument', async (store) => {
    await assert.rejects(store.runtimes.list('acme', { limit: 2, pageToken: 'bm9wZQ' }), (e: unknown) => e instanceof VesselError && e.code === 'invalid_argument');
    await assert.rejects(store.audits.list('acme', { limit: 2, pageToken: 'x' }), (e: unknown) => e instanceof VesselError && e.code === 'invalid_argument');
  });

  withStore('secrets: found by id and name without their sealed value, which only findSealed gives, by id and tenant; deleted, found no more', async (store) => {
    const s = secret('acme', 'api-key');
    await store.secrets.insert(s);
    const { sealedValue: _, ...shown } = s;
    assert.deepEqual(await store.secrets.find('acme', 'api-key'), shown);
    assert.deepEqual(await store.secrets.find('acme', s.id), shown);
    assert.deepEqual((await store.secrets.list('acme', { limit: 10 })).items, [shown]);
    assert.deepEqual(await store.secrets.findSealed('acme', s.id.toUpperCase()), s);
    assert.equal(await store.secrets.findSealed('acme', 'api-key'), undefined, 'by id alone');
    assert.equal(await store.secrets.findSealed('other', s.id), undefined);
    assert.equal(await store.secrets.delete('acme', s.id), true);
    assert.equal(await store.secrets.find('acme', 'api-key'), undefined);
    assert.equal(await store.secrets.find('acme', s.id), undefined);
    assert.equal(await store.secrets.findSealed('acme', s.id), undefined);
  });

  withStore('templates: unique per tenant by name, found by id and name, updated whole, listed newest first, deleted', async (store) => {
    const py = template('acme', 'py', { source: { kind: 'image', image: 'registry.example.com:5000/team/py:3.12', registrySecretId: randomUUID() } });
    const up = template('acme', 'upload', { source: { kind: 'archive', archiveBytes: 123_456_789_012 } });
    const theirs = template('other', 'py');
    for (const t of [py, up, theirs]) await store.templates.insert(t);
    await rejectsWith(store.templates.insert(template('acme', 'py')), 'already_exists');
    assert.deepEqual(await store.templates.find('acme', 'py'), py);
    assert.deepEqual(await store.templates.find('acme', py.id.toUpperCase()), py);
    assert.equal(await store.templates.find('acme', theirs.id), undefined, "another tenant's template is not found by its id");
    assert.deepEqual((await store.templates.list('acme', { limit: 10 })).items.map((t) => t.id), [up.id, py.id]);
    const first = await store.templates.list('acme', { limit: 1 });
    assert.deepEqual((await store.templates.list('acme', { limit: 1, pageToken: first.nextPageToken })).items.map((t) => t.id), [py.id]);
    const failed: Template = { ...up, state: 'failed', failure: { step: 'pull the image', exitCode: 2, outputTail: 'manifest unknown\n' }, updatedAt: at() };
    await store.templates.update(failed);
    assert.deepEqual(await store.templates.find('acme', 'upload'), failed);
    const ready: Template = {
      ...py,
      state: 'ready',
      config: { env: { PATH: '/usr/local/bin:/usr/bin', LANG: 'C.UTF-8' }, workdir: '/app', user: '1000:1000', entrypoint: null, cmd: ['python3'] },
      diskBytes: 3 * 1024 ** 3,
      checkpointId: randomUUID(),
      updatedAt: at(),
    };
    await store.templates.update(ready);
    assert.deepEqual(await store.templates.find('acme', py.id), ready);
    assert.deepEqual((await store.templates.listAll()).map((t) => t.id), [py.id, up.id, theirs.id]);
    assert.equal(await store.templates.delete('acme', theirs.id), false, "a tenant cannot delete another's template");
    assert.equal(await store.templates.delete('acme', py.id), true);
    assert.equal(await store.templates.find('acme', 'py'), undefined);
    await store.templates.insert(template('acme', 'py'));
  });

  withStore('quotas: templates count in any state, and the disk of the ready ones', async (store) => {
    await store.templates.insert(template('acme', 'a', { state: 'ready', diskBytes: 2_000_000_000 }));
    await store.templates.insert(template('acme', 'b', { state: 'ready', diskBytes: 3_000_000_000 }));
    await store.templates.insert(template('acme', 'c'));
    await store.templates.insert(template('acme', 'd', { state: 'failed', diskBytes: 7 }));
    await store.templates.insert(template('other', 'a', { state: 'ready', diskBytes: 11 }));
    const usage = await store.quotas.usage('acme');
    assert.deepEqual([usage.templates, usage.templateBytes], [4, 5_000_000_000]);
    await store.quotas.setOverrides('acme', { templates: 3, templateGib: 9 });
    assert.deepEqual(await store.quotas.overrides('acme'), { templates: 3, templateGib: 9 });
    await store.quotas.setOverrides('acme', { templates: null, templateGib: null });
    assert.deepEqual(await store.quotas.overrides('acme'), {});
  });

  withStore('tokens: put replaces by id, found by hash, revoked once, listed newest first', async (store) => {
    const first = token('acme', 'ci');
    const second = token('acme', 'laptop');
    await store.tokens.insert(first);
    await store.tokens.insert(second);
    const admin = token('admin', 'admin');
    await store.tokens.put(admin);
    const rotated = { ...admin, hash: randomUUID(), createdAt: at() };
    await store.tokens.put(rotated);
    assert.equal(await store.tokens.findByHash(admin.hash), undefined);
    assert.deepEqual(await store.tokens.findByHash(rotated.hash), rotated);
    assert.deepEqual((await store.tokens.list()).map((t) => t.name), ['admin', 'laptop', 'ci']);
    assert.equal(await store.tokens.revoke(first.id, at()), true);
    assert.equal(await store.tokens.revoke(first.id, at()), false);
    assert.notEqual((await store.tokens.findByHash(first.hash))?.revokedAt, null);
    assert.equal((await store.tokens.findById(second.id))?.name, 'laptop');
    assert.equal(await store.tokens.findById(randomUUID()), undefined);
    const paged = async (tenantId?: string) =>
      (await allPages((pageToken) => store.tokens.page({ limit: 1, ...(pageToken === undefined ? {} : { pageToken }), ...(tenantId === undefined ? {} : { tenantId }) }))).map((t) => t.name);
    assert.deepEqual(await paged(), ['admin', 'laptop', 'ci'], 'every tenant, newest first, the revoked one too');
    assert.deepEqual(await paged('acme'), ['laptop', 'ci']);
  });

  withStore('injection rules: listed per tenant and runtime, counted per secret, asked for by the VM host of their runtime, deleted one by one and per runtime', async (store) => {
    const [a, b] = [runtime('acme', 'a'), runtime('acme', 'b')];
    const s = secret('acme', 'key');
    await store.runtimes.insert(a);
    await store.runtimes.insert(b);
    await store.secrets.insert(s);
    const rules = [rule(a, s), rule(a, s), rule(b, s)];
    for (const r of rules) await store.rules.insert(r);
    assert.deepEqual(await store.rules.find('acme', rules[0]!.id.toUpperCase()), rules[0]);
    assert.equal(await store.rules.find('other', rules[0]!.id), undefined);
    assert.deepEqual((await allPages((pageToken) => store.rules.list('acme', { limit: 1, pageToken }))).map((r) => r.id), rules.map((r) => r.id).reverse());
    assert.deepEqual((await store.rules.list('acme', { limit: 10 }, a.id)).items.map((r) => r.id), [rules[1]!.id, rules[0]!.id]);
    assert.deepEqual(await store.rules.listForRuntime(a.id), rules.slice(0, 2));
    assert.equal(await store.rules.countForSecret(s.id), 3);
    assert.equal(await store.rules.namesSecretOnNode('acme', s.id, 'host-1'), false, 'no runtime of it on any host');
    await store.runtimes.update({ ...b, node: 'host-1' });
    assert.equal(await store.rules.namesSecretOnNode('acme', s.id, 'host-1'), true);
    assert.equal(await store.rules.namesSecretOnNode('acme', s.id, 'host-2'), false, 'another host');
    assert.equal(await store.rules.namesSecretOnNode('other', s.id, 'host-1'), false, 'another tenant');
    assert.equal(await store.rules.delete('acme', rules[2]!.id), true);
    assert.equal(await store.rules.namesSecretOnNode('acme', s.id, 'host-1'), false, 'its rule deleted');
    assert.equal(await store.rules.deleteForRuntime(a.id), 2);
    assert.equal(await store.rules.countForSecret(s.id), 0);
    // A rule of the tenant's on another tenant's runtime, which the API never makes, counts for nothing.
    const theirs = { ...runtime('other', 'theirs'), node: 'host-2' };
    await store.runtimes.insert(theirs);
    await store.rules.insert({ ...rule(theirs, s), tenantId: 'acme' });
    assert.equal(await store.rules.namesSecretOnNode('acme', s.id, 'host-2'), false, "another tenant's runtime");
  });

  withStore('checkpoints: a tenant sees its own and, when asked, the system ones; deleted ones are hidden and free their name', async (store) => {
    const system = checkpoint(null, 'base');
    const mine = checkpoint('acme', 'base');
    const other = checkpoint('other', 'snap');
    for (const c of [system, mine, other]) await store.checkpoints.insert(c);
    assert.deepEqual(await store.checkpoints.find('acme', 'base', true), mine, "the tenant's own comes before the system one of the same name");
    assert.deepEqual(await store.checkpoints.find('other', 'base', true), system);
    assert.equal(await store.checkpoints.find('other', 'base'), undefined);
    assert.deepEqual(await store.checkpoints.find(null, system.id, true), system);
    assert.equal(await store.checkpoints.find('acme', other.id, true), undefined);
    await rejectsWith(store.checkpoints.insert(checkpoint('acme', 'base')), 'already_exists');

    await store.checkpoints.update({ ...mine, deleted: true });
    assert.deepEqual(await store.checkpoints.find('acme', 'base', true), system);
    const again = checkpoint('acme', 'base', { state: 'creating', diskBytes: null, parentCheckpointId: mine.id });
    await store.checkpoints.insert(again);
    assert.deepEqual(await store.checkpoints.find('acme', again.id), again);
    assert.deepEqual((await store.checkpoints.list('acme', { limit: 10 }, true)).items.map((c) => c.id), [again.id, system.id]);
    assert.deepEqual((await store.checkpoints.list('acme', { limit: 10 }, false)).items.map((c) => c.id), [again.id]);
    assert.equal((await store.checkpoints.listAll()).length, 4, 'listAll includes the deleted ones, whose files may still be needed');
    await store.checkpoints.purge(mine.id);
    assert.deepEqual((await store.checkpoints.listAll()).map((c) => c.id), [system.id, other.id, again.id]);
  });

  withStore('checkpoints: a move to another VM host happens once, only from the host that holds it, never for a deleted one', async (store) => {
    const cp = checkpoint('acme', 'snap', { node: 'host-a' });
    const gone = checkpoint('acme', 'gone', { node: 'host-a', deleted: true });
    for (const c of [cp, gone]) await store.checkpoints.insert(c);
    const racers = await Promise.all([store.checkpoints.moveNode(cp.id, 'host-a', 'host-b'), store.checkpoints.moveNode(cp.id, 'host-a', 'host-c')]);
    assert.deepEqual(racers.filter(Boolean).length, 1, 'two hosts taking the same checkpoint: one wins');
    const winner = racers[0] ? 'host-b' : 'host-c';
    assert.deepEqual(await store.checkpoints.find('acme', cp.id), { ...cp, node: winner }, 'only the node changes');
    assert.equal(await store.checkpoints.moveNode(cp.id, 'host-a', 'host-d'), false, 'it is no longer on host-a');
    assert.equal(await store.checkpoints.moveNode(gone.id, 'host-a', 'host-b'), false);
    assert.equal((await store.checkpoints.listAll()).find((c) => c.id === gone.id)?.node, 'host-a');
  });

  withStore('checkpoints: those of a host not yet in object storage are listed until their record digest is set; a deleted one is not set', async (store) => {
    const [a1, a2, b1] = [checkpoint('acme', 'a1', { node: 'host-a' }), checkpoint('acme', 'a2', { node: 'host-a' }), checkpoint('acme', 'b1', { node: 'host-b' })];
    const creating = checkpoint('acme', 'a3', { node: 'host-a', state: 'creating', diskBytes: null });
    const system = checkpoint(null, 'system-x-on-host-a', { node: 'host-a' });
    const gone = checkpoint('acme', 'gone', { node: 'host-a', deleted: true });
    const single = checkpoint('acme', 'single', { node: null });
    for (const c of [a1, a2, b1, creating, system, gone, single]) await store.checkpoints.insert(c);
    assert.deepEqual(await store.checkpoints.listUnarchived('host-a'), [a1.id, a2.id], 'ready tenant checkpoints of that host, oldest first');
    assert.deepEqual(await store.checkpoints.listUnarchived(null), [single.id]);
    assert.equal(await store.checkpoints.archiveDigest(a1.id), null);
    const digest = 'ab'.repeat(32);
    assert.equal(await store.checkpoints.setArchived(a1.id, digest), true);
    assert.equal(await store.checkpoints.archiveDigest(a1.id), digest);
    assert.deepEqual(await store.checkpoints.listUnarchived('host-a'), [a2.id]);
    assert.equal(await store.checkpoints.setArchived(gone.id, digest), false, 'a deleted one is not recorded as stored');
    // An update of the row (a state change, a move) keeps what object storage holds.
    await store.checkpoints.update({ ...a1, stateMessage: 'moved' });
    assert.equal(await store.checkpoints.moveNode(a1.id, 'host-a', 'host-b'), true);
    assert.equal(await store.checkpoints.archiveDigest(a1.id), digest);
    assert.equal(await store.checkpoints.archiveDigest('00000000-0000-4000-8000-000000000000'), null);
  });

  withStore('runtimes: a hand-over to another VM host is a compare-and-swap on node and updated_at, never for a runtime being deleted', async (store) => {
    const rt = { ...runtime('acme', 'mover'), node: 'host-a' };
    const dying = { ...runtime('acme', 'dying', 'deleting'), node: 'host-a' };
    for (const r of [rt, dying]) await store.runtimes.insert(r);
    const seen = { node: 'host-a', updatedAt: rt.updatedAt };
    const stamp = '2030-01-01T00:00:00.000Z';
    // The target's commit and the source's fence race on the same expectation: one wins.
    const racers = await Promise.all([
      store.runtimes.handOver(rt.id, seen, { node: 'host-b', statusMessage: null, updatedAt: stamp }),
      store.runtimes.handOver(rt.id, seen, { node: 'host-a', statusMessage: null, updatedAt: stamp }),
    ]);
    assert.equal(racers.filter(Boolean).length, 1, 'exactly one of the two takes it');
    const after = await store.runtimes.findById(rt.id);
    assert.deepEqual(after, { ...rt, node: racers[0] ? 'host-b' : 'host-a', statusMessage: null, updatedAt: stamp }, 'only node, message and stamp change');
    assert.equal(await store.runtimes.handOver(rt.id, seen, { node: 'host-c', statusMessage: null, updatedAt: stamp }), false, 'a stale stamp takes nothing');
    assert.equal(await store.runtimes.handOver(dying.id, { node: 'host-a', updatedAt: dying.updatedAt }, { node: 'host-b', statusMessage: null, updatedAt: stamp }), false);
  });

  withStore('fleet settings: the first value proposed is everyone\'s, however many propose at once', async (store) => {
    const proposals = await Promise.all(['a', 'b', 'c', 'd'].map((v) => store.nodes.shared('egress-ca', v)));
    assert.equal(new Set(proposals).size, 1, 'every proposer is told the same value');
    assert.ok(['a', 'b', 'c', 'd'].includes(proposals[0]!));
    assert.equal(await store.nodes.shared('egress-ca', 'e'), proposals[0], 'a later proposal changes nothing');
    assert.equal(await store.nodes.shared('other', 'x'), 'x');
  });

  withStore("enrollments: a host's is kept under its name, replaced when it is enrolled again, and no other host's", async (store) => {
    assert.equal(await store.nodes.credential('host-a'), undefined);
    await store.nodes.enroll('host-a', 'first');
    await store.nodes.enroll('host-b', 'other');
    await store.nodes.enroll('host-a', 'renewed');
    assert.equal(await store.nodes.credential('host-a'), 'renewed');
    assert.equal(await store.nodes.credential('host-b'), 'other');
    assert.equal(await store.nodes.shared('host-a', 'x'), 'x', 'a setting of the same name is another thing');
  });

  withStore('audits: a batch stored in order, filtered, pruned to the retention keeping each live runtime its newest', async (store) => {
    const [a, b] = [runtime('acme', 'a'), runtime('acme', 'b')];
    await store.runtimes.insert(a);
    await store.runtimes.insert(b);
    const gone = runtime('acme', 'gone');
    const batch = [...Array.from({ length: 6 }, (_, i) => audit(a, `a${i}`)), audit(gone, 'g0'), ...Array.from({ length: 3 }, (_, i) => audit(b, `b${i}`))];
    await store.audits.insert(batch);
    await store.audits.insert([]);
    await store.audits.insert([audit(runtime('other', 'x'), 'o0')]);
    const hosts = async (filter: { runtimeId?: string } = {}) =>
      (await allPages((pageToken) => store.audits.list('acme', { limit: 3, pageToken, ...filter }))).map(hostOf);
    assert.deepEqual(await hosts(), batch.map(hostOf).reverse());
    assert.deepEqual(await hosts({ runtimeId: b.id }), ['b2', 'b1', 'b0']);
    assert.deepEqual((await store.audits.list('acme', { limit: 10, category: 'nothing' })).items, []);

    // Keep the tenant's newest 2 and each runtime's newest 1: a's newest (a5) stays although older than b's.
    assert.equal(await store.audits.prune(['acme'], { perTenant: 2, perRuntime: 1 }), 7);
    assert.deepEqual(await hosts(), ['b2', 'b1', 'a5']);
    assert.equal(await store.audits.prune(['acme'], { perTenant: 2, perRuntime: 1 }), 0);
    assert.equal((await store.audits.list('other', { limit: 10 })).items.length, 1, "another tenant's audits are not touched");
  });

  withStore('quotas: usage counts every runtime but only the live ones resources, and checkpoints not deleted', async (store) => {
    await store.runtimes.insert(runtime('acme', 'on', 'running', 2, 1024));
    await store.runtimes.insert(runtime('acme', 'new', 'creating', 1, 512));
    await store.runtimes.insert(runtime('acme', 'off', 'shutdown', 8, 8192));
    await store.runtimes.insert(runtime('other', 'on', 'running', 4, 4096));
    await store.checkpoints.insert(checkpoint('acme', 'one', { diskBytes: 5_000_000_000 }));
    await store.checkpoints.insert(checkpoint('acme', 'pending', { state: 'creating', diskBytes: null }));
    await store.checkpoints.insert(checkpoint('acme', 'gone', { deleted: true, diskBytes: 7 }));
    assert.deepEqual(await store.quotas.usage('acme'), { runtimes: 3, vcpus: 3, memoryMib: 1536, checkpoints: 2, checkpointBytes: 5_000_000_000, templates: 0, templateBytes: 0 });
    assert.deepEqual(await store.quotas.usage('nobody'), { runtimes: 0, vcpus: 0, memoryMib: 0, checkpoints: 0, checkpointBytes: 0, templates: 0, templateBytes: 0 });
  });

  withStore('quota overrides: merged limit by limit, null puts one back, none left removes them; concurrent changes all land', async (store) => {
    await store.quotas.setOverrides('acme', { runtimes: 5 });
    await store.quotas.setOverrides('acme', { vcpus: 8 });
    assert.deepEqual(await store.quotas.overrides('acme'), { runtimes: 5, vcpus: 8 });
    await store.quotas.setOverrides('acme', { runtimes: null });
    assert.deepEqual(await store.quotas.overrides('acme'), { vcpus: 8 });
    await store.quotas.setOverrides('acme', { vcpus: null });
    assert.deepEqual(await store.quotas.overrides('acme'), {});
    await Promise.all([
      store.quotas.setOverrides('acme', { runtimes: 1 }),
      store.quotas.setOverrides('acme', { vcpus: 2 }),
      store.quotas.setOverrides('acme', { memoryMib: 3 }),
      store.quotas.setOverrides('acme', { checkpoints: 4 }),
      store.quotas.setOverrides('acme', { checkpointGib: 5 }),
    ]);
    assert.deepEqual(await store.quotas.overrides('acme'), { runtimes: 1, vcpus: 2, memoryMib: 3, checkpoints: 4, checkpointGib: 5 });
  });

  withStore('runtimes and checkpoints keep the node they live on, or none', async (store) => {
    const placed = { ...runtime('acme', 'placed'), node: 'host-a' };
    const single = runtime('acme', 'single');
    await store.runtimes.insert(placed);
    await store.runtimes.insert(single);
    assert.deepEqual(await store.runtimes.find('acme', 'placed'), placed);
    assert.equal((await store.runtimes.find('acme', 'single'))?.node, null);
    await store.runtimes.update({ ...placed, node: 'host-b' });
    assert.equal((await store.runtimes.findById(placed.id))?.node, 'host-b', 'a runtime moved to another node');
    assert.deepEqual((await store.runtimes.listAll()).map((r) => r.node), ['host-b', null]);

    const held = checkpoint('acme', 'held', { node: 'host-a' });
    await store.checkpoints.insert(held);
    await store.checkpoints.insert(checkpoint('acme', 'anywhere'));
    assert.deepEqual(await store.checkpoints.find('acme', 'held'), held);
    assert.equal((await store.checkpoints.find('acme', 'anywhere'))?.node, null);
    await store.checkpoints.update({ ...held, node: null });
    assert.equal((await store.checkpoints.find('acme', held.id))?.node, null);
  });

  withStore('nodes: a renewal registers a node, alive, with its lease and capacity; found and listed by name', async (store) => {
    assert.deepEqual(await store.nodes.list(), []);
    assert.equal(await store.nodes.find('host-b'), undefined);
    const b = await store.nodes.renew(registration('host-b', { ingressAddress: null }), 30);
    assert.equal(b.alive, true);
    assert.equal(b.draining, false);
    assert.equal(b.ingressAddress, null);
    assert.deepEqual(b.capacity, registration('host-b').capacity);
    assert.equal(Date.parse(b.leaseExpiresAt) - Date.parse(b.registeredAt), 30_000, 'the lease runs 30 s from the registration');
    assert.equal(new Date(b.leaseExpiresAt).toISOString(), b.leaseExpiresAt, 'times are ISO strings');
    const a = await store.nodes.renew(registration('host-a'), 30);
    const c = await store.nodes.renew(registration('Host-C'), 30);
    assert.deepEqual(await store.nodes.find('host-b'), b);
    assert.deepEqual(await store.nodes.list(), [c, a, b], 'by name, byte order');
  });

  withStore('nodes: a lease that runs out leaves the node registered but not alive', async (store) => {
    const expired = await store.nodes.renew(registration('host-a'), 0);
    assert.equal(expired.alive, false, 'a lease of 0 s is over at once');
    assert.equal((await store.nodes.find('host-a'))?.alive, false);
    const short = await store.nodes.renew(registration('host-a'), 1);
    assert.equal(short.alive, true);
    // The database's clock decides; poll until it has passed the end of the lease.
    const gone = await eventually(() => store.nodes.find('host-a'), (n) => n?.alive === false, 15_000);
    assert.equal(gone?.leaseExpiresAt, short.leaseExpiresAt);
    assert.deepEqual((await store.nodes.list()).map((n) => [n.name, n.alive]), [['host-a', false]]);
    assert.equal((await store.nodes.renew(registration('host-a'), 30)).alive, true, 'a renewal brings it back');
  });

  withStore('nodes: a renewal updates address and capacity, and keeps draining and the first registration', async (store) => {
    const first = await store.nodes.renew(registration('host-a'), 30);
    assert.equal(await store.nodes.setDraining('host-a', true), true);
    assert.equal((await store.nodes.find('host-a'))?.draining, true);
    const moved = registration('host-a', {
      internalUrl: 'http://10.0.0.9:8082',
      ingressAddress: null,
      capacity: { memoryMib: 8192, vcpus: 4, runtimes: 20, diskBytes: 7_000_000_000_000 },
    });
    const again = await store.nodes.renew(moved, 60);
    assert.ok(again.leaseExpiresAt > first.leaseExpiresAt, 'the lease runs from the renewal');
    assert.deepEqual({ ...again, leaseExpiresAt: '' }, { ...moved, draining: true, alive: true, leaseExpiresAt: '', registeredAt: first.registeredAt });
    assert.deepEqual(await store.nodes.find('host-a'), again);
    assert.equal(await store.nodes.setDraining('host-a', false), true);
    assert.equal((await store.nodes.renew(moved, 60)).draining, false, 'undrained stays undrained');
  });

  withStore("nodes: a name is its holder's while its lease runs; another host under it is refused, then takes it once the lease ran out", async (store) => {
    const first = await store.nodes.renew(registration('host-a'), 30);
    assert.equal(first.holder, 'holder-of-host-a');
    await rejectsWith(store.nodes.renew(registration('host-a', { holder: 'another-host', internalUrl: 'http://elsewhere:8082' }), 30), 'failed_precondition');
    const kept = await store.nodes.find('host-a');
    assert.deepEqual([kept?.holder, kept?.internalUrl], ['holder-of-host-a', first.internalUrl], 'the refused one changed nothing');
    assert.equal((await store.nodes.renew(registration('host-a'), 0)).holder, 'holder-of-host-a', 'its own host renews (here, to a lapsed lease)');
    const taken = await store.nodes.renew(registration('host-a', { holder: 'another-host' }), 30);
    assert.deepEqual([taken.holder, taken.alive], ['another-host', true], 'a lapsed lease is taken');
    await rejectsWith(store.nodes.renew(registration('host-a'), 30), 'failed_precondition');
  });

  withStore('nodes: draining one that never registered is false, and registers nothing', async (store) => {
    assert.equal(await store.nodes.setDraining('nowhere', true), false);
    assert.deepEqual(await store.nodes.list(), []);
  });

  withStore("nodes' load: every runtime placed on a node counted, the vCPUs and memory of live ones only; none for runtimes without a node", async (store) => {
    const on = (node: string | null, name: string, status: RuntimeStatus, vcpus: number, memoryMib: number, tenant = 'acme') => ({ ...runtime(tenant, name, status, vcpus, memoryMib), node });
    assert.deepEqual(await store.nodes.load(), new Map());
    for (const rt of [
      on('host-a', 'a1', 'running', 2, 1024),
      on('host-a', 'a2', 'creating', 1, 512),
      on('host-a', 'a3', 'paused', 1, 256, 'other'),
      on('host-a', 'a4', 'shutdown', 8, 8192),
      on('host-a', 'a5', 'suspended', 4, 4096),
      on('host-b', 'b1', 'crashed', 4, 4096),
      on(null, 'single', 'running', 16, 16_384),
    ]) await store.runtimes.insert(rt);
    // host-a: running, creating and paused hold a VM (2 + 1 + 1 vCPUs, 1024 + 512 + 256 MiB); shutdown and suspended do not.
    const load = await store.nodes.load();
    assert.deepEqual(load, new Map([['host-a', { runtimes: 5, vcpus: 4, memoryMib: 1792 }], ['host-b', { runtimes: 1, vcpus: 0, memoryMib: 0 }]]));
  });

  withStore("nodes' load follows every kind of write: a status in and out of a VM, a move between hosts, onto one and off it, new resources, a delete", async (store) => {
    /** The load as a sum over what is stored: what the kept counts must always equal. */
    const summed = async (): Promise<Map<string, { runtimes: number; vcpus: number; memoryMib: number }>> => {
      const all = [...(await store.runtimes.list('acme', { limit: 1000 })).items, ...(await store.runtimes.list('other', { limit: 1000 })).items];
      const sums = new Map<string, { runtimes: number; vcpus: number; memoryMib: number }>();
      for (const rt of all) {
        if (rt.node === null) continue;
        const was = sums.get(rt.node) ?? { runtimes: 0, vcpus: 0, memoryMib: 0 };
        const live = LIVE_STATUSES.includes(rt.status);
        sums.set(rt.node, { runtimes: was.runtimes + 1, vcpus: was.vcpus + (live ? rt.resources.vcpus : 0), memoryMib: was.memoryMib + (live ? rt.resources.limits.memory_mib : 0) });
      }
      return sums;
    };
    const agrees = async (step: string) => assert.deepEqual(await store.nodes.load(), await summed(), step);
    const a = { ...runtime('acme', 'a', 'creating', 2, 1024), node: 'host-a' };
    const b = { ...runtime('other', 'b', 'running', 1, 512), node: 'host-b' };
    const c = { ...runtime('acme', 'c', 'running', 4, 2048), node: null };
    for (const rt of [a, b, c]) await store.runtimes.insert(rt);
    await agrees('inserted');
    let next: Runtime = { ...a, status: 'running' };
    await store.runtimes.update(next);
    await agrees('creating to running');
    next = { ...next, status: 'shutdown' };
    await store.runtimes.update(next);
    await agrees('out of a VM');
    next = { ...next, status: 'paused' };
    await store.runtimes.update(next);
    await agrees('back in one');
    next = { ...next, resources: resources(3, 768) };
    await store.runtimes.update(next);
    await agrees('new resources');
    next = { ...next, node: 'host-b' };
    await store.runtimes.update(next);
    await agrees('moved to another host');
    await store.runtimes.update({ ...c, node: 'host-a' });
    await agrees('placed on a host');
    await store.runtimes.update({ ...b, node: null, statusMessage: 'kept' });
    await agrees('taken off its host');
    await store.runtimes.update({ ...next, statusMessage: 'a change that moves no count' });
    await agrees('another column changed');
    assert.equal(await store.runtimes.delete('acme', a.id), true);
    assert.equal(await store.runtimes.delete('acme', c.id), true);
    await agrees('deleted');
    assert.deepEqual(await store.nodes.load(), new Map(), 'a host that holds nothing is not listed');
  });

  withStore('nodes: several stores renewing their own node and a shared one at once, each node stored once', async (store, reopen) => {
    const others = await Promise.all([reopen(), reopen(), reopen()]);
    try {
      const stores = [store, ...others];
      const shared = await store.nodes.renew(registration('shared'), 30);
      await Promise.all(
        stores.flatMap((s, i) => Array.from({ length: 5 }, (_, round) => [s.nodes.renew(registration(`host-${i}`, { capacity: { ...registration('x').capacity, runtimes: round } }), 30), s.nodes.renew(registration('shared'), 30)]).flat()),
      );
      const listed = await others[0]!.nodes.list();
      assert.deepEqual(listed.map((n) => n.name), ['host-0', 'host-1', 'host-2', 'host-3', 'shared']);
      assert.ok(listed.every((n) => n.alive));
      assert.equal(listed.find((n) => n.name === 'shared')?.registeredAt, shared.registeredAt, 'the shared node registered once');
    } finally {
      await Promise.all(others.map((s) => s.close()));
    }
  });

  withStore('what was stored is there after the store is reopened', async (store, reopen) => {
    const rt = runtime('acme', 'kept');
    await store.runtimes.insert(rt);
    await store.quotas.setOverrides('acme', { runtimes: 7 });
    const again = await reopen();
    try {
      assert.deepEqual(await again.runtimes.find('acme', 'kept'), rt);
      assert.deepEqual(await again.quotas.overrides('acme'), { runtimes: 7 });
    } finally {
      await again.close();
    }
  });
}
