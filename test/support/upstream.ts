/**
 * Upstream servers on loopback for egress tests: HTTP and HTTPS echo servers (the HTTPS one with
 * certificates from a test CA of its own), a raw TCP echo server, and a recorder in front of the
 * HTTP echo server that keeps every byte it was sent. Each records what reached it.
 */
import { mkdtempSync, writeFileSync } from 'node:fs';
import { createServer as createHttpServer, type IncomingMessage, type ServerResponse } from 'node:http';
import { createServer as createHttpsServer } from 'node:https';
import { connect, createServer as createTcpServer, type AddressInfo, type Server, type Socket } from 'node:net';
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
  /** Plain HTTP to the echo server through a recorder: `received` holds exactly the bytes sent to it. */
  recorded!: Server;
  received = '';
  /** Raw TCP connections open now on `tcp`. */
  readonly tcpOpen = new Set<Socket>();
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
    this.tcp = createTcpServer((s) => {
      this.tcpOpen.add(s);
      s.on('close', () => this.tcpOpen.delete(s));
      s.on('data', (d) => s.write(`echo:${d}`)).on('error', () => undefined);
    });
    this.recorded = createTcpServer((guest) => {
      const echo = connect(this.port(this.http), '127.0.0.1');
      guest.on('data', (d) => (this.received += d.toString('latin1')));
      guest.pipe(echo).pipe(guest);
      guest.on('error', () => echo.destroy());
      echo.on('error', () => guest.destroy());
    });
    for (const s of [this.http, this.https, this.tcp, this.recorded]) await new Promise<void>((r) => s.listen(0, '127.0.0.1', () => r()));
  }

  /** Names the gateway resolves (VESSEL_DNS_OVERRIDES). */
  setNames(names: Record<string, string>): void {
    writeFileSync(this.overridesFile, Object.entries(names).map(([n, ip]) => `${n} ${ip}`).join('\n') + '\n');
  }

  hits = (pathPrefix: string): Seen[] => this.seen.filter((s) => s.url.startsWith(pathPrefix));

  close(): void {
    for (const s of [this.http, this.https, this.tcp, this.recorded]) {
      (s as Server & { closeAllConnections?: () => void }).closeAllConnections?.();
      s.close();
    }
  }

  #echo(scheme: 'http' | 'https', req: IncomingMessage, res: ServerResponse): void {
    // Recorded as soon as the head arrives: a request whose body never comes still counts.
    const seen = { scheme, method: req.method ?? '', url: req.url ?? '', rawHeaders: req.rawHeaders, body: '' };
    this.seen.push(seen);
    req.on('data', (d) => (seen.body += d));
    req.on('end', () => {
      if ((req.url ?? '').startsWith('/redirect')) {
        const to = new URL(req.url!, 'http://x').searchParams.get('to') ?? '/';
        res.writeHead(302, { location: to });
        return void res.end();
      }
      if ((req.url ?? '').startsWith('/reflect')) {
        // What canonicalizing servers do: the request URL and a request header come back in headers.
        res.writeHead(301, { location: `/reflected${req.url}`, 'x-reflect': req.headers['x-api-key'] ?? '' });
        return void res.end();
      }
      res.writeHead(200, { 'content-type': 'application/json' });
      res.end(JSON.stringify(seen));
    });
  }
}
