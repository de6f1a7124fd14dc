/** Real ClientHellos, as Node's TLS client sends them, and the same cut into records, for sniffing tests. */
import { createServer } from 'node:net';
import { connect as tlsConnect } from 'node:tls';

/** The ClientHello Node's TLS client really sends for `servername`. */
export async function clientHello(servername?: string): Promise<Buffer> {
  return new Promise((resolve, reject) => {
    const server = createServer((s) => {
      s.once('data', (d) => {
        resolve(d);
        s.destroy();
        server.close();
      });
    });
    server.listen(0, '127.0.0.1', () => {
      const port = (server.address() as { port: number }).port;
      const c = tlsConnect({ host: '127.0.0.1', port, ...(servername ? { servername } : {}) });
      c.on('error', () => undefined);
    });
    server.on('error', reject);
  });
}

/** `hello` (one record) as two records, the first ending `cut` bytes into the handshake message. */
export function splitRecords(hello: Buffer, cut: number): Buffer {
  const hs = hello.subarray(5, 5 + hello.readUInt16BE(3));
  const record = (fragment: Buffer) => Buffer.concat([Buffer.from([0x16, 0x03, 0x01, fragment.length >> 8, fragment.length & 255]), fragment]);
  return Buffer.concat([record(hs.subarray(0, cut)), record(hs.subarray(cut))]);
}

