/**
 * Every answer carries its request's id (`x-request-id`), also in the service's log: the
 * client's own when it is a plausible one, else one made here.
 */
import { randomBytes } from 'node:crypto';
import type { IncomingMessage } from 'node:http';
import type { FastifyInstance } from 'fastify';

/**
 * Fastify's `genReqId`: random per process, then a sequence, so ids are unique across restarts
 * without drawing a UUID per request.
 */
export function requestIdGenerator(): (req: IncomingMessage) => string {
  const prefix = `${randomBytes(4).toString('hex')}-`;
  let count = 0;
  return (req) => {
    const given = req.headers['x-request-id'];
    return typeof given === 'string' && /^[\w.-]{1,64}$/.test(given) ? given : `${prefix}${(++count).toString(36)}`;
  };
}

/** Sets the header on every answer, a WebSocket's 101 included (call `tellWebSocketServer` once it exists). */
export function sendRequestIds(app: FastifyInstance): { tellWebSocketServer(): void } {
  // The ws library writes an upgrade's 101 itself, past the reply's headers: it is told the id.
  const upgradeIds = new WeakMap<IncomingMessage, string>();
  app.addHook('onRequest', (request, reply, done) => {
    void reply.header('x-request-id', request.id);
    if (request.headers.upgrade !== undefined) upgradeIds.set(request.raw, request.id);
    done();
  });
  return {
    tellWebSocketServer: () =>
      app.websocketServer.on('headers', (headers, raw) => {
        const id = upgradeIds.get(raw);
        if (id !== undefined) headers.push(`x-request-id: ${id}`);
      }),
  };
}
