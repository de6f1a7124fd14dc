/**
 * The service's own CA, made at first start in the data directory (key 0600), and the leaf
 * certificates it issues for intercepted hosts and HTTPS ingress, cached per host. ECDSA P-256
 * keys: a leaf costs well under a millisecond to sign, so interception adds no visible delay.
 */
import 'reflect-metadata';
import * as x509 from '@peculiar/x509';
import { createHash, randomBytes, webcrypto } from 'node:crypto';
import { existsSync, readFileSync } from 'node:fs';
import { writeFileDurably } from '../platform/durable-files.js';
import { readPrivateFile } from '../platform/private-files.js';
import { join } from 'node:path';
import { createSecureContext, type SecureContext } from 'node:tls';
import { normalizeHostName } from '../core/host-pattern.js';

x509.cryptoProvider.set(webcrypto as unknown as Crypto);

const ALG = { name: 'ECDSA', namedCurve: 'P-256', hash: 'SHA-256' } as const;
const DAY = 86_400_000;
const LEAF_DAYS = 30;
/** Leaves are reissued well before they expire. */
const LEAF_REFRESH_DAYS = 20;
/** Leaves kept in memory: bounds what clients naming many hosts can make the service hold. */
const MAX_CACHED_LEAVES = 5000;

function pem(label: string, der: ArrayBuffer): string {
  const b64 = Buffer.from(der).toString('base64').replace(/.{64}/g, '$&\n');
  return `-----BEGIN ${label}-----\n${b64}${b64.endsWith('\n') ? '' : '\n'}-----END ${label}-----\n`;
}

function derOf(pemText: string): Buffer {
  return Buffer.from(pemText.replace(/-----[^-]+-----/g, '').replace(/\s+/g, ''), 'base64');
}

const serial = () => {
  const b = randomBytes(16);
  b[0] = b[0]! & 0x7f;
  return b.toString('hex');
};

interface Leaf {
  context: SecureContext;
  certPem: string;
  keyPem: string;
  issued: number;
}

interface LeafKey {
  pair: CryptoKeyPair;
  pem: string;
}

/** What seals the shared CA's key in the store: the service's SecretBox. */
interface Sealer {
  seal(plaintext: string, associatedData: string): string;
  open(sealed: string, associatedData: string): string;
}

/** Binds the sealed key to its use: a sealed tenant secret can never be passed off as it. */
export const SHARED_CA_CONTEXT = 'vessel:fleet-egress-ca';

/** A new self-signed CA (P-256, ten years) named `commonName`: its certificate and its key, as PEM. */
export async function makeCaPems(commonName: string): Promise<{ certPem: string; keyPem: string }> {
  const subtle = webcrypto.subtle;
  const keys = (await subtle.generateKey(ALG, true, ['sign', 'verify'])) as CryptoKeyPair;
  const now = Date.now();
  const cert = await x509.X509CertificateGenerator.createSelfSigned({
    serialNumber: serial(),
    name: `CN=${commonName}, O=Vessel`,
    notBefore: new Date(now - DAY),
    notAfter: new Date(now + 3650 * DAY),
    keys,
    signingAlgorithm: ALG,
    extensions: [
      new x509.BasicConstraintsExtension(true, 0, true),
      new x509.KeyUsagesExtension(x509.KeyUsageFlags.keyCertSign | x509.KeyUsageFlags.cRLSign, true),
      await x509.SubjectKeyIdentifierExtension.create(keys.publicKey),
    ],
  });
  return { certPem: cert.toString('pem') + '\n', keyPem: pem('PRIVATE KEY', await subtle.exportKey('pkcs8', keys.privateKey)) };
}

export class CertificateAuthority {
  readonly #leaves = new Map<string, Leaf>();
  /** Leaves being signed: concurrent handshakes for one name wait for the same signature. */
  readonly #signing = new Map<string, Promise<Leaf>>();
  /**
   * One key for every leaf: the CA signature binds each name, and a key pair per host would only
   * cost time. It lives in memory alone. Made once, however many handshakes ask at the same time.
   */
  #leafKey: Promise<LeafKey> | null = null;

  private constructor(
    readonly certPem: string,
    private readonly keyPem: string,
    private readonly cert: x509.X509Certificate,
    private readonly key: CryptoKey,
  ) {}

  /** The certificate and its key, for the gateway's process, which signs the leaves (gateway.ts). */
  pems(): { certPem: string; keyPem: string } {
    return { certPem: this.certPem, keyPem: this.keyPem };
  }

  /** Short fingerprint, for naming things that depend on this CA (the guest templates). */
  get fingerprint(): string {
    return createHash('sha256').update(derOf(this.certPem)).digest('hex').slice(0, 12);
  }

  static async loadOrCreate(dataDir: string): Promise<CertificateAuthority> {
    const certFile = join(dataDir, 'ca.crt');
    const keyFile = join(dataDir, 'ca.key');
    if (existsSync(certFile) && existsSync(keyFile)) return CertificateAuthority.fromPem(readFileSync(certFile, 'utf8'), readPrivateFile(keyFile));
    const made = await makeCaPems(`Vessel egress CA ${randomBytes(4).toString('hex')}`);
    // The key first and the certificate last, each whole or not at all: a crash in between
    // leaves no certificate, and the next start makes a new pair over the lone key.
    writeFileDurably(keyFile, made.keyPem, 0o600);
    writeFileDurably(certFile, made.certPem, 0o644);
    return CertificateAuthority.fromPem(made.certPem, made.keyPem);
  }

  /**
   * A fleet's one CA: the guests of a checkpoint trust it wherever the checkpoint's files move
   * (docs/scaling.md, "Moving checkpoints"). Each VM host proposes a new one, and all use the one
   * stored first. Its key is stored sealed with the master key, which every host holds already.
   */
  static async shared(claim: (proposed: string) => Promise<string>, box: Sealer): Promise<CertificateAuthority> {
    const made = await makeCaPems(`Vessel egress CA ${randomBytes(4).toString('hex')}`);
    const stored = JSON.parse(await claim(JSON.stringify({ cert: made.certPem, key: box.seal(made.keyPem, SHARED_CA_CONTEXT) }))) as { cert: string; key: string };
    return CertificateAuthority.fromPem(stored.cert, box.open(stored.key, SHARED_CA_CONTEXT));
  }

  static async fromPem(certPem: string, keyPem: string): Promise<CertificateAuthority> {
    const key = await webcrypto.subtle.importKey('pkcs8', derOf(keyPem), ALG, false, ['sign']);
    return new CertificateAuthority(certPem, keyPem, new x509.X509Certificate(certPem), key as CryptoKey);
  }

  /**
   * A TLS context presenting a leaf for `host` signed by this CA. `host` must be a DNS name in
   * its normal form (it comes from a client's SNI): anything else is refused before it reaches a
   * certificate's subject.
   */
  async contextFor(host: string): Promise<SecureContext> {
    if (normalizeHostName(host) !== host) throw new Error('not a host name a certificate can be issued for');
    const cached = this.#leaves.get(host);
    if (cached !== undefined && Date.now() - cached.issued < LEAF_REFRESH_DAYS * DAY) return cached.context;
    let signing = this.#signing.get(host);
    if (signing === undefined) {
      signing = this.#sign(host).finally(() => this.#signing.delete(host));
      this.#signing.set(host, signing);
    }
    return (await signing).context;
  }

  #key(): Promise<LeafKey> {
    this.#leafKey ??= (async () => {
      const pair = (await webcrypto.subtle.generateKey(ALG, true, ['sign', 'verify'])) as CryptoKeyPair;
      return { pair, pem: pem('PRIVATE KEY', await webcrypto.subtle.exportKey('pkcs8', pair.privateKey)) };
    })();
    return this.#leafKey;
  }

  async #sign(host: string): Promise<Leaf> {
    const key = await this.#key();
    const now = Date.now();
    const cert = await x509.X509CertificateGenerator.create({
      serialNumber: serial(),
      subject: `CN=${host}`,
      issuer: this.cert.subject,
      notBefore: new Date(now - DAY),
      notAfter: new Date(now + LEAF_DAYS * DAY),
      signingKey: this.key,
      publicKey: key.pair.publicKey,
      signingAlgorithm: ALG,
      extensions: [
        new x509.BasicConstraintsExtension(false, undefined, true),
        new x509.KeyUsagesExtension(x509.KeyUsageFlags.digitalSignature, true),
        new x509.ExtendedKeyUsageExtension([x509.ExtendedKeyUsage.serverAuth]),
        new x509.SubjectAlternativeNameExtension([{ type: 'dns', value: host }]),
        await x509.AuthorityKeyIdentifierExtension.create(this.cert),
      ],
    });
    const certPem = cert.toString('pem');
    const leaf = { context: createSecureContext({ cert: certPem, key: key.pem }), certPem, keyPem: key.pem, issued: now };
    if (this.#leaves.size >= MAX_CACHED_LEAVES) this.#leaves.delete(this.#leaves.keys().next().value!);
    this.#leaves.set(host, leaf);
    return leaf;
  }
}
