/**
 * Each VM host's own key, and the grants hosts call each other with (src/cluster/fleet-keys.ts,
 * issue 26 §4): a host's key signs nothing another host accepts, and a grant opens one move's
 * routes on one host, for one tenant, until it expires, and nothing else.
 */
import { test } from 'node:test';
import assert from 'node:assert/strict';
import { FleetKeys, HOP_GRANT, HOP_GRANTS, HostGrants, hostKey } from '../../src/cluster/fleet-keys.js';
import { signHop, verifyHop, type VerifiedHop } from '../../src/cluster/hop.js';
import { NO_BODY } from '../../src/cluster/hop-body.js';
import type { Principal } from '../../src/core/types.js';

const SECRET = 'fleet-secret-'.repeat(4);
const fleet = new FleetKeys(SECRET);
const principal: Principal = { tokenId: 'tok', tenantId: 'acme', scopes: new Set(['runtimes:write']) };
const CP = '0b0e6f0e-8a2c-4d7e-9f57-2f6b7c1d0a11';
const OTHER_CP = '5c9d2b3e-1f4a-4e8b-8c7d-6a5b4c3d2e1f';

const accepted = (got: VerifiedHop | string): VerifiedHop => {
  if (typeof got === 'string') assert.fail(got);
  return got;
};

/** A hop as a caller holding `key` signs it for host `node`, with the extra headers given. */
function hop(key: string, node: string, method: string, url: string, extra: Record<string, string> = {}, who = principal) {
  const r = { method, url, requestId: `r-${Math.random()}`, node };
  return { headers: { ...extra, ...signHop(key, who, { ...r, body: NO_BODY }) }, r };
}

test('each host has a key of its own, derived from the fleet secret: no host can compute another host\'s key from its own', () => {
  const a = hostKey(SECRET, 'host-a');
  assert.match(a, /^[0-9a-f]{64}$/);
  assert.equal(a, hostKey(SECRET, 'host-a'), 'the same wherever an API node derives it');
  assert.notEqual(a, hostKey(SECRET, 'host-b'));
  assert.notEqual(a, hostKey(`${SECRET}x`, 'host-a'), 'another fleet, another key');
  assert.equal(fleet.keyOf('host-b'), hostKey(SECRET, 'host-b'));
});

test("a hop an API node signs for host A is refused by host B, and a hop signed with host A's own key is refused by host B", () => {
  const keyA = hostKey(SECRET, 'host-a');
  const keyB = hostKey(SECRET, 'host-b');
  const forA = hop(keyA, 'host-a', 'GET', '/v1/runtimes/x/processes');
  accepted(verifyHop(keyA, forA.headers, forA.r));
  assert.equal(typeof verifyHop(keyB, forA.headers, { ...forA.r, node: 'host-b' }), 'string');
  // What a compromised host A holds is its own key: signing a call for B with it gets nowhere.
  const forged = hop(keyA, 'host-b', 'POST', '/v1/runtimes/x/exec');
  assert.equal(verifyHop(keyB, forged.headers, forged.r), 'the hop signature does not match');
});

/** The grant an API node makes for host A to fetch checkpoint CP's files from host B. */
const checkpointGrant = (over: Partial<Parameters<FleetKeys['grant']>[0]> = {}) =>
  fleet.grant({ user: 'host-a', target: 'host-b', methods: ['GET', 'DELETE'], prefix: `/internal/checkpoints/${CP}/`, tenant: 'acme', expires: Date.now() + 60_000, ...over });

test('a grant lets its host call the other host for exactly what it names', () => {
  const keyB = hostKey(SECRET, 'host-b');
  const grants = HostGrants.of(hostKey(SECRET, 'host-a'), { [HOP_GRANTS]: checkpointGrant() });
  const call = (method: string, url: string, who = principal) => {
    const signing = grants.forCall('host-b', method, url, who.tenantId);
    const h = hop(signing.key, 'host-b', method, url, signing.headers, who);
    return verifyHop(keyB, h.headers, h.r);
  };
  accepted(call('GET', `/internal/checkpoints/${CP}/description`));
  accepted(call('GET', `/internal/checkpoints/${CP}/files/ram`));
  accepted(call('DELETE', `/internal/checkpoints/${CP}/files`));
  // The holder refuses what the grant does not name, whatever the caller signs.
  assert.throws(() => call('POST', `/internal/checkpoints/${CP}/move-here`), /no grant/);
  assert.throws(() => call('GET', `/internal/checkpoints/${OTHER_CP}/files/ram`), /no grant/);
  assert.throws(() => call('GET', '/v1/runtimes/x/files?path=/etc/shadow'), /no grant/);
  assert.throws(() => grants.forCall('host-c', 'GET', `/internal/checkpoints/${CP}/description`, 'acme'), /no grant/);
  assert.throws(() => grants.forCall('host-b', 'GET', `/internal/checkpoints/${CP}/description`, 'other-tenant'), /no grant/);
});

test('the called host checks the grant itself: a caller that stretches it is refused', () => {
  const keyB = hostKey(SECRET, 'host-b');
  const grants = HostGrants.of(hostKey(SECRET, 'host-a'), { [HOP_GRANTS]: checkpointGrant() });
  const signing = grants.forCall('host-b', 'GET', `/internal/checkpoints/${CP}/description`, 'acme');
  const refused = (method: string, url: string, headers = signing.headers, who = principal) => {
    const h = hop(signing.key, 'host-b', method, url, headers, who);
    return verifyHop(keyB, h.headers, h.r);
  };
  // The grant's key, used beyond its claims.
  assert.equal(refused('POST', `/internal/checkpoints/${CP}/move-here`), 'a grant for other methods');
  assert.equal(refused('GET', `/internal/checkpoints/${OTHER_CP}/description`), 'a grant for other paths');
  assert.equal(refused('GET', `/internal/checkpoints/${CP}/../${OTHER_CP}/description`), 'a grant for other paths');
  assert.equal(refused('GET', `/internal/checkpoints/${CP}/files/%2e%2e`), 'a grant for other paths');
  assert.equal(refused('GET', `/internal/checkpoints/${CP}/description`, signing.headers, { ...principal, tenantId: 'other' }), "a grant for another tenant's objects");
  // Claims rewritten to say more: the key derived from them is another, the signature fails.
  const claims = JSON.parse(Buffer.from(signing.headers[HOP_GRANT]!, 'base64url').toString()) as Record<string, unknown>;
  const widened = Buffer.from(JSON.stringify({ ...claims, prefix: '/internal/checkpoints/' })).toString('base64url');
  assert.equal(refused('GET', `/internal/checkpoints/${OTHER_CP}/description`, { [HOP_GRANT]: widened }), 'the hop signature does not match');
  // The grant's key alone, without the grant: it is not host B's key.
  assert.equal(refused('GET', `/internal/checkpoints/${CP}/description`, {}), 'the hop signature does not match');
  // Shown to another host, or once expired.
  const h = hop(signing.key, 'host-c', 'GET', `/internal/checkpoints/${CP}/description`, signing.headers);
  assert.equal(verifyHop(hostKey(SECRET, 'host-c'), h.headers, h.r), 'a grant for another host');
  const late = HostGrants.of(hostKey(SECRET, 'host-a'), { [HOP_GRANTS]: checkpointGrant({ expires: Date.now() - 1 }) });
  assert.throws(() => late.forCall('host-b', 'GET', `/internal/checkpoints/${CP}/description`, 'acme'), /no grant/);
});

test("a grant is sealed for its user: another host cannot use it, only hand it on to that user", () => {
  const forB = fleet.grant({ user: 'host-b', target: 'host-a', methods: ['GET'], prefix: `/internal/runtimes/${CP}/move/`, tenant: 'acme', expires: Date.now() + 60_000 });
  const forA = fleet.grant({ user: 'host-a', target: 'host-b', methods: ['POST'], prefix: `/internal/runtimes/${CP}/take?`, tenant: 'acme', expires: Date.now() + 60_000 });
  // Host A, moving a runtime away, received both: it uses its own, and hands B's on, sealed.
  const atA = HostGrants.of(hostKey(SECRET, 'host-a'), { [HOP_GRANTS]: `${forA},${forB}` });
  assert.throws(() => atA.forCall('host-a', 'GET', `/internal/runtimes/${CP}/move/c/description`, 'acme'), /no grant/, 'B\'s grant is not A\'s to use');
  const take = atA.forCall('host-b', 'POST', `/internal/runtimes/${CP}/take?from=host-a`, 'acme');
  assert.equal(take.headers[HOP_GRANTS], forB, 'handed on to its user as it came');
  // Host B opens it and may now read the capture on A; nothing else on A.
  const atB = HostGrants.of(hostKey(SECRET, 'host-b'), take.headers);
  const read = atB.forCall('host-a', 'GET', `/internal/runtimes/${CP}/move/c/files/ram`, 'acme');
  const h = hop(read.key, 'host-a', 'GET', `/internal/runtimes/${CP}/move/c/files/ram`, read.headers);
  accepted(verifyHop(hostKey(SECRET, 'host-a'), h.headers, h.r));
  assert.throws(() => atB.forCall('host-a', 'POST', `/internal/runtimes/${CP}/move-to?node=host-b`, 'acme'), /no grant/);
});
