/**
 * Which headers of an HTTP/1.1 message the gateway passes on to the next hop (egress to an
 * upstream, ingress to a guest, and the responses back), and how a forwarded body is framed.
 *
 * The gateway never lets the next hop guess where a message ends: Node's client sends no framing
 * for a body on GET, HEAD, DELETE or OPTIONS unless told to, so a forwarder that dropped
 * Transfer-Encoding and piped the body wrote the decoded bytes raw onto a pooled connection, where
 * the upstream read them as a request of their own (smuggling). Framing is therefore set here,
 * explicitly, for every method; a body that cannot be framed again faithfully is refused.
 */
import type { IncomingHttpHeaders, ServerResponse } from 'node:http';

/** Not forwarded: they describe one hop, not the message (RFC 9110 §7.6.1). */
export const HOP_BY_HOP: ReadonlySet<string> = new Set(['connection', 'keep-alive', 'proxy-connection', 'te', 'trailer', 'transfer-encoding', 'upgrade', 'proxy-authorization', 'proxy-authenticate']);

/** Set by the gateway itself on every forwarded message, never copied: they route or frame it. */
const SET_BY_GATEWAY: ReadonlySet<string> = new Set(['host', 'content-length', 'transfer-encoding']);

const NONE: ReadonlySet<string> = new Set();

/** Every value of header `name` (lowercase) in Node's flat raw header list. */
export function headerValues(raw: readonly string[], name: string): string[] {
  const out: string[] = [];
  for (let i = 0; i < raw.length; i += 2) if (raw[i]!.toLowerCase() === name) out.push(raw[i + 1]!);
  return out;
}

/**
 * The end-to-end headers of a message, as a flat list: no hop-by-hop header, none that a
 * Connection token names, none in `drop`, and no Host or framing header, which the caller sets.
 * A Connection token can remove only what a client may legitimately make hop-by-hop: naming Host
 * or Content-Length there changes nothing.
 */
export function endToEndHeaders(raw: readonly string[], drop: ReadonlySet<string> = NONE): string[] {
  const named = new Set<string>();
  for (const value of headerValues(raw, 'connection')) for (const token of value.split(',')) named.add(token.trim().toLowerCase());
  const out: string[] = [];
  for (let i = 0; i < raw.length; i += 2) {
    const name = raw[i]!.toLowerCase();
    if (SET_BY_GATEWAY.has(name) || HOP_BY_HOP.has(name) || named.has(name) || drop.has(name)) continue;
    out.push(raw[i]!, raw[i + 1]!);
  }
  return out;
}

/**
 * The framing headers a forwarded request body gets, or null when the body cannot be framed
 * again as it was (a transfer coding other than plain `chunked`): such a request is refused.
 * Node's parser has already refused Content-Length together with Transfer-Encoding, and
 * conflicting Content-Lengths. With neither header there is no body.
 */
export function requestFraming(headers: IncomingHttpHeaders): string[] | null {
  const te = headers['transfer-encoding'];
  const length = headers['content-length'];
  if (te !== undefined) return te.trim().toLowerCase() === 'chunked' && length === undefined ? ['Transfer-Encoding', 'chunked'] : null;
  return length === undefined ? [] : ['Content-Length', length];
}

/** A response's Content-Length, kept; without one, the gateway's own server frames the body. */
export function responseLength(headers: IncomingHttpHeaders): string[] {
  const length = headers['content-length'];
  return length === undefined ? [] : ['Content-Length', length];
}

/** A reason phrase passed on as the upstream wrote it: visible ASCII, spaces and tabs only. */
const PLAIN_REASON = /^[\t\x20-\x7e]*$/;

/**
 * Writes the head of a response relayed from an upstream (or a guest) to our client; false, with
 * nothing written, when it cannot be relayed: the caller answers 502 instead. Node's client
 * parser accepts a status line its server refuses to write (any byte but CR/LF in the reason, a
 * code such as 099), and `writeHead` throws on it; thrown inside the client's 'response' callback
 * that was an uncaught exception, which ended the whole service. So: a code outside 200..599 (a
 * 1xx is never a final response) is not relayed; a reason with any other byte than visible
 * ASCII, space or tab is dropped for the standard one; a header Node refuses (a control byte in
 * a value) makes writeHead throw before anything is set or sent, and is not relayed either.
 */
export function writeRelayedHead(res: ServerResponse, statusCode: number | undefined, reason: string | undefined, headers: string[]): boolean {
  if (statusCode === undefined || !Number.isInteger(statusCode) || statusCode < 200 || statusCode > 599) return false;
  try {
    res.writeHead(statusCode, reason !== undefined && PLAIN_REASON.test(reason) ? reason : undefined, headers);
    return true;
  } catch {
    return false;
  }
}
