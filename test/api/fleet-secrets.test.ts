/**
 * Secrets on a fleet's VM hosts (docs/scaling.md, "Secrets on VM hosts"; issue 26 §4), on a real
 * PostgreSQL: an API node (the real API over the owner's role, with the route hosts ask) and a VM
 * host's core as `vessel serve --role node` builds it when enrolled: no master key, the hosts'
 * database role, and API nodes to unseal what its gateway injects. The host's gateway is the
 * real egress proxy and forwarder in this process (test/support/egress-harness.ts), its secrets
 * coming from the host's core (its VMs and their network are fakes: no VM is booted).
 *
 * Shown: injection works with no master key on the host; a host gets no secret of a runtime on
 * another host, none no rule of its runtimes names, none of another tenant; the request for one
 * is refused unsigned, signed with another host's key, changed, replayed, or with a grant; an API
 * node that is away costs a retry on the next; and the value appears in no answer but the one
 * sealed for the host, and in no log of either.
 */
import { after, before, test } from 'node:test';
import assert from 'node:assert/strict';
import { randomBytes, randomUUID } from 'node:crypto';
import { Writable } from 'node:stream';
import pino from 'pino';
import { FleetKeys, HOP_GRANTS, hostKey } from '../../src/cluster/fleet-keys.js';
import { NO_BODY } from '../../src/cluster/hop-body.js';
import { signHop } from '../../src/cluster/hop.js';
import { noVmDriver } from '../../src/cluster/no-vm-host.js';
import { enrolledHostSecrets, openAnswer, unsealRequest, unsealRoutes } from '../../src/cluster/secret-unsealing.js';
import { Core } from '../../src/core/core.js';
import { VesselError } from '../../src/core/errors.js';
import type { InjectionRule } from '../../src/core/types.js';
import { setUpHostRole } from '../../src/store/postgres-host-role.js';
import { PostgresStore } from '../../src/store/postgres-store.js';
import { apiHarness, ROOMY_TENANT_LIMITS, type ApiHarness } from '../support/api-harness.js';
import { EgressHarness } from '../support/egress-harness.js';
import { FakeGateway } from '../support/fake-gateway.js';
import { startPostgres, type PostgresCluster } from '../support/postgres-cluster.js';
import { freePort } from '../support/service.js';
import { runtime } from '../store/store-contract.js';

const FLEET_SECRET = randomBytes(32).toString('hex');
const KEY_1 = hostKey(FLEET_SECRET, 'host-1');
const KEY_2 = hostKey(FLEET_SECRET, 'host-2');
/** Values no other text of the test contains, so that any trace of one in an answer or a log is found. */
const VALUES = { onHost1: `sk-one-${randomBytes(12).toString('hex')}`, onHost2: `sk-two-${randomBytes(12).toString('hex')}`, unused: `sk-unused-${randomBytes(12).toString('hex')}`, globex: `sk-globex-${randomBytes(12).toString('hex')}` };

let cluster: PostgresCluster;
let api: ApiHarness;
let apiUrl: string;
let hostStore: PostgresStore;
let hostCore: Core;
let egress: EgressHarness;
/** Every line the API node logged, and every line the host did. */
const apiLines: string[] = [];
const hostLines: string[] = [];
/** Every answer the API node gave to a request to unseal, as text. */
const answers: string[] = [];
const ids: Record<keyof typeof VALUES, string> = { onHost1: '', onHost2: '', unused: '', globex: '' };
let onHost1: InjectionRule;

const capture = (lines: string[]) => ({ info: (o: object, m: string) => void lines.push(JSON.stringify([o, m])), warn: (o: object, m: string) => void lines.push(JSON.stringify([o, m])), error: (o: object, m: string) => void lines.push(JSON.stringify([o, m])) });

before(async () => {
  cluster = startPostgres();
  const ownerUrl = await cluster.createDatabase('fleet_secrets');
  const owner = await PostgresStore.open(ownerUrl);
  await setUpHostRole(ownerUrl, 'vessel_host', {});
  // The API node: the real API on the owner's role, its log kept whole (info: every request's line).
  const apiLog = pino({ level: 'info' }, new Writable({ write: (chunk, _enc, done) => (apiLines.push(String(chunk)), done()) }));
  api = await apiHarness({ store: owner, logger: apiLog, tenantLimits: ROOMY_TENANT_LIMITS, fleet: (core) => ({ routes: unsealRoutes(core, new FleetKeys(FLEET_SECRET)) }) });
  apiUrl = await api.app.listen({ host: '127.0.0.1', port: 0 });
  const capacity = { memoryMib: 1024, vcpus: 2, runtimes: 10, diskBytes: 1e10 };
  for (const name of ['host-1', 'host-2']) await owner.nodes.renew({ name, holder: randomUUID(), internalUrl: `https://${name}:8082`, ingressAddress: null, capacity }, 600);

  // The host, as serve builds an enrolled one: no master key, the hosts' role, the API node's address.
  hostStore = await PostgresStore.open(ownerUrl.replace('postgresql://vessel@', 'postgresql://vessel_host@'));
  const hostLog = capture(hostLines);
  const secrets = enrolledHostSecrets({ apiUrls: [apiUrl], nodeName: 'host-1', masterKey: undefined }, KEY_1, hostLog);
  assert.equal(secrets.box, null);
  hostCore = new Core({ store: hostStore, driver: noVmDriver(), gateway: new FakeGateway(), secretBox: secrets.box, unsealer: secrets.unsealer, log: hostLog, tenantLimits: ROOMY_TENANT_LIMITS, node: 'host-1' });
  egress = new EgressHarness(undefined, undefined, (tenantId, secretId) => hostCore.egress.revealSecret(tenantId, secretId));
  await egress.start();

  // Tenants make their secrets through the API node; runtimes are placed on the hosts.
  const acme = await api.token('acme', ['admin']);
  const globex = await api.token('globex', ['admin']);
  for (const [name, tenantToken] of [['onHost1', acme], ['onHost2', acme], ['unused', acme], ['globex', globex]] as const) {
    const made = await api.call('POST', '/v1/secrets', { name: `key-${name.toLowerCase()}`, value: VALUES[name] }, tenantToken);
    assert.equal(made.status, 201, JSON.stringify(made.body));
    ids[name] = made.body.data.id;
  }
  const web1 = { ...runtime('acme', 'web-1'), node: 'host-1' };
  const web2 = { ...runtime('acme', 'web-2'), node: 'host-2' };
  const globexWeb = { ...runtime('globex', 'web'), node: 'host-1' };
  await hostStore.runtimes.insert(web1);
  await hostStore.runtimes.insert(globexWeb);
  await owner.runtimes.insert(web2);
  // The host makes its own runtimes' rules, finding the secret by name without reading its value.
  const injection = { headerName: 'Authorization', valueFormat: 'Bearer ${credential}' };
  onHost1 = (await hostCore.rules.create('acme', 'web-1', { host: 'api.test', injection, secret: 'key-onhost1' })).rule;
  await hostCore.rules.create('globex', 'web', { host: 'api.test', injection, secret: 'key-globex' });
  await owner.rules.insert({ id: randomUUID(), tenantId: 'acme', runtimeId: web2.id, secretId: ids.onHost2, hostPattern: 'api.test', pathPattern: '/**', injection, createdAt: new Date().toISOString() });
});

after(async () => {
  await egress?.close();
  await hostCore?.egress.flush();
  await hostStore?.close();
  await api?.close();
  cluster?.stop();
});

/** A request to unseal sent as is: its status and body (kept, to look for values in later). */
async function ask(path: string, headers: Record<string, string>, init: RequestInit = {}): Promise<{ status: number; body: any }> {
  const res = await fetch(`${apiUrl}${path}`, { method: 'POST', headers, ...init });
  const text = await res.text();
  answers.push(text);
  return { status: res.status, body: JSON.parse(text) };
}

const refusedAs = (code: string) => (err: unknown) => err instanceof VesselError && err.code === code;

test('a host with no master key injects a secret that an API node unsealed for it', async () => {
  // The host cannot open it itself: it has no key, and its role may not read the sealed value.
  await assert.rejects(hostCore.secrets.reveal('acme', ids.onHost1), /no master key/);
  await assert.rejects(hostStore.secrets.findSealed('acme', ids.onHost1), /permission denied/);
  assert.deepEqual(await hostCore.egress.revealSecret('acme', ids.onHost1), { value: VALUES.onHost1, cacheTtlSecs: 0 });

  const net = egress.runtime(onHost1.runtimeId, '127.0.0.2', ['api.test'], [onHost1], 'acme');
  egress.destination = { address: '127.0.0.1', port: egress.up.port(egress.up.recorded) };
  const guest = egress.guestAgent(net.identity);
  const r = await egress.send(guest, 'GET', '/with-secret', ['Host', `api.test:${egress.destination.port}`]);
  assert.equal(r.status, 200);
  const sent = egress.up.hits('/with-secret')[0]!.rawHeaders;
  assert.equal(sent[sent.findIndex((h, i) => i % 2 === 0 && h.toLowerCase() === 'authorization') + 1], `Bearer ${VALUES.onHost1}`);
  guest.destroy();
});

test("a host gets no secret of a runtime on another host, none no rule of its runtimes names, none of another tenant's", async () => {
  const unsealer = enrolledHostSecrets({ apiUrls: [apiUrl], nodeName: 'host-1', masterKey: undefined }, KEY_1, capture(hostLines)).unsealer!;
  await assert.rejects(unsealer.unseal('acme', ids.onHost2), refusedAs('permission_denied'), "a rule of a runtime on host 2");
  await assert.rejects(unsealer.unseal('acme', ids.unused), refusedAs('permission_denied'), 'no rule at all');
  await assert.rejects(unsealer.unseal('acme', ids.globex), refusedAs('permission_denied'), "globex's secret asked for as acme's");
  assert.equal((await unsealer.unseal('globex', ids.globex))?.value, VALUES.globex, "globex's own runtime on host 1 has a rule for it");
  // Host 2, which runs web-2, gets its secret, and not host 1's.
  const host2 = enrolledHostSecrets({ apiUrls: [apiUrl], nodeName: 'host-2', masterKey: undefined }, KEY_2, capture(hostLines)).unsealer!;
  assert.equal((await host2.unseal('acme', ids.onHost2))?.value, VALUES.onHost2);
  await assert.rejects(host2.unseal('acme', ids.onHost1), refusedAs('permission_denied'));

  // A gateway made to ask anyway (a rule it should not have) fails the guest's request closed.
  const stray: InjectionRule = { ...onHost1, id: randomUUID(), secretId: ids.onHost2 };
  const net = egress.runtime(randomUUID(), '127.0.0.3', ['api.test'], [stray], 'acme');
  const guest = egress.guestAgent(net.identity);
  const r = await egress.send(guest, 'GET', '/stray-secret', ['Host', `api.test:${egress.destination.port}`]);
  assert.equal(r.status, 502);
  assert.equal(egress.up.hits('/stray-secret').length, 0, 'nothing went upstream');
  guest.destroy();

  // The store's truth at the time of asking: once its rule is deleted, host 1 gets the secret no more.
  const rule = (await hostCore.rules.create('acme', 'web-1', { host: 'other.test', injection: { headerName: 'X-Key' }, secret: 'key-unused' })).rule;
  assert.equal((await unsealer.unseal('acme', ids.unused))?.value, VALUES.unused);
  await hostCore.rules.delete('acme', rule.id);
  await assert.rejects(unsealer.unseal('acme', ids.unused), refusedAs('permission_denied'));
});

test('an API node that is away costs a retry on the next one; with none, the secret is unavailable', async () => {
  const away = `http://127.0.0.1:${await freePort()}`;
  const log: string[] = [];
  const unsealer = enrolledHostSecrets({ apiUrls: [away, apiUrl], nodeName: 'host-1', masterKey: undefined }, KEY_1, capture(log)).unsealer!;
  assert.equal((await unsealer.unseal('acme', ids.onHost1))?.value, VALUES.onHost1);
  assert.equal((await unsealer.unseal('acme', ids.onHost1))?.value, VALUES.onHost1);
  assert.equal(log.filter((l) => l.includes('the next one is asked')).length, 1, 'the one that answered is asked first from then on');
  assert.match(log[0]!, /ECONNREFUSED/);
  const alone = enrolledHostSecrets({ apiUrls: [away], nodeName: 'host-1', masterKey: undefined }, KEY_1, capture(log)).unsealer!;
  await assert.rejects(alone.unseal('acme', ids.onHost1), (err: unknown) => err instanceof VesselError && err.code === 'unavailable' && /no API node unsealed/.test(err.message));
  assert.throws(() => enrolledHostSecrets({ apiUrls: [], nodeName: 'host-1', masterKey: undefined }, KEY_1, capture(log)), /set VESSEL_API_URL/);
  hostLines.push(...log);
});

test('the request to unseal is refused unsigned, with another host\'s key, changed, replayed, or with a grant', async () => {
  const valid = unsealRequest('host-1', KEY_1, 'acme', ids.onHost1);
  const unsigned = await ask(valid.path, {});
  assert.equal(unsigned.status, 401);
  assert.equal(unsigned.body.error.code, 'unauthenticated');
  // Host 2's key, signing as host 1.
  const forged = unsealRequest('host-1', KEY_2, 'acme', ids.onHost1);
  assert.match((await ask(forged.path, forged.headers)).body.error.message, /signature does not match/);
  // Signed as API nodes sign their hops to host 1 (with host 1's key itself): a hop is no request to unseal.
  const principal = { tokenId: 'node:host-1', tenantId: 'acme', scopes: new Set<never>() };
  const hop = signHop(KEY_1, principal, { method: 'POST', url: valid.path, requestId: 'hop-1', node: 'host-1', body: NO_BODY });
  assert.match((await ask(valid.path, { ...hop, 'x-request-id': 'hop-1' })).body.error.message, /signature does not match/);
  // Host 1's headers on another path: another secret, another host, or a name no host has.
  assert.equal((await ask(`/internal/nodes/host-1/secrets/${ids.unused}/unseal`, valid.headers)).status, 401);
  assert.equal((await ask(`/internal/nodes/host-2/secrets/${ids.onHost1}/unseal`, valid.headers)).status, 401);
  const stranger = unsealRequest('host-9', hostKey(FLEET_SECRET, 'host-9'), 'acme', ids.onHost1);
  assert.match((await ask(stranger.path, stranger.headers)).body.error.message, /no VM host of that name/);
  // Another tenant in the principal is another MAC.
  const otherTenant = unsealRequest('host-1', KEY_1, 'globex', ids.onHost1);
  assert.equal((await ask(otherTenant.path, { ...otherTenant.headers, 'x-vessel-hop-principal': valid.headers['x-vessel-hop-principal']! })).status, 401);
  // A body the request was not signed with.
  const withBody = unsealRequest('host-1', KEY_1, 'acme', ids.onHost1);
  assert.equal((await ask(withBody.path, { ...withBody.headers, 'content-type': 'application/json' }, { body: '{"x":1}' })).status, 401);
  // A grant is for moves: never taken here.
  const granted = unsealRequest('host-1', KEY_1, 'acme', ids.onHost1);
  assert.match((await ask(granted.path, { ...granted.headers, [HOP_GRANTS]: 'x~y' })).body.error.message, /a grant/);

  // The valid one, once: then the same headers are a replay.
  const first = await ask(valid.path, valid.headers);
  assert.equal(first.status, 200);
  assert.equal(openAnswer('host-1', KEY_1, 'acme', ids.onHost1, valid.requestId, first.body.data.sealed)?.value, VALUES.onHost1);
  assert.throws(() => openAnswer('host-2', KEY_2, 'acme', ids.onHost1, valid.requestId, first.body.data.sealed), 'host 2 cannot open host 1\'s answer');
  assert.throws(() => openAnswer('host-1', KEY_1, 'acme', ids.onHost1, 'unseal-another-request', first.body.data.sealed), 'an answer to one request is no answer to another');
  const again = await ask(valid.path, valid.headers);
  assert.equal(again.status, 401);
  assert.match(again.body.error.message, /already used/);
  // Signed correctly by host 2, for a secret of a runtime on host 1: authenticated, and refused.
  const host2 = unsealRequest('host-2', KEY_2, 'acme', ids.onHost1);
  const denied = await ask(host2.path, host2.headers);
  assert.equal(denied.status, 403);
  assert.equal(denied.body.error.code, 'permission_denied');
});

test('a value appears in no answer but the sealed one, and in no log of the API node or the host', () => {
  const spellings = Object.values(VALUES).flatMap((v) => [v, Buffer.from(v).toString('base64'), Buffer.from(v).toString('base64url'), Buffer.from(v).toString('hex')]);
  assert.ok(answers.some((a) => a.includes('"sealed"')) && answers.some((a) => a.includes('permission_denied')) && answers.some((a) => a.includes('unauthenticated')));
  for (const text of [...answers, ...apiLines, ...hostLines]) for (const s of spellings) assert.ok(!text.includes(s), `a value in: ${text.slice(0, 300)}`);
  // The refusals were logged, naming host and secret.
  assert.ok(apiLines.some((l) => l.includes('a request to unseal a secret for a VM host was refused') && l.includes('host-9')));
  assert.ok(apiLines.some((l) => l.includes('no rule of a runtime on it names') && l.includes(ids.onHost2)));
});
