/**
 * The hop from an API node to a VM host (docs/scaling.md, "The hop"): the API node has
 * authenticated the caller, and tells the host who it is, under an HMAC of the per-cluster secret
 * (VESSEL_INTERNAL_SECRET). The MAC covers the method, the path with its query, the principal, the
 * request id, the host it is meant for and the time, so a captured header set opens nothing
 * else, goes stale in a minute, and is refused if it comes twice. Bodies are streamed (files run to a gigabyte) and not covered: the hop runs on the
 * cluster's private network, and mTLS from a service mesh, where one is wanted, adds secrecy and
 * body integrity without a change here.
 */
import { createHmac, timingSafeEqual } from 'node:crypto';
import type { IncomingHttpHeaders } from 'node:http';
import { SCOPES, type Principal, type Scope } from '../core/types.js';

export const HOP_PRINCIPAL = 'x-vessel-hop-principal';
export const HOP_TIME = 'x-vessel-hop-time';
export const HOP_SIGNATURE = 'x-vessel-hop-signature';
export const HOP_HEADERS = [HOP_PRINCIPAL, HOP_TIME, HOP_SIGNATURE] as const;

/** How far a hop's time may be from the host's clock: hosts keep NTP time, and a request takes well under this to arrive. */
const MAX_SKEW_MS = 60_000;
/** A principal is an id, a tenant and a few scopes: anything longer is not one of ours. */
const MAX_PRINCIPAL_CHARS = 2048;
export const MIN_SECRET_CHARS = 32;

export interface HopRequest {
  method: string;
  /** The path and query exactly as sent on the request line. */
  url: string;
  requestId: string;
  /** The VM host it is meant for: a hop captured on its way to one host opens nothing on another. */
  node: string;
}

const mac = (secret: string, time: string, principal: string, r: HopRequest): Buffer =>
  createHmac('sha256', secret).update(['vessel-hop-v1', time, r.method.toUpperCase(), r.url, principal, r.requestId, r.node].join('\n')).digest();

export function signHop(secret: string, principal: Principal, r: HopRequest, now = Date.now()): Record<string, string> {
  const encoded = Buffer.from(JSON.stringify({ token_id: principal.tokenId, tenant_id: principal.tenantId, scopes: [...principal.scopes] })).toString('base64url');
  const time = String(now);
  return { [HOP_PRINCIPAL]: encoded, [HOP_TIME]: time, [HOP_SIGNATURE]: mac(secret, time, encoded, r).toString('base64url') };
}

export const hasHopHeaders = (headers: IncomingHttpHeaders): boolean => HOP_HEADERS.some((h) => headers[h] !== undefined);

/**
 * The signatures a host accepted within the skew window: a hop is good once. Only a holder of
 * the secret can add to it, so it holds no more than the hops API nodes sent in that minute.
 */
export class SeenHops {
  readonly #until = new Map<string, number>();

  /** False when this signature was seen before. */
  firstTime(signature: string, now = Date.now()): boolean {
    if (this.#until.has(signature)) return false;
    this.#until.set(signature, now + 2 * MAX_SKEW_MS);
    // Insertion order is expiry order: the stale ones are at the front.
    for (const [sig, until] of this.#until) {
      if (until > now) break;
      this.#until.delete(sig);
    }
    return true;
  }
}

/** The principal the API node vouches for, or why the hop is refused (never which part of the MAC failed). */
export function verifyHop(secret: string, headers: IncomingHttpHeaders, r: HopRequest, now = Date.now(), seen?: SeenHops): Principal | string {
  const [encoded, time, signature] = HOP_HEADERS.map((h) => headers[h]);
  if (typeof encoded !== 'string' || typeof time !== 'string' || typeof signature !== 'string') return 'incomplete hop headers';
  if (encoded.length > MAX_PRINCIPAL_CHARS || !/^\d{1,15}$/.test(time)) return 'malformed hop headers';
  if (Math.abs(now - Number(time)) > MAX_SKEW_MS) return 'the hop is too old, or the clocks of the API node and this host disagree by over a minute';
  const expected = mac(secret, time, encoded, r);
  const given = Buffer.from(signature, 'base64url');
  if (given.length !== expected.length || !timingSafeEqual(given, expected)) return 'the hop signature does not match';
  const principal = parsePrincipal(encoded);
  if (principal === null) return 'malformed hop principal';
  if (seen !== undefined && !seen.firstTime(signature, now)) return 'this hop was already used';
  return principal;
}

function parsePrincipal(encoded: string): Principal | null {
  try {
    const p = JSON.parse(Buffer.from(encoded, 'base64url').toString('utf8')) as { token_id?: unknown; tenant_id?: unknown; scopes?: unknown };
    if (typeof p.token_id !== 'string' || typeof p.tenant_id !== 'string' || !Array.isArray(p.scopes)) return null;
    const scopes = p.scopes.filter((s): s is Scope => (SCOPES as readonly unknown[]).includes(s));
    if (scopes.length !== p.scopes.length) return null;
    return { tokenId: p.token_id, tenantId: p.tenant_id, scopes: new Set(scopes) };
  } catch {
    return null;
  }
}
