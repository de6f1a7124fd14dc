/**
 * An HTTP server on loopback that answers as each test scripts it, for the SDK's behaviour on
 * answers the real service gives only under conditions a test cannot make on demand (503s,
 * Retry-After, dropped streams) and for streams the fake driver cannot produce.
 */
import { createServer, type IncomingMessage, type Server, type ServerResponse } from 'node:http';
import type { AddressInfo } from 'node:net';

export type Script = (req: IncomingMessage, res: ServerResponse, n: number) => void;

export interface ScriptedService {
  url: string;
  server: Server;
  /** Every request that arrived, in order: method, URL and headers. */
  requests: Array<{ method: string; url: string; headers: IncomingMessage['headers']; body: string }>;
  close(): Promise<void>;
}

/** `script` answers request number `n` (0 for the first). Request bodies are read whole first. */
export async function scriptedService(script: Script): Promise<ScriptedService> {
  const requests: ScriptedService['requests'] = [];
  const server = createServer((req, res) => {
    const chunks: Buffer[] = [];
    req.on('data', (c: Buffer) => chunks.push(c));
    req.on('end', () => {
      requests.push({ method: req.method ?? '', url: req.url ?? '', headers: req.headers, body: Buffer.concat(chunks).toString('utf8') });
      script(req, res, requests.length - 1);
    });
  });
  await new Promise<void>((resolve) => server.listen(0, '127.0.0.1', resolve));
  return {
    url: `http://127.0.0.1:${(server.address() as AddressInfo).port}`,
    server,
    requests,
    async close() {
      server.closeAllConnections();
      await new Promise((resolve) => server.close(resolve));
    },
  };
}

export function sendJson(res: ServerResponse, status: number, body: unknown, headers: Record<string, string> = {}): void {
  res.writeHead(status, { 'content-type': 'application/json', 'x-request-id': 'req-1', ...headers });
  res.end(JSON.stringify(body));
}

export const envelope = (code: string, message = code) => ({ error: { code, message } });

/** One server-sent event as the service writes it. */
export const sse = (event: string, data: unknown, id?: string): string => `event: ${event}\n${id === undefined ? '' : `id: ${id}\n`}data: ${JSON.stringify(data)}\n\n`;
