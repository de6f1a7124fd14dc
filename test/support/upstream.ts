/**
 * Upstream servers on loopback for egress tests: HTTP and HTTPS echo servers (the HTTPS one with
 * certificates from a test CA of its own), a raw TCP echo server, and a recorder in front of the
 * HTTP echo server that keeps every byte it was sent. Each records what reached it.
 */
import { mkdtempSync, renameSync, writeFileSync } from 'node:fs';
import { createServer as createHttpServer, type IncomingMessage, type ServerResponse } from 'node:http';
import { createServer as createHttpsServer } from 'node:https';
import { connect, createServer as createTcpServer, type AddressInfo, type Server, type Socket } from 'node:net';
import { createServer as createTlsServer } from 'node:tls';
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

/**
 * Responses Node's client parser accepts but its server cannot write as they are, by path, and
 * what the guest gets for each: a reason with a control byte (or any non-ASCII byte) is replaced
 * by the standard one; a code outside 200..599 or a header value with a control byte is a 502.
 */
export const BAD_RESPONSES: Record<string, [response: string, statusLine: RegExp]> = {
  '/bad-reason': ['HTTP/1.1 200 O\x01K\r\nContent-Length: 2\r\n\r\nok', /^HTTP\/1\.1 200 OK\r\n/],
  '/bad-code': ['HTTP/1.1 099 X\r\nContent-Length: 0\r\n\r\n', /^HTTP\/1\.1 502 /],
  '/big-code': ['HTTP/1.1 700 X\r\nContent-Length: 0\r\n\r\n', /^HTTP\/1\.1 502 /],
  '/bad-header': ['HTTP/1.1 200 OK\r\nX-Bad: a\x01b\r\nContent-Length: 0\r\n\r\n', /^HTTP\/1\.1 502 /],
  '/obs-reason': ['HTTP/1.1 201 Caf\xe9\r\nContent-Length: 2\r\n\r\nok', /^HTTP\/1\.1 201 Created\r\n/],
  '/plain-reason': ['HTTP/1.1 200 All\tGood\r\nContent-Length: 2\r\n\r\nok', /^HTTP\/1\.1 200 All\tGood\r\n/],
};

export class Upstreams {
  readonly seen: Seen[] = [];
  readonly dir = mkdtempSync(join(tmpdir(), 'vessel-upstream-'));
  http!: Server;
  https!: Server;
  tcp!: Server;
  /** Plain HTTP to the echo server through a recorder: `received` holds exactly the bytes sent to it. */
  recorded!: Server;
  received = '';
  /**
   * Servers that answer every request with the raw bytes `scripts` holds for its path (plain TCP,
   * and TLS with a certificate from the test CA): for responses no HTTP server library would write.
   */
  scripted!: Server;
  scriptedTls!: Server;
  readonly scripts = new Map<string, string>();
  /** Every request path the scripted servers were sent, in order, and the raw bytes they received. */
  readonly scriptedPaths: string[] = [];
  scriptedReceived = '';
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
      s.on('data', (d) => s.write(`echo:${d.toString()}`)).on('error', () => undefined);
    });
    this.recorded = createTcpServer((guest) => {
      const echo = connect(this.port(this.http), '127.0.0.1');
      guest.on('data', (d) => (this.received += d.toString('latin1')));
      guest.pipe(echo).pipe(guest);
      guest.on('error', () => echo.destroy());
      echo.on('error', () => guest.destroy());
    });
    const script = (s: Socket) => {
      let head = '';
      s.on('error', () => undefined);
      s.on('data', (d) => {
        head += d.toString('latin1');
        this.scriptedReceived += d.toString('latin1');
        const end = head.indexOf('\r\n\r\n');
        if (end === -1) return;
        const path = head.split(' ')[1] ?? '';
        this.scriptedPaths.push(path);
        head = head.slice(end + 4);
        s.write(Buffer.from(this.scripts.get(path) ?? 'HTTP/1.1 404 Not Found\r\nContent-Length: 0\r\n\r\n', 'latin1'));
      });
    };
    this.scripted = createTcpServer(script);
    this.scriptedTls = createTlsServer({ SNICallback: (name, cb) => void ca.contextFor(name).then((ctx) => cb(null, ctx), (err) => cb(err)) }, script);
    for (const s of [this.http, this.https, this.tcp, this.recorded, this.scripted, this.scriptedTls]) await new Promise<void>((r) => s.listen(0, '127.0.0.1', () => r()));
  }

  /** Names the gateway resolves (VESSEL_DNS_OVERRIDES): the file replaced whole, never rewritten where the gateway reads it. */
  setNames(names: Record<string, string>): void {
    const next = `${this.overridesFile}.next`;
    writeFileSync(next, Object.entries(names).map(([n, ip]) => `${n} ${ip}`).join('\n') + '\n');
    renameSync(next, this.overridesFile);
  }

  hits = (pathPrefix: string): Seen[] => this.seen.filter((s) => s.url.startsWith(pathPrefix));

  close(): void {
    for (const s of [this.http, this.https, this.tcp, this.recorded, this.scripted, this.scriptedTls]) {
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
