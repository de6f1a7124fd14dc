/**
 * An HTTPS upstream on loopback that echoes each request's head back in its body, the way echo
 * services and error pages do, for the body redaction tests. Certificates come from the test CA of
 * test/support/upstream.ts (its `dir`), which the harness's gateway trusts.
 *
 * `GET /echo?enc=plain|percent|base64[&at=K]`: the body is the request head (request line and
 * header lines, CRLF-separated), encoded; with `at`, it is written as two chunks, cut K bytes
 * into where the `X-Api-Key` value begins in the encoded text. It honours `Accept-Encoding: gzip`.
 * `/gzip-anyway` answers gzip whatever was asked; `/store` keeps the X-Api-Key it got and `/last`
 * answers it (an upstream with state, read by a request that carried nothing).
 */
import { createServer, type Server } from 'node:https';
import type { AddressInfo } from 'node:net';
import { gzipSync } from 'node:zlib';
import { CertificateAuthority } from '../../src/net/certificate-authority.js';

export const ENCODINGS = {
  plain: (s: string) => s,
  percent: (s: string) => encodeURIComponent(s),
  base64: (s: string) => Buffer.from(s, 'latin1').toString('base64'),
} as const;
export type Encoding = keyof typeof ENCODINGS;

/** Where text that starts at `p` in `head` starts once the whole is encoded (base64: its group). */
const encodedOffset: Record<Encoding, (head: string, p: number) => number> = {
  plain: (_head, p) => p,
  percent: (head, p) => encodeURIComponent(head.slice(0, p)).length,
  base64: (_head, p) => Math.floor(p / 3) * 4,
};

export async function echoUpstream(caDir: string): Promise<{ server: Server; port: number; acceptEncodings: string[] }> {
  const ca = await CertificateAuthority.loadOrCreate(caDir);
  const acceptEncodings: string[] = [];
  let stored = '';
  const server = createServer({ SNICallback: (name, cb) => void ca.contextFor(name).then((ctx) => cb(null, ctx), (err) => cb(err)) }, (req, res) => {
    const url = new URL(req.url ?? '/', 'https://x');
    const lines = [`${req.method} ${req.url} HTTP/1.1`];
    for (let i = 0; i < req.rawHeaders.length; i += 2) lines.push(`${req.rawHeaders[i]}: ${req.rawHeaders[i + 1]}`);
    const head = lines.join('\r\n') + '\r\n\r\n';
    acceptEncodings.push(String(req.headers['accept-encoding']));
    req.resume();
    if (url.pathname === '/store') stored = String(req.headers['x-api-key'] ?? '');
    if (url.pathname === '/last') return void res.end(`last key: ${stored}\n`);
    if (url.pathname === '/gzip-anyway') {
      res.writeHead(200, { 'content-encoding': 'gzip', 'content-type': 'text/plain' });
      return void res.end(gzipSync(head));
    }
    const enc = (url.searchParams.get('enc') ?? 'plain') as Encoding;
    const body = ENCODINGS[enc](head);
    if (/\bgzip\b/.test(String(req.headers['accept-encoding'] ?? ''))) {
      res.writeHead(200, { 'content-encoding': 'gzip', 'content-type': 'text/plain' });
      return void res.end(gzipSync(body));
    }
    const at = url.searchParams.get('at');
    if (at === null) {
      res.writeHead(200, { 'content-type': 'text/plain', 'content-length': Buffer.byteLength(body) });
      return void res.end(body);
    }
    const key = `X-Api-Key: ${String(req.headers['x-api-key'])}`;
    const cut = encodedOffset[enc](head, head.indexOf(key) + 'X-Api-Key: '.length) + Number(at);
    // Two writes of a chunked body: two chunks, which the gateway's parser hands on as two.
    res.writeHead(200, { 'content-type': 'text/plain' });
    res.write(body.slice(0, cut));
    res.end(body.slice(cut));
  });
  await new Promise<void>((r) => server.listen(0, '127.0.0.1', () => r()));
  return { server, port: (server.address() as AddressInfo).port, acceptEncodings };
}
