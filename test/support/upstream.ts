/**
 * Upstream servers on loopback for egress tests: HTTP and HTTPS echo servers (the HTTPS one with
 * certificates from a test CA of its own) and a raw TCP echo server. Each records what reached it.
 */
import { mkdtempSync, writeFileSync } from 'node:fs';
import { createServer as createHttpServer, type IncomingMessage, type ServerResponse } from 'node:http';
import { createServer as createHttpsServer } from 'node:https';
import { createServer as createTcpServer, type AddressInfo, type Server } from 'node:net';
import { tmpdir } from 'node:os';
import { join } from 'node:path';
import { CertificateAuthority } from '../../src/net/certificate-authority.js';

export interface Seen {
  scheme: 'http' | 'https';
  method: string;
  url: string;
  rawHeaders: string[];
  body: string;
}

export class Upstreams {
  readonly seen: Seen[] = [];
  readonly dir = mkdtempSync(join(tmpdir(), 'vessel-upstream-'));
  http!: Server;
  https!: Server;
  tcp!: Server;
  caFile = '';
  overridesFile = join(this.dir, 'dns-overrides');

  port = (s: Server): number => (s.address() as AddressInfo).port;

  async start(): Promise<void> {
    const ca = await CertificateAuthority.loadOrCreate(this.dir);
    this.caFile = join(this.dir, 'ca.crt');
    this.http = createHttpServer((req, res) => this.#echo('http', req, res));
    this.https = createHttpsServer(
      { SNICallback: (name, cb) => void ca.contextFor(name).then((ctx) => cb(null, ctx), (err) => cb(err)) },
      (req, res) => this.#echo('https', req, res),
    );
    this.tcp = createTcpServer((s) => s.on('data', (d) => s.write(`echo:${d}`)).on('error', () => undefined));
    for (const s of [this.http, this.https, this.tcp]) await new Promise<void>((r) => s.listen(0, '127.0.0.1', () => r()));
  }

  /** Names the gateway resolves (VESSEL_DNS_OVERRIDES). */
  setNames(names: Record<string, string>): void {
    writeFileSync(this.overridesFile, Object.entries(names).map(([n, ip]) => `${n} ${ip}`).join('\n') + '\n');
  }

  hits = (pathPrefix: string): Seen[] => this.seen.filter((s) => s.url.startsWith(pathPrefix));

  close(): void {
    for (const s of [this.http, this.https, this.tcp]) {
      (s as Server & { closeAllConnections?: () => void }).closeAllConnections?.();
      s.close();
    }
  }

  #echo(scheme: 'http' | 'https', req: IncomingMessage, res: ServerResponse): void {
    let body = '';
    req.on('data', (d) => (body += d));
    req.on('end', () => {
      const seen = { scheme, method: req.method ?? '', url: req.url ?? '', rawHeaders: req.rawHeaders, body };
      this.seen.push(seen);
      if ((req.url ?? '').startsWith('/redirect')) {
        const to = new URL(req.url!, 'http://x').searchParams.get('to') ?? '/';
        res.writeHead(302, { location: to });
        return void res.end();
      }
      res.writeHead(200, { 'content-type': 'application/json' });
      res.end(JSON.stringify(seen));
    });
  }
}
