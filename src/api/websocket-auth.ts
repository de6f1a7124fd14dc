/**
 * A bearer token for a WebSocket opened by a browser, which cannot set an Authorization header on
 * one. The client offers two subprotocols: `vessel.v1`, which the server selects, and
 * `vessel.bearer.<base64url of the token>`, which it never echoes (the scheme Kubernetes uses for
 * its API server). Nothing lands in the URL, so no access log or Referer carries the token.
 */
import type { IncomingHttpHeaders } from 'node:http';

/** The subprotocol the server answers with; a browser fails an upgrade answered with none. */
export const WEBSOCKET_PROTOCOL = 'vessel.v1';
export const BEARER_PROTOCOL_PREFIX = 'vessel.bearer.';

/** The token base64url-encoded inside its subprotocol, as a client builds it. */
export const bearerProtocol = (token: string): string => BEARER_PROTOCOL_PREFIX + Buffer.from(token, 'utf8').toString('base64url');

/** The header's longest useful length: a 512-byte token in base64url, the prefix and vessel.v1. */
const MAX_PROTOCOL_HEADER = 1024;

/**
 * The token an upgrade request carries in its subprotocols, or null when it carries none (or one
 * that is not a base64url token of printable ASCII, as the Authorization header requires).
 */
export function bearerFromProtocols(headers: IncomingHttpHeaders): string | null {
  if (headers.upgrade?.toLowerCase() !== 'websocket') return null;
  const offered = headers['sec-websocket-protocol'];
  if (typeof offered !== 'string' || offered.length > MAX_PROTOCOL_HEADER) return null;
  for (const p of offered.split(',')) {
    const name = p.trim();
    if (!name.startsWith(BEARER_PROTOCOL_PREFIX)) continue;
    const encoded = name.slice(BEARER_PROTOCOL_PREFIX.length);
    if (!/^[A-Za-z0-9_-]{1,683}$/.test(encoded)) return null;
    const token = Buffer.from(encoded, 'base64url').toString('latin1');
    return /^[\x21-\x7e]{1,512}$/.test(token) ? token : null;
  }
  return null;
}

/** ws's choice among the offered subprotocols: ours, and never the one holding the token. */
export const selectProtocol = (offered: Set<string>): string | false => (offered.has(WEBSOCKET_PROTOCOL) ? WEBSOCKET_PROTOCOL : false);
