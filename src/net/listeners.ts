/** Starting and stopping the gateway's TCP listeners. */
import type { Server as HttpServer } from 'node:http';
import type { Server } from 'node:net';

/**
 * Resolves once `server` listens on host:port; rejects with the bind error (EADDRINUSE, ...).
 * From then on an error (accept failing with EMFILE once descriptors run out) is logged and the
 * server keeps listening: an 'error' event with no listener would end the whole process.
 */
export function listenOn(server: Server, host: string, port: number, log: { warn(o: object, m: string): void }): Promise<void> {
  return new Promise((resolve, reject) => {
    server.once('error', reject);
    server.listen({ host, port }, () => {
      server.off('error', reject);
      server.on('error', (err: NodeJS.ErrnoException) => log.warn({ err: err.message, code: err.code }, 'listener error'));
      resolve();
    });
  });
}

/**
 * Stops accepting on `server` and drops the connections handed to `http` (a server that never
 * listens itself: it only serves sockets the listener passed on).
 */
export function closeListener(server: Server, http: HttpServer): Promise<void> {
  http.closeAllConnections();
  return new Promise((r) => server.close(() => r()));
}
