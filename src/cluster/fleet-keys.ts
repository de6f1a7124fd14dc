/**
 * Who holds which key in a fleet (docs/scaling.md, "Keys"; docs/security.md, "API node to VM host").
 *
 * API nodes, and the operator's CLI, hold the fleet secret (VESSEL_INTERNAL_SECRET). A VM host
 * holds only its own key, derived from the secret for its name with HKDF (`hostKey`), which the
 * operator gives it as VESSEL_NODE_KEY (`vessel node enroll NAME` prints it). Everything a host
 * checks is under its own key: the hops API nodes send it, the PROXY headers of their ingress
 * entries, the frames of a hop's body. So a host's key signs nothing another host accepts, and a
 * compromised host can make no call to another host as if from an API node.
 *
 * Derivation, not keys issued one by one and stored: every API node can compute every host's key
 * at once from what it holds already, nothing is stored that a database reader could use, and a
 * host that joins needs one value from the operator. The price: a host's key changes only with the
 * fleet secret (a rotation of VESSEL_INTERNAL_SECRET re-keys every host).
 *
 * Hosts still call each other to move files (checkpoint-moves.ts, runtime-moves.ts). Such a call
 * is signed with a **grant**, which the API node (or the CLI) that starts the move makes for it:
 * claims naming the host that may call, the host it may call, the methods, a path prefix (one
 * checkpoint's or one runtime's move routes), the tenant and an expiry, and a key derived from the
 * called host's key over exactly those claims. The called host derives the same key from its own
 * key and the claims it is shown; any other claim gives another key. The grant's key travels to
 * the host that uses it sealed under that host's key (AES-256-GCM), so it crosses no network in
 * the clear, even without TLS; a host that must hand a grant on to the other host of a move
 * forwards it sealed as it came.
 */
import { createHmac, hkdfSync } from 'node:crypto';
import type { IncomingHttpHeaders } from 'node:http';
import { VesselError } from '../core/errors.js';
import { SecretBox } from '../core/secret-box.js';

/** The claims a hop signed under a grant carries (base64url of their JSON). */
export const HOP_GRANT = 'x-vessel-hop-grant';
/** Grants handed to a host for the calls it will make (or hand on), sealed for their user. */
export const HOP_GRANTS = 'x-vessel-hop-grants';
export const GRANT_HEADERS = [HOP_GRANT, HOP_GRANTS] as const;

/** A move sends few grants: at most this many are read from one request. */
const MAX_GRANTS = 4;
const MAX_GRANT_CHARS = 1024;

/** The key of VM host `node`: hex of 32 bytes, derived from the fleet secret and the host's name. */
export function hostKey(fleetSecret: string, node: string): string {
  return Buffer.from(hkdfSync('sha256', fleetSecret, 'vessel-host-key-v1', node, 32)).toString('hex');
}

/** A key for one purpose, from a host key: what is made with it cannot be passed off as anything else. */
export const subKey = (key: string, purpose: string): Buffer => Buffer.from(hkdfSync('sha256', key, 'vessel-host-subkey-v1', purpose, 32));

export interface GrantClaims {
  v: 1;
  /** The host that may call. */
  user: string;
  /** The host it may call, whose key the grant's key is derived from. */
  target: string;
  methods: string[];
  /** The path (and query) must start with this; it ends in `/` or `?`, so it names whole segments. */
  prefix: string;
  tenant: string;
  /** Epoch milliseconds. */
  expires: number;
}

/** The key a call under `claimsText` is signed with, from the called host's key. */
export const grantKey = (calledHostKey: string, claimsText: string): string => createHmac('sha256', calledHostKey).update('vessel-grant-v1\n').update(claimsText).digest('hex');

const encode = (claims: GrantClaims): string => Buffer.from(JSON.stringify(claims)).toString('base64url');

/** The claims of a grant header, or null when it is not one of ours. */
export function parseClaims(text: string): GrantClaims | null {
  if (text.length > MAX_GRANT_CHARS || !/^[A-Za-z0-9_-]+$/.test(text)) return null;
  try {
    const c = JSON.parse(Buffer.from(text, 'base64url').toString('utf8')) as Partial<GrantClaims>;
    const name = (s: unknown): s is string => typeof s === 'string' && s.length > 0 && s.length <= 253;
    if (c.v !== 1 || !name(c.user) || !name(c.target) || !name(c.tenant) || typeof c.prefix !== 'string' || !Number.isSafeInteger(c.expires)) return null;
    if (!Array.isArray(c.methods) || !c.methods.every((m) => typeof m === 'string')) return null;
    if (!/^\/internal\/[A-Za-z0-9/_.-]*[/?]$/.test(c.prefix) || c.prefix.includes('..')) return null;
    return c as GrantClaims;
  } catch {
    return null;
  }
}

/**
 * Why a call under `claims` to `node` is refused, or null when the grant covers it. The path must
 * be plain (no dot segments, no encoded bytes) so that the router reads it as the prefix says.
 */
export function grantRefusal(claims: GrantClaims, node: string, method: string, url: string, now: number): string | null {
  if (claims.target !== node) return 'a grant for another host';
  if (claims.expires < now) return 'an expired grant';
  if (!claims.methods.includes(method.toUpperCase())) return 'a grant for other methods';
  const path = url.split('?', 1)[0]!;
  if (!url.startsWith(claims.prefix) || path.includes('..') || path.includes('%') || path.includes('//')) return 'a grant for other paths';
  return null;
}

const wrapBox = (userKey: string): SecretBox => new SecretBox(subKey(userKey, 'grant-wrap'));

/** What a holder of the fleet secret hands a host: a grant to call `claims.target`, sealed for `claims.user`. */
export function makeGrant(fleetSecret: string, claims: Omit<GrantClaims, 'v'>): string {
  const full: GrantClaims = { v: 1, ...claims, methods: claims.methods.map((m) => m.toUpperCase()) };
  const text = encode(full);
  return `${text}~${wrapBox(hostKey(fleetSecret, full.user)).seal(grantKey(hostKey(fleetSecret, full.target), text), text)}`;
}

/** What signs one call to a VM host: the key, and headers that go with the signed ones. */
export interface CallKey {
  key: string;
  headers: Record<string, string>;
}

/** What a caller signs its calls to VM hosts with: the fleet secret on API nodes, grants on a host. */
export interface HopKeys {
  /** The key for a call to host `node`; throws when this holder may make no such call. */
  forCall(node: string, method: string, url: string, tenantId: string): CallKey;
}

/** An API node's or the CLI's keys: every host's, derived from the fleet secret; grants for moves are made here. */
export class FleetKeys implements HopKeys {
  readonly #keys = new Map<string, string>();

  constructor(private readonly secret: string) {}

  keyOf(node: string): string {
    let key = this.#keys.get(node);
    if (key === undefined) {
      // One per host ever named: a small map.
      key = hostKey(this.secret, node);
      this.#keys.set(node, key);
    }
    return key;
  }

  forCall(node: string): CallKey {
    return { key: this.keyOf(node), headers: {} };
  }

  grant(claims: Omit<GrantClaims, 'v'>): string {
    return makeGrant(this.secret, claims);
  }
}

interface HeldGrant {
  claims: GrantClaims;
  text: string;
  /** Null when the grant is not this host's to use: it is handed on to its user. */
  key: string | null;
  sealed: string;
}

/**
 * A VM host's keys for the calls one request makes: the grants that came with it. A grant sealed
 * for this host is used for calls to its target; one sealed for another host is handed on, as it
 * came, with the call to that host.
 */
export class HostGrants implements HopKeys {
  constructor(private readonly grants: readonly HeldGrant[]) {}

  /** The grants in a request's headers; those that are not ours to open are kept to hand on. */
  static of(nodeKey: string, headers: IncomingHttpHeaders): HostGrants {
    const raw = headers[HOP_GRANTS];
    if (typeof raw !== 'string' || raw === '') return new HostGrants([]);
    const held: HeldGrant[] = [];
    for (const item of raw.split(',').slice(0, MAX_GRANTS)) {
      const [text = '', sealed = ''] = item.trim().split('~');
      const claims = parseClaims(text);
      if (claims === null || sealed.length > MAX_GRANT_CHARS) continue;
      let key: string | null = null;
      try {
        key = wrapBox(nodeKey).open(sealed, text);
      } catch {
        // Sealed for another host: handed on, never opened here.
      }
      held.push({ claims, text, key, sealed });
    }
    return new HostGrants(held);
  }

  forCall(node: string, method: string, url: string, tenantId: string): CallKey {
    const now = Date.now();
    const usable = this.grants.find((g) => g.key !== null && g.claims.tenant === tenantId && grantRefusal(g.claims, node, method, url, now) === null);
    if (usable === undefined) throw new VesselError('internal', `this VM host holds no grant to call VM host '${node}' for ${method} ${url.split('?', 1)[0]}`);
    const handOn = this.grants.filter((g) => g.key === null && g.claims.user === node).map((g) => `${g.text}~${g.sealed}`);
    return { key: usable.key!, headers: { [HOP_GRANT]: usable.text, ...(handOn.length > 0 ? { [HOP_GRANTS]: handOn.join(',') } : {}) } };
  }
}

/** Grants to hand to the first host of a move, as the header that carries them. */
export const grantsHeader = (grants: string[]): Record<string, string> => (grants.length === 0 ? {} : { [HOP_GRANTS]: grants.join(',') });

/** A host key given by the operator: the 64 hex characters `hostKey` makes. */
export function checkNodeKey(key: string): string {
  if (!/^[0-9a-f]{64}$/.test(key)) throw new Error('VESSEL_NODE_KEY must be the 64 hex characters `vessel node enroll NAME` prints');
  return key;
}
