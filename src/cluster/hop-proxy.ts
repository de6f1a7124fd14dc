/**
 * Carries one request from an API node to the VM host that serves it, and the answer back, as
 * streams both ways: SSE exec, a gigabyte file, a terminal's WebSocket. Nothing is buffered but
 * what the caller hands over already read (a create's JSON body). The caller's token stays on the
 * API node; the host learns the principal from the signed hop headers (hop.ts).
 */
import { request as httpRequest, Agent, type ClientRequest, type IncomingMessage, type OutgoingHttpHeaders, type ServerResponse } from 'node:http';
import { Readable, type Duplex } from 'node:stream';
import { ERROR_CODES, VesselError, type ErrorCode } from '../core/errors.js';
import type { Principal } from '../core/types.js';
import { BEARER_PROTOCOL_PREFIX } from '../api/websocket-auth.js';
import { HOP_HEADERS, bodyKeyOf, signHop } from './hop.js';
import { BodyFramer, FRAMED_BODY, MAX_WHOLE_BODY_BYTES, NO_BODY, wholeBody } from './hop-body.js';
import { GRANT_HEADERS, type HopKeys } from './fleet-keys.js';
import { httpsRequest, type HopTls } from './fleet-tls.js';

/** A host that has not accepted the connection by then is treated as down for this request. */
const CONNECT_TIMEOUT_MS = 5000;

/** Headers that describe one connection, not the message (RFC 9110 §7.6.1), and ours that only the hop may set. */
const CONNECTION_HEADERS = new Set(['connection', 'keep-alive', 'proxy-connection', 'te', 'trailer', 'transfer-encoding', 'upgrade', 'host', 'authorization', ...HOP_HEADERS, ...GRANT_HEADERS]);

export interface HopTarget {
  /** `https://host:port` (or `http://`, a host without TLS) of the VM host's hop listener. */
  internalUrl: string;
  name: string;
}

/** What a caller makes hops with: keys to sign them (fleet-keys.ts), and TLS where the fleet has it (fleet-tls.ts). */
export interface HopClient {
  keys: HopKeys;
  /** Null: this caller has no fleet certificate, and reaches hosts over plain HTTP only. */
  tls: HopTls | null;
  /**
   * Refuses a host reached over plain HTTP that must be reached over TLS (an enrolled host, whose
   * row in the store names an http:// address: a downgrade, or a host not yet restarted on TLS).
   */
  plainRefusal(target: HopTarget): Promise<string | null>;
}

/** How one hop reaches its host: the request function and its TLS or pooling options. */
interface Transport {
  request: typeof httpRequest;
  options: object;
}

async function transport(client: HopClient, target: HopTarget, upgrade: boolean): Promise<Transport> {
  const url = new URL(target.internalUrl);
  if (url.protocol === 'https:') {
    if (client.tls === null) throw new HopUnreachable(`VM host '${target.name}' serves the hop over TLS, and this node holds no fleet certificate`);
    return { request: httpsRequest as unknown as typeof httpRequest, options: client.tls.requestOptions(target.name, upgrade) };
  }
  const refusal = await client.plainRefusal(target);
  if (refusal !== null) throw new HopUnreachable(refusal);
  return { request: httpRequest, options: { agent: upgrade ? false : agent } };
}

export interface HopCall {
  principal: Principal;
  requestId: string;
  clientIp: string;
  /** The body, when the API node had to read it to route the request; otherwise `incoming` is streamed on. */
  body?: Buffer | undefined;
}

/** Why a hop failed before the host answered: the request is then answered by the API node itself. */
export class HopUnreachable extends Error {}

const agent = new Agent({ keepAlive: true, maxFreeSockets: 64, scheduling: 'lifo' });

/** Hops in flight: an API node that shuts down cuts them rather than wait out hour-long streams. */
const inFlight = new Set<ClientRequest>();
const track = (out: ClientRequest): void => {
  inFlight.add(out);
  out.once('close', () => inFlight.delete(out));
};

/** Ends every hop in flight (shutdown): their callers see the connection close, and retry. */
export function cutHops(): void {
  for (const out of inFlight) out.destroy();
  inFlight.clear();
}

/**
 * How the hop carries the caller's body: whole (a body the API node read, within the size a host
 * holds to check it), framed (streamed; each frame checked by the host before it is used), or none.
 */
type Carried = { kind: 'whole'; bytes: Buffer } | { kind: 'frames' } | { kind: 'none' };

function carried(request: IncomingMessage, call: HopCall, upgrade: boolean): Carried {
  // An upgrade request has no body: what follows it is the WebSocket's, after the 101.
  if (upgrade) return { kind: 'none' };
  if (call.body !== undefined) return call.body.length <= MAX_WHOLE_BODY_BYTES ? { kind: 'whole', bytes: call.body } : { kind: 'frames' };
  return bodyOf(request) === 'none' ? { kind: 'none' } : { kind: 'frames' };
}

function outgoingHeaders(request: IncomingMessage, keys: HopKeys, call: HopCall, body: Carried, method: string, url: string, target: URL, node: string): { headers: Record<string, string | string[]>; key: string } {
  const incoming = request.headers;
  const headers: Record<string, string | string[]> = {};
  for (const [name, value] of Object.entries(incoming)) if (!CONNECTION_HEADERS.has(name) && value !== undefined) headers[name] = value;
  // A browser's token rides in a subprotocol; the host needs only the protocol it will select.
  const protocols = incoming['sec-websocket-protocol'];
  if (typeof protocols === 'string') {
    const kept = protocols.split(',').map((p) => p.trim()).filter((p) => p !== '' && !p.startsWith(BEARER_PROTOCOL_PREFIX));
    if (kept.length > 0) headers['sec-websocket-protocol'] = kept.join(', ');
    else delete headers['sec-websocket-protocol'];
  }
  // The body's framing is the hop's own, never left to defaults: a body sent unframed on a pooled
  // connection would be read by the host as the next request, without a hop. It is also signed:
  // the host refuses a framing other than the one the MAC names.
  delete headers['content-length'];
  if (body.kind === 'whole') headers['content-length'] = String(body.bytes.length);
  else if (body.kind === 'frames') headers['transfer-encoding'] = 'chunked';
  headers.host = target.host;
  headers['x-request-id'] = call.requestId;
  headers['x-forwarded-for'] = call.clientIp;
  const name = body.kind === 'whole' ? wholeBody(body.bytes) : body.kind === 'frames' ? FRAMED_BODY : NO_BODY;
  const signing = keys.forCall(node, method, url, call.principal.tenantId);
  Object.assign(headers, signing.headers, signHop(signing.key, call.principal, { method, url, requestId: call.requestId, node, body: name }));
  return { headers, key: signing.key };
}

/** How the caller framed its body (Node's server refuses a request that gives both). */
function bodyOf(incoming: IncomingMessage): 'chunked' | 'length' | 'none' {
  if (incoming.headers['transfer-encoding'] !== undefined) return 'chunked';
  return incoming.headers['content-length'] !== undefined && incoming.headers['content-length'] !== '0' ? 'length' : 'none';
}

function open(client: HopClient, via: Transport, target: HopTarget, incoming: IncomingMessage, call: HopCall, upgrade: boolean) {
  const url = new URL(target.internalUrl);
  const method = incoming.method ?? 'GET';
  const path = incoming.url ?? '/';
  const body = carried(incoming, call, upgrade);
  const { headers, key } = outgoingHeaders(incoming, client.keys, call, body, method, path, url, target.name);
  if (upgrade) Object.assign(headers, { connection: 'Upgrade', upgrade: 'websocket' });
  const out = via.request({ host: url.hostname, port: url.port, method, path, headers, ...via.options });
  const connectTimer = setTimeout(() => out.destroy(new HopUnreachable(`VM host '${target.name}' did not accept a connection within ${CONNECT_TIMEOUT_MS / 1000} s`)), CONNECT_TIMEOUT_MS);
  out.once('socket', (socket) => {
    if (!socket.connecting) clearTimeout(connectTimer);
    else socket.once('connect', () => clearTimeout(connectTimer));
  });
  out.once('close', () => clearTimeout(connectTimer));
  if (body.kind === 'whole') out.end(body.bytes);
  else if (body.kind === 'none') out.end();
  else {
    const frames = new BodyFramer(bodyKeyOf(key, headers as Record<string, string>));
    // The last frame goes only when the caller's body ended: a caller that leaves mid-body cuts
    // the hop (forwardRequest), and the host sees a body without its end, never a shorter one.
    (call.body === undefined ? incoming : Readable.from([call.body])).pipe(frames).pipe(out);
  }
  return out;
}

const unreachable = (target: HopTarget, err: Error): HopUnreachable =>
  err instanceof HopUnreachable ? err : new HopUnreachable(`VM host '${target.name}' could not be reached from this API node (${(err as NodeJS.ErrnoException).code ?? err.message})`);

/**
 * Forwards an HTTP request. Resolves with a function that streams the host's answer into `res`
 * once it has one: the caller takes the response over (Fastify's hijack) only then, so a host
 * that cannot be reached still gets an error envelope from the API node.
 */
export async function forwardRequest(client: HopClient, target: HopTarget, incoming: IncomingMessage, res: ServerResponse, call: HopCall): Promise<() => void> {
  const via = await transport(client, target, false);
  return new Promise((resolve, reject) => {
    const out = open(client, via, target, incoming, call, false);
    track(out);
    // A caller gone at any point, before the host answered too, cuts the hop: an SSE stream
    // nobody reads must not run on.
    res.once('close', () => out.destroy());
    out.once('error', (err) => reject(unreachable(target, err)));
    out.once('response', (answer) => {
      resolve(() => {
        const headers: OutgoingHttpHeaders = {};
        for (const [name, value] of Object.entries(answer.headers)) if (!CONNECTION_HEADERS.has(name) && value !== undefined) headers[name] = value;
        res.writeHead(answer.statusCode ?? 502, headers);
        // SSE: every event goes out as it arrives.
        res.flushHeaders();
        answer.pipe(res);
        // A host gone mid-answer: the caller's response is cut too, never left waiting.
        answer.once('error', () => res.destroy());
        answer.once('aborted', () => res.destroy());
      });
    });
  });
}

/**
 * Forwards a WebSocket upgrade: the host's 101 (or its refusal) goes back on the caller's socket
 * as it came, then bytes flow both ways until either side closes.
 */
export async function forwardUpgrade(client: HopClient, target: HopTarget, incoming: IncomingMessage, socket: Duplex, call: HopCall): Promise<void> {
  const via = await transport(client, target, true);
  return new Promise((resolve, reject) => {
    const out = open(client, via, target, incoming, call, true);
    track(out);
    socket.once('close', () => out.destroy());
    out.once('error', (err) => reject(unreachable(target, err)));
    out.once('upgrade', (answer, upstream, head) => {
      socket.write(statusBlock(answer));
      if (head.length > 0) socket.write(head);
      upstream.pipe(socket).pipe(upstream);
      const end = () => {
        upstream.destroy();
        socket.destroy();
      };
      upstream.once('error', end);
      socket.once('error', end);
      upstream.once('close', end);
      socket.once('close', end);
      resolve();
    });
    // The host refused the upgrade with a plain answer (404, 409): it goes back as it is.
    out.once('response', (answer) => {
      socket.write(statusBlock(answer));
      answer.pipe(socket);
      answer.once('end', () => socket.end());
      resolve();
    });
  });
}

function statusBlock(answer: IncomingMessage): string {
  const lines = [`HTTP/1.1 ${answer.statusCode ?? 502} ${answer.statusMessage ?? ''}`];
  for (let i = 0; i < answer.rawHeaders.length; i += 2) {
    const name = answer.rawHeaders[i]!;
    const lower = name.toLowerCase();
    if (lower === 'transfer-encoding' || lower === 'keep-alive' || (lower === 'connection' && answer.statusCode !== 101)) continue;
    lines.push(`${name}: ${answer.rawHeaders[i + 1]!}`);
  }
  // A refusal's body is sent as it comes, then the connection closes: that delimits it.
  if (answer.statusCode !== 101) lines.push('Connection: close');
  return `${lines.join('\r\n')}\r\n\r\n`;
}

/** A call of the fleet's own: one host asking another for a checkpoint's files, an API node asking a host to take them. */
export interface OwnHopCall {
  principal: Principal;
  requestId: string;
  method: 'GET' | 'POST' | 'DELETE';
  path: string;
  /** Grants handed to the called host for the calls it makes in turn (fleet-keys.ts). */
  headers?: Record<string, string>;
}

/** A host's refusal of an own call, as large as an error envelope can be. */
const MAX_ERROR_BYTES = 64 * 1024;

/**
 * Makes a call of the fleet's own and resolves with the host's answer, its body unread, when it
 * is a success; a refusal is rejected as the host's own error. The answer must keep coming: a
 * host silent for `idleMs` is cut.
 */
export async function callHop(client: HopClient, target: HopTarget, call: OwnHopCall, idleMs: number): Promise<IncomingMessage> {
  const via = await transport(client, target, false);
  const signing = client.keys.forCall(target.name, call.method, call.path, call.principal.tenantId);
  return new Promise((resolve, reject) => {
    const url = new URL(target.internalUrl);
    const headers = {
      host: url.host,
      'x-request-id': call.requestId,
      'content-length': '0',
      ...signing.headers,
      ...(call.headers ?? {}),
      ...signHop(signing.key, call.principal, { method: call.method, url: call.path, requestId: call.requestId, node: target.name, body: NO_BODY }),
    };
    const out = via.request({ host: url.hostname, port: url.port, method: call.method, path: call.path, headers, ...via.options });
    track(out);
    out.setTimeout(idleMs, () => out.destroy(new HopUnreachable(`VM host '${target.name}' sent nothing for ${Math.round(idleMs / 1000)} s`)));
    out.once('error', (err) => reject(unreachable(target, err)));
    out.once('response', (answer) => {
      const status = answer.statusCode ?? 502;
      if (status >= 200 && status < 300) return resolve(answer);
      readBounded(answer, MAX_ERROR_BYTES).then((body) => reject(hostError(target, status, body)), (err: Error) => reject(unreachable(target, err)));
    });
    out.end();
  });
}

/** An answer's whole body, refused past `limit` bytes. */
export async function readBounded(answer: AsyncIterable<Buffer>, limit: number): Promise<Buffer> {
  const parts: Buffer[] = [];
  let size = 0;
  for await (const part of answer) {
    size += part.length;
    if (size > limit) throw new Error(`an answer over ${limit} bytes`);
    parts.push(part);
  }
  return Buffer.concat(parts, size);
}

/** The host's error envelope as the error it names; anything else from a host is its being unwell. */
function hostError(target: HopTarget, status: number, body: Buffer): VesselError {
  try {
    const { error } = JSON.parse(body.toString('utf8')) as { error?: { code?: unknown; message?: unknown } };
    const code = error?.code as ErrorCode;
    // A hop the host refused is this fleet's configuration at fault, not the caller's token.
    if (code === 'unauthenticated') return new VesselError('internal', `VM host '${target.name}' refused a hop from this node: ${String(error?.message)}`);
    if (ERROR_CODES.includes(code) && typeof error?.message === 'string') return new VesselError(code, error.message);
  } catch {
    // not an envelope
  }
  return new VesselError('unavailable', `VM host '${target.name}' answered ${status} without an error envelope`);
}
