/**
 * A VM host's ingress as an API node's ingress entry sees it, for tests of the entry: it takes the
 * entry's PROXY header (parsed, not checked) and then serves HTTP, counting what reaches it.
 * Paths under /slow are held unanswered until `close`; every other request is answered `fast`.
 */
import { createServer as createHttpServer, type IncomingMessage, type ServerResponse } from 'node:http';
import { createServer, type AddressInfo, type Socket } from 'node:net';
import { parseProxyHeader } from '../../src/net/proxy-header.js';

export interface FakeHostIngress {
  /** `host:port`, a node's ingress address. */
  address: string;
  /** Requests that reached it, as `METHOD path`. */
  seen: string[];
  close(): void;
}

export async function fakeHostIngress(): Promise<FakeHostIngress> {
  const seen: string[] = [];
  const held: ServerResponse[] = [];
  const http = createHttpServer((req: IncomingMessage, res: ServerResponse) => {
    seen.push(`${req.method} ${req.url}`);
    req.resume();
    if (req.url?.startsWith('/slow')) held.push(res);
    else res.end('fast');
  });
  const tcp = createServer((socket: Socket) => {
    socket.on('error', () => undefined);
    let buf = Buffer.alloc(0);
    const onData = (chunk: Buffer): void => {
      buf = Buffer.concat([buf, chunk]);
      const parsed = parseProxyHeader(buf);
      if (parsed.kind === 'incomplete') return;
      socket.off('data', onData);
      socket.pause();
      if (parsed.kind !== 'ok') return void socket.destroy();
      socket.unshift(buf.subarray(parsed.length));
      http.emit('connection', socket);
      socket.resume();
    };
    socket.on('data', onData);
  });
  await new Promise<void>((r) => tcp.listen(0, '127.0.0.1', () => r()));
  return {
    address: `127.0.0.1:${(tcp.address() as AddressInfo).port}`,
    seen,
    close: () => {
      for (const res of held) res.destroy();
      http.closeAllConnections();
      tcp.close();
    },
  };
}
