/** Starting and stopping the gateway's TCP listeners. */
import type { Server as HttpServer } from 'node:http';
import type { Server } from 'node:net';

/** Resolves once `server` listens on host:port; rejects with the bind error (EADDRINUSE, ...). */
export function listenOn(server: Server, host: string, port: number): Promise<void> {
  return new Promise((resolve, reject) => {
    server.once('error', reject);
    server.listen({ host, port }, () => {
      server.off('error', reject);
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
