/**
 * TLS between the members of a fleet (docs/scaling.md, "Keys and TLS"): every hop, from an API
 * node to a VM host and between hosts for moves, is HTTPS with certificates of the fleet's own CA,
 * both ways. A host presents a certificate for its name (CN = name, OU = vessel-host) and API nodes
 * check that name, not an address: a row in the store that points one host's name at another's
 * address (a compromised host can write the nodes table) reaches a peer that cannot prove the name.
 * A host asks every peer for a certificate of the same CA, so nothing outside the fleet even
 * completes a handshake with its hop port.
 *
 * Who holds what:
 * - The CA's key is stored sealed with the master key (`fleet_settings`, 'hop-ca'), as the egress
 *   CA is: API nodes and the operator's CLI open it, hosts never hold it.
 * - An API node issues itself a client certificate at start, in memory.
 * - A host's key pair is derived from its own host key (fleet-keys.ts), so it never needs to be
 *   stored or sent; `vessel node enroll NAME` issues the certificate for that key and stores it
 *   (public) with the host's enrollment, which the host reads at start.
 */
import 'reflect-metadata';
import * as x509 from '@peculiar/x509';
import { createECDH, createPrivateKey, createPublicKey, hkdfSync, randomBytes, webcrypto, type KeyObject } from 'node:crypto';
import { Agent, request as httpsRequest } from 'node:https';
import { createServer as createHttpServer, type Server as HttpServer } from 'node:http';
import { makeCaPems } from '../net/certificate-authority.js';
import { createServer as createTlsServer, type PeerCertificate, type SecureContextOptions, type TlsOptions } from 'node:tls';

x509.cryptoProvider.set(webcrypto as unknown as Crypto);

const ALG = { name: 'ECDSA', namedCurve: 'P-256', hash: 'SHA-256' } as const;
const DAY = 86_400_000;
/** A host's certificate lasts this long; `vessel node enroll` again renews it. */
export const HOST_CERT_DAYS = 365;
const API_CERT_DAYS = 365;
export const HOST_UNIT = 'vessel-host';
export const API_UNIT = 'vessel-api';
/** Binds the sealed CA key to its use, as the egress CA's is bound to its own. */
const HOP_CA_CONTEXT = 'vessel:fleet-hop-ca';
/** P-256's group order: a derived private key must be below it. */
const P256_ORDER = BigInt('0xffffffff00000000ffffffffffffffffbce6faada7179e84f3b9cac2fc632551');

interface Sealer {
  seal(plaintext: string, associatedData: string): string;
  open(sealed: string, associatedData: string): string;
}

const serial = (): string => {
  const b = randomBytes(16);
  b[0] = b[0]! & 0x7f;
  return b.toString('hex');
};

/** The fleet's hop CA, opened: only where the master key is (API nodes, the operator's CLI). */
export class HopCa {
  private constructor(
    readonly certPem: string,
    private readonly cert: x509.X509Certificate,
    private readonly key: CryptoKey,
  ) {}

  /** The one CA of the fleet: proposed by whoever needs it first, the one stored first kept. */
  static async shared(claim: (proposed: string) => Promise<string>, box: Sealer): Promise<HopCa> {
    const made = await makeCaPems(`Vessel fleet hop CA ${randomBytes(4).toString('hex')}`);
    const stored = JSON.parse(await claim(JSON.stringify({ cert: made.certPem, key: box.seal(made.keyPem, HOP_CA_CONTEXT) }))) as { cert: string; key: string };
    const der = Buffer.from(box.open(stored.key, HOP_CA_CONTEXT).replace(/-----[^-]+-----/g, '').replace(/\s+/g, ''), 'base64');
    const key = (await webcrypto.subtle.importKey('pkcs8', der, ALG, false, ['sign'])) as CryptoKey;
    return new HopCa(stored.cert, new x509.X509Certificate(stored.cert), key);
  }

  /** A certificate for `name` in `unit` (a host's, or an API node's), for the public key given as SPKI DER. */
  async issue(name: string, unit: typeof HOST_UNIT | typeof API_UNIT, spki: Buffer, days: number): Promise<string> {
    const publicKey = (await webcrypto.subtle.importKey('spki', spki, ALG, true, ['verify'])) as CryptoKey;
    const now = Date.now();
    const cert = await x509.X509CertificateGenerator.create({
      serialNumber: serial(),
      subject: `CN=${name}, OU=${unit}, O=Vessel`,
      issuer: this.cert.subject,
      notBefore: new Date(now - DAY),
      notAfter: new Date(now + days * DAY),
      signingKey: this.key,
      publicKey,
      signingAlgorithm: ALG,
      extensions: [
        new x509.BasicConstraintsExtension(false, undefined, true),
        new x509.KeyUsagesExtension(x509.KeyUsageFlags.digitalSignature, true),
        new x509.ExtendedKeyUsageExtension([x509.ExtendedKeyUsage.serverAuth, x509.ExtendedKeyUsage.clientAuth]),
        await x509.AuthorityKeyIdentifierExtension.create(this.cert),
      ],
    });
    return cert.toString('pem') + '\n';
  }

  /** An API node's (or the CLI's) certificate: a fresh key, in memory only. */
  async apiIdentity(): Promise<TlsIdentity> {
    const pair = generateP256();
    const cert = await this.issue(`api-${randomBytes(6).toString('hex')}`, API_UNIT, pair.spki, API_CERT_DAYS);
    return { ca: this.certPem, cert, key: pair.keyPem };
  }
}

const keyPair = (key: KeyObject): { keyPem: string; spki: Buffer } => ({
  keyPem: key.export({ type: 'pkcs8', format: 'pem' }) as string,
  spki: createPublicKey(key).export({ type: 'spki', format: 'der' }),
});

function p256From(d: Buffer): { keyPem: string; spki: Buffer } {
  const ecdh = createECDH('prime256v1');
  ecdh.setPrivateKey(d);
  const point = ecdh.getPublicKey();
  const jwk = { kty: 'EC', crv: 'P-256', d: d.toString('base64url'), x: point.subarray(1, 33).toString('base64url'), y: point.subarray(33).toString('base64url') };
  return keyPair(createPrivateKey({ key: jwk, format: 'jwk' }));
}

const generateP256 = (): { keyPem: string; spki: Buffer } => {
  for (;;) {
    const d = randomBytes(32);
    const n = BigInt(`0x${d.toString('hex')}`);
    if (n > 0n && n < P256_ORDER) return p256From(d);
  }
};

/** A host's TLS key pair, derived from its host key: the same pair wherever and whenever it is derived. */
export function hostTlsKey(nodeKey: string): { keyPem: string; spki: Buffer } {
  for (let i = 0; ; i++) {
    const d = Buffer.from(hkdfSync('sha256', nodeKey, 'vessel-host-tls-key-v1', String(i), 32));
    const n = BigInt(`0x${d.toString('hex')}`);
    if (n > 0n && n < P256_ORDER) return p256From(d);
  }
}

/** What one member presents and trusts. */
export interface TlsIdentity {
  ca: string;
  cert: string;
  key: string;
}

/** The unit and name a peer's certificate names, or null when it is not a fleet member's. */
export function memberOf(cert: PeerCertificate | undefined): { unit: string; name: string } | null {
  const subject = cert?.subject as Record<string, string | string[] | undefined> | undefined;
  const cn = subject?.CN;
  const ou = subject?.OU;
  return typeof cn === 'string' && typeof ou === 'string' ? { unit: ou, name: cn } : null;
}

/**
 * The server side of a host's hop port: its certificate, and a certificate of the fleet's CA asked
 * of every peer. A peer without one still completes the handshake, and gets the probes alone
 * (listenTls): the kubelet's HTTPS probe and Prometheus present none.
 */
export const hostServerOptions = (identity: TlsIdentity): SecureContextOptions & { requestCert: true; rejectUnauthorized: false; minVersion: 'TLSv1.3' } => ({
  ca: identity.ca,
  cert: identity.cert,
  key: identity.key,
  requestCert: true,
  rejectUnauthorized: false,
  minVersion: 'TLSv1.3',
});

/** What a peer without a fleet certificate may ask for: liveness, and metrics (which want an admin token). */
const OPEN_PATHS = new Set(['/healthz', '/metrics']);

/**
 * The client side: connections to VM hosts, kept alive and reused, each checked to be the host
 * it is for by the name in its certificate. One pool per host: a connection verified as one host
 * is never reused for another, even when the store gives both one address.
 */
export class HopTls {
  readonly #agents = new Map<string, Agent>();

  constructor(readonly identity: TlsIdentity) {}

  #options(node: string) {
    return {
      ca: this.identity.ca,
      cert: this.identity.cert,
      key: this.identity.key,
      minVersion: 'TLSv1.3' as const,
      checkServerIdentity: (_host: string, cert: PeerCertificate): Error | undefined => {
        const peer = memberOf(cert);
        return peer?.unit === HOST_UNIT && peer.name === node ? undefined : new Error(`the peer is not VM host '${node}' (its certificate names ${peer === null ? 'no fleet member' : `${peer.unit} '${peer.name}'`})`);
      },
    };
  }

  /** Options of one request to host `node` (an upgrade takes a connection of its own). */
  requestOptions(node: string, upgrade: boolean): object {
    if (upgrade) return { ...this.#options(node), agent: false };
    let agent = this.#agents.get(node);
    if (agent === undefined) {
      agent = new Agent({ keepAlive: true, maxFreeSockets: 64, scheduling: 'lifo', ...this.#options(node) });
      this.#agents.set(node, agent);
    }
    return { agent };
  }

  close(): void {
    for (const agent of this.#agents.values()) agent.destroy();
    this.#agents.clear();
  }
}

export { httpsRequest };

/**
 * Serves an app's HTTP server (Fastify's, ready) on a TLS listener: a connection whose peer proved
 * a certificate of the fleet's CA is handed to that server, so upgrades, keep-alive and shutdown
 * work as on a plain listener. A peer without one is served by a gate that passes GET and HEAD of
 * OPEN_PATHS to the app and refuses everything else, hops included, before any of it is read. No
 * plain listener exists: a plain HTTP hop finds no one to talk to.
 */
export async function listenTls(server: HttpServer, options: TlsOptions, host: string, port: number): Promise<() => Promise<void>> {
  const gate = createHttpServer((req, res) => {
    const path = (req.url ?? '').split('?', 1)[0]!;
    if ((req.method === 'GET' || req.method === 'HEAD') && OPEN_PATHS.has(path)) return void server.emit('request', req, res);
    const body = JSON.stringify({ error: { code: 'unauthenticated', message: 'this is a VM host: its hop takes a certificate of the fleet (call an API node)' } });
    res.writeHead(401, { 'content-type': 'application/json', 'content-length': Buffer.byteLength(body), connection: 'close' }).end(body);
  });
  gate.headersTimeout = 10_000;
  gate.requestTimeout = 10_000;
  const listener = createTlsServer(options, (socket) => (socket.authorized ? server.emit('connection', socket) : gate.emit('connection', socket)));
  // A peer that fails its handshake (no certificate, another CA, plain HTTP) is closed; that is all.
  listener.on('tlsClientError', () => undefined);
  await new Promise<void>((resolve, reject) => {
    listener.once('error', reject);
    listener.listen(port, host, () => {
      listener.off('error', reject);
      resolve();
    });
  });
  return async () => {
    await new Promise((resolve) => listener.close(resolve));
    gate.closeAllConnections();
  };
}
