/** How the API ends: requests that arrive once close() has begun, and streams that would hold it open. */
import type { FastifyInstance } from 'fastify';
import { VesselError } from '../core/errors.js';
import { sendError } from './errors.js';
import { endEventStreams } from './event-stream.js';

/** A restart takes seconds; a client that waits this long meets the next service, or a closed port. */
const shuttingDown = (): VesselError => new VesselError('unavailable', 'the service is shutting down', { retryAfterSecs: 1 });

/** Fastify's own 503 while closing is not the error envelope (`return503OnClosing: false`): this answers instead. */
export function closeGracefully(app: FastifyInstance): void {
  let closing = false;
  // A request that came on a kept-alive connection after close() began.
  app.addHook('onRequest', (_request, reply, done) => (closing ? void sendError(reply, shuttingDown()) : done()));
  app.addHook('preClose', (done) => {
    closing = true;
    // An open event stream is never idle: Fastify would wait for it to end before closing.
    endEventStreams(app.server);
    done();
  });
}
