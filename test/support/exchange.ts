/** Raw request/response exchanges over a socket, for tests that need bytes no HTTP client writes or reads. */
import type { Socket } from 'node:net';

/** Writes `bytes` on `socket` (plain or TLS) and resolves with everything read back, as latin1, once it closes or 2 s pass. */
export function exchange(socket: Socket, bytes: string): Promise<string> {
  return new Promise((resolve, reject) => {
    let got = '';
    socket.setTimeout(2000, () => socket.end());
    socket.on('data', (d: Buffer) => (got += d.toString('latin1')));
    socket.on('close', () => resolve(got));
    socket.on('error', reject);
    socket.write(bytes);
  });
}
