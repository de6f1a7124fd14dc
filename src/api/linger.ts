/**
 * A refusal sent before its request's body has arrived (a body over its limit, refused from its
 * Content-Length or partway through; a bad token on an upload) must reach the client. Node closes
 * such a connection as soon as the response is written, while the client is still sending: the
 * next bytes it sends meet a closed socket, our kernel answers them with a reset, and a reset
 * makes the client's kernel drop what it had not yet read, the response included. The client
 * sees EPIPE or ECONNRESET instead of the 413 envelope.
 *
 * So, as nginx's `lingering_close`: the response says `Connection: close`, and the connection is
 * closed only once the rest of the body has been read and discarded, or a bound is met (bytes,
 * total time, time between chunks, sockets lingering at once), whichever comes first. A client
 * that never stops sending is cut at the bound, as before, with its response long delivered.
 *
 * Also here: the body a handler streams is a detachable view of the request, since destroying
 * the request itself (as `for await` does on a throw, and a capped body on its limit) destroys
 * the socket before the refusal can even be written.
 */
import type { IncomingMessage, Server } from 'node:http';
import type { Socket } from 'node:net';
import { Readable } from 'node:stream';
import type { FastifyInstance, FastifyReply } from 'fastify';

export interface LingerLimits {
  /** Body bytes read and discarded once the response is sent, at most. */
  maxBytes: number;
  /** From the response's end to the close, at most. */
  maxMs: number;
  /** Between two chunks of the body, at most. */
  idleMs: number;
  /** Sockets lingering at once; past it, one is closed at once as Node would. */
  maxSockets: number;
}

/**
 * 4 MiB covers any JSON body a client could mean to send past the 1 MiB limit, and the part of
 * a file over its limit that is in flight; 5 s (2 s without a byte) is what a client needs to
 * notice the response and stop. A lingering socket costs a descriptor and no buffer.
 */
export const LINGER_LIMITS: LingerLimits = { maxBytes: 4 * 1024 * 1024, maxMs: 5_000, idleMs: 2_000, maxSockets: 1024 };

interface Lingering {
  limits: LingerLimits;
  /** The sockets lingering now, each with what closes it; their number is bounded. */
  sockets: Map<Socket, () => void>;
}

/** Per HTTP server, which every plugin context of one API shares. */
const apis = new WeakMap<Server, Lingering>();

/** Turns lingering on for this API; until then lingerIfBodyPending does nothing. */
export function lingerAfterEarlyResponses(app: FastifyInstance, limits: LingerLimits = LINGER_LIMITS): void {
  const lingering: Lingering = { limits, sockets: new Map() };
  apis.set(app.server, lingering);
  // A service shutting down does not wait out its clients' bodies.
  app.addHook('preClose', (done) => {
    for (const close of [...lingering.sockets.values()]) close();
    done();
  });
}

/**
 * Called by sendError before it answers, since every early answer is a refusal: a success is
 * sent once its body has been read, and so this costs it nothing (a hook would cost every reply).
 */
export function lingerIfBodyPending(reply: FastifyReply): void {
  const req = reply.request.raw;
  if (!bodyPending(req)) return;
  const lingering = apis.get(reply.server.server);
  if (lingering === undefined) return;
  void reply.header('connection', 'close');
  discardRest(req, lingering);
}

/**
 * `complete` is false on a real request until its body has been read off the socket whole (and
 * undefined on an injected one, which has no socket to close). It is false, too, while a request
 * without any body is still being dispatched from its head (a refusal in an onRequest hook), so
 * only a request framed with a body counts: HTTP/1.1 has none without either header.
 */
function bodyPending(req: IncomingMessage): boolean {
  if (req.complete !== false || req.headers.upgrade !== undefined) return false;
  const length = req.headers['content-length'];
  return req.headers['transfer-encoding'] !== undefined || (length !== undefined && length !== '0');
}

/**
 * From now on the body is nobody's: every consumer is detached (as Node's own dump of an unread
 * body does) and it is read and counted, so the client's sending never stalls on a full window.
 * The close Node will ask for once the response is written (destroySoon, since the response says
 * `Connection: close`) waits for the body's end or a bound.
 */
function discardRest(req: IncomingMessage, { limits, sockets: lingering }: Lingering): void {
  const socket = req.socket;
  if (Object.hasOwn(socket, 'destroySoon')) return;
  let read = 0;
  /** Set once Node has asked for the close, i.e. the response is written. */
  let lingers = false;
  let done = false;
  let total: NodeJS.Timeout | undefined;
  let idle: NodeJS.Timeout | undefined;
  const stop = (): void => {
    done = true;
    clearTimeout(total);
    clearTimeout(idle);
    req.off('data', count);
    req.off('end', close);
    lingering.delete(socket);
  };
  const close = (): void => {
    if (done) return;
    stop();
    // The socket's own again: end once the response is out, then destroy.
    Reflect.deleteProperty(socket, 'destroySoon');
    socket.destroySoon();
  };
  const count = (chunk: Buffer): void => {
    read += chunk.length;
    if (!lingers) return;
    if (read > limits.maxBytes) return close();
    idle?.refresh();
  };
  req.unpipe();
  req.removeAllListeners('data');
  req.on('data', count);
  req.resume();
  // On this socket alone, and only now that it will serve no other request.
  socket.destroySoon = () => {
    lingers = true;
    if (req.complete || read > limits.maxBytes || lingering.size >= limits.maxSockets) return close();
    lingering.set(socket, close);
    socket.once('close', stop);
    req.once('end', close);
    total = setTimeout(close, limits.maxMs).unref();
    idle = setTimeout(close, limits.idleMs).unref();
  };
}

/**
 * The request's body as a handler streams it: the same bytes, at the handler's pace, but
 * destroying it only detaches it from the request (which is paused, and left to the linger
 * above once the response goes out). A request that fails (the client went away) fails it.
 *
 * `source` is the request itself, or what a preParsing hook made of it (a fleet's hop checks the
 * body as a stream of its own, src/cluster/hop.ts): such a stream has no `complete`, and has
 * ended whole once it emitted its end.
 */
export function detachableBody(source: Readable & { complete?: boolean }): Readable {
  let attached = false;
  let ended = false;
  const whole = (): boolean => ended || source.complete === true;
  const onData = (chunk: Buffer): void => {
    if (!body.push(chunk)) source.pause();
  };
  const onEnd = (): void => {
    ended = true;
    body.push(null);
  };
  const onError = (err: Error): void => void body.destroy(err);
  const onClose = (): void => {
    if (!whole()) body.destroy(Object.assign(new Error('the request was aborted'), { code: 'ECONNRESET' }));
  };
  const detach = (): void => {
    source.off('data', onData);
    source.off('end', onEnd);
    source.off('error', onError);
    source.off('close', onClose);
  };
  const body = new Readable({
    read() {
      if (!attached) {
        attached = true;
        source.on('data', onData);
        source.once('end', onEnd);
        source.once('error', onError);
        source.once('close', onClose);
      }
      source.resume();
    },
    destroy(err, callback) {
      detach();
      if (!whole()) source.pause();
      callback(err);
    },
  });
  return body;
}
