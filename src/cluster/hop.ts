/**
 * The hop from an API node to a VM host (docs/scaling.md, "The hop"): the API node has
 * authenticated the caller, and tells the host who it is, under an HMAC keyed with that host's
 * own key (fleet-keys.ts: derived from VESSEL_INTERNAL_SECRET, which API nodes hold and hosts do
 * not). The MAC covers the method, the path with its query, the principal, the request id, the
 * host it is meant for, the time and the body (hop-body.ts: a digest, or frames each checked
 * under a key derived from this MAC), so a captured header set opens nothing else,
 * carries no other body, goes stale in a minute, and is refused if it comes twice.
 *
 * The signature is read strictly: exactly the 43 characters of base64url that encode 32 bytes,
 * nothing Node's lenient decoder would skip (`=`, characters outside the alphabet, unused low
 * bits of the last character). Otherwise `sig=` or `sig!` decoded to the same MAC under another
 * text, and the replay check, which remembered texts, let a used hop through again.
 */
import { createHmac, timingSafeEqual } from 'node:crypto';
import type { IncomingHttpHeaders } from 'node:http';
import type { Readable } from 'node:stream';
import { SCOPES, type Principal, type Scope } from '../core/types.js';
import { SeenOnce } from '../platform/seen-once.js';
import { BodyUnframer, WholeBodyCheck, checkedBody, frameKey, parseBodyName } from './hop-body.js';
import { HOP_GRANT, grantKey, grantRefusal, parseClaims } from './fleet-keys.js';

export const HOP_PRINCIPAL = 'x-vessel-hop-principal';
export const HOP_TIME = 'x-vessel-hop-time';
export const HOP_SIGNATURE = 'x-vessel-hop-signature';
/** How the body is bound: `whole <length> <sha256>` or `frames` (hop-body.ts). */
export const HOP_BODY = 'x-vessel-hop-body';
export const HOP_HEADERS = [HOP_PRINCIPAL, HOP_TIME, HOP_SIGNATURE, HOP_BODY] as const;

/** How far a hop's time may be from the host's clock: hosts keep NTP time, and a request takes well under this to arrive. */
const MAX_SKEW_MS = 60_000;
/** A principal is an id, a tenant and a few scopes: anything longer is not one of ours. */
const MAX_PRINCIPAL_CHARS = 2048;
export const MIN_SECRET_CHARS = 32;
/** The one text of a 32-byte MAC in base64url without padding. */
const MAC_TEXT = /^[A-Za-z0-9_-]{43}$/;

export interface HopRequest {
  method: string;
  /** The path and query exactly as sent on the request line. */
  url: string;
  requestId: string;
  /** The VM host it is meant for: a hop captured on its way to one host opens nothing on another. */
  node: string;
}

const mac = (secret: string, time: string, principal: string, body: string, r: HopRequest): Buffer =>
  createHmac('sha256', secret).update(['vessel-hop-v2', time, r.method.toUpperCase(), r.url, principal, r.requestId, r.node, body].join('\n')).digest();

/**
 * The hop's headers for a request whose body is named `body` (hop-body.ts: `wholeBody(bytes)`,
 * NO_BODY, or FRAMED_BODY, whose frames are then made with `bodyKeyOf` of these headers).
 */
export function signHop(secret: string, principal: Principal, r: HopRequest & { body: string }, now = Date.now()): Record<string, string> {
  const encoded = Buffer.from(JSON.stringify({ token_id: principal.tokenId, tenant_id: principal.tenantId, scopes: [...principal.scopes] })).toString('base64url');
  const time = String(now);
  return { [HOP_PRINCIPAL]: encoded, [HOP_TIME]: time, [HOP_BODY]: r.body, [HOP_SIGNATURE]: mac(secret, time, encoded, r.body, r).toString('base64url') };
}

/** The key of a signed hop's body frames. */
export const bodyKeyOf = (secret: string, headers: Record<string, string>): Buffer => frameKey(secret, Buffer.from(headers[HOP_SIGNATURE]!, 'base64url'));

export const hasHopHeaders = (headers: IncomingHttpHeaders): boolean => HOP_HEADERS.some((h) => headers[h] !== undefined);

/** The 32 bytes of a MAC's one canonical text; null for any other text, however Node would decode it. */
export function decodeMac(text: string): Buffer | null {
  if (!MAC_TEXT.test(text)) return null;
  const bytes = Buffer.from(text, 'base64url');
  return bytes.length === 32 && bytes.toString('base64url') === text ? bytes : null;
}

/** The MACs a host accepted within the skew window, twice over: a hop is good once. */
export class SeenHops extends SeenOnce {
  constructor() {
    super(2 * MAX_SKEW_MS);
  }
}

/** A hop the host accepted: who it vouches for, and the check its body must pass before anything acts on it. */
export interface VerifiedHop {
  principal: Principal;
  /** The request's body as it may be read: checked against the signed digest, or frame by frame. */
  checkBody(payload: Readable): Readable;
}

/**
 * The hop the API node vouches for, or why it is refused (never which part of the MAC failed).
 * `hostKey` is this host's own key (fleet-keys.ts). A hop that names a grant (another host's call
 * for a move) is checked under the key derived from this host's key and the grant's claims, and
 * only for what they allow: this host, those methods, that path prefix and tenant, before expiry.
 */
export function verifyHop(hostKey: string, headers: IncomingHttpHeaders, r: HopRequest, now = Date.now(), seen?: SeenHops): VerifiedHop | string {
  const [encoded, time, signature, bodyText] = HOP_HEADERS.map((h) => headers[h]);
  if (typeof encoded !== 'string' || typeof time !== 'string' || typeof signature !== 'string' || typeof bodyText !== 'string') return 'incomplete hop headers';
  if (encoded.length > MAX_PRINCIPAL_CHARS || !/^\d{1,15}$/.test(time)) return 'malformed hop headers';
  const given = decodeMac(signature);
  const body = parseBodyName(bodyText);
  if (given === null || body === null) return 'malformed hop headers';
  if (Math.abs(now - Number(time)) > MAX_SKEW_MS) return 'the hop is too old, or the clocks of the API node and this host disagree by over a minute';
  const grantText = headers[HOP_GRANT];
  let secret = hostKey;
  let grantTenant: string | null = null;
  if (grantText !== undefined) {
    const claims = typeof grantText === 'string' ? parseClaims(grantText) : null;
    if (claims === null) return 'a malformed grant';
    const refusal = grantRefusal(claims, r.node, r.method, r.url, now);
    if (refusal !== null) return refusal;
    secret = grantKey(hostKey, grantText as string);
    grantTenant = claims.tenant;
  }
  const expected = mac(secret, time, encoded, bodyText, r);
  if (!timingSafeEqual(given, expected)) return 'the hop signature does not match';
  // The HTTP framing must be the one the signed body was sent with: a body sent whole has exactly
  // its length, a framed one is chunked. Otherwise a signed body could be dropped (no framing
  // header reads as no body at all) and the request acted on without it.
  const te = headers['transfer-encoding'];
  const length = headers['content-length'];
  const framed = body.kind === 'frames' ? te !== undefined && /^chunked$/i.test(te) && length === undefined : te === undefined && (length === undefined ? body.length === 0 : length === String(body.length));
  if (!framed) return "the hop's body is not framed as signed";
  const principal = parsePrincipal(encoded);
  if (principal === null) return 'malformed hop principal';
  if (grantTenant !== null && principal.tenantId !== grantTenant) return "a grant for another tenant's objects";
  if (seen !== undefined && !seen.firstTime(given, now)) return 'this hop was already used';
  // No body was signed, and the framing checked above gives it none: Node's parser reads no byte
  // as this request's (an upgrade's, a GET's), so there is nothing to check and the payload is
  // left as it is.
  if (body.kind === 'whole' && body.length === 0) return { principal, checkBody: (payload) => payload };
  return {
    principal,
    checkBody: (payload) => checkedBody(payload, body.kind === 'frames' ? new BodyUnframer(frameKey(secret, given)) : new WholeBodyCheck(body)),
  };
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
