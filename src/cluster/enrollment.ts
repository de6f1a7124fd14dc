/**
 * Enrolling a VM host (`vessel node enroll NAME`; docs/scaling.md, "Keys and TLS"), and what each
 * member of a fleet builds its hops from.
 *
 * Enrollment runs where the fleet secret and the master key are (an API node's environment). It
 * derives the host's key (fleet-keys.ts) and, from that, the host's TLS key pair (fleet-tls.ts);
 * issues the host's certificate from the fleet's hop CA; seals the fleet's egress CA key (which
 * the host's gateway signs intercepted connections with) under a key derived from the host's key;
 * and stores all of it as the host's enrollment, which holds nothing a reader of the store can
 * use without that host's key. It prints the host's key, the one value the host is given.
 *
 * A host started with its key (VESSEL_NODE_KEY) reads its enrollment at start and needs neither
 * the fleet secret nor the master key: it serves the hop over TLS alone.
 */
import { X509Certificate } from 'node:crypto';
import type { NodeRepo } from '../core/ports.js';
import { SecretBox } from '../core/secret-box.js';
import { CertificateAuthority, SHARED_CA_CONTEXT } from '../net/certificate-authority.js';
import { FleetKeys, hostKey, subKey } from './fleet-keys.js';
import { HOST_CERT_DAYS, HOST_UNIT, HopCa, HopTls, hostTlsKey, type TlsIdentity } from './fleet-tls.js';
import type { HopClient, HopTarget } from './hop-proxy.js';

interface Sealer {
  seal(plaintext: string, associatedData: string): string;
  open(sealed: string, associatedData: string): string;
}

interface Enrollment {
  v: 1;
  /** The host's certificate, for the key pair derived from its key. */
  cert: string;
  /** The hop CA's certificate: what the host trusts its peers' certificates by. */
  ca: string;
  /** The fleet's egress CA, its key sealed for this host. */
  egressCa: { cert: string; key: string };
}

const hopCa = (nodes: NodeRepo, box: Sealer): Promise<HopCa> => HopCa.shared((proposed) => nodes.shared('hop-ca', proposed), box);
const egressBox = (nodeKey: string): SecretBox => new SecretBox(subKey(nodeKey, 'egress-ca'));

/** Enrolls (or renews the certificate of) VM host `name`; resolves with the key the host is to be given. */
export async function enrollHost(nodes: NodeRepo, fleetSecret: string, box: Sealer, name: string): Promise<{ nodeKey: string; notAfter: string }> {
  const nodeKey = hostKey(fleetSecret, name);
  const ca = await hopCa(nodes, box);
  const cert = await ca.issue(name, HOST_UNIT, hostTlsKey(nodeKey).spki, HOST_CERT_DAYS);
  // The egress CA is made here if no host made it yet: an enrolled host cannot make one (it holds no master key).
  await CertificateAuthority.shared((proposed) => nodes.shared('egress-ca', proposed), box);
  const egress = JSON.parse(await nodes.shared('egress-ca', '')) as { cert: string; key: string };
  const egressKey = box.open(egress.key, SHARED_CA_CONTEXT);
  const enrollment: Enrollment = { v: 1, cert, ca: ca.certPem, egressCa: { cert: egress.cert, key: egressBox(nodeKey).seal(egressKey, SHARED_CA_CONTEXT) } };
  await nodes.enroll(name, JSON.stringify(enrollment));
  return { nodeKey, notAfter: new X509Certificate(cert).validTo };
}

/** What an enrolled host runs with: its TLS identity and the fleet's egress CA. */
export interface HostCredential {
  tls: TlsIdentity;
  egressCa: Promise<CertificateAuthority>;
}

/** The enrollment of host `name`, opened with its key; refused when there is none, or the key is not the one enrolled. */
export async function hostCredential(nodes: NodeRepo, name: string, nodeKey: string): Promise<HostCredential> {
  const stored = await nodes.credential(name);
  if (stored === undefined) throw new Error(`VM host '${name}' is not enrolled: run \`vessel node enroll ${name}\` where VESSEL_INTERNAL_SECRET and VESSEL_MASTER_KEY are, and give this host the key it prints as VESSEL_NODE_KEY`);
  const enrollment = JSON.parse(stored) as Enrollment;
  const pair = hostTlsKey(nodeKey);
  const cert = new X509Certificate(enrollment.cert);
  if (!cert.publicKey.export({ type: 'spki', format: 'der' }).equals(pair.spki)) {
    throw new Error(`VESSEL_NODE_KEY is not the key VM host '${name}' was enrolled with (\`vessel node enroll ${name}\` prints it)`);
  }
  if (Date.parse(cert.validTo) < Date.now()) throw new Error(`the certificate of VM host '${name}' expired on ${cert.validTo}: run \`vessel node enroll ${name}\` again`);
  return {
    tls: { ca: enrollment.ca, cert: enrollment.cert, key: pair.keyPem },
    // CertificateAuthority.shared proposes a CA of its own, and keeps the one it is given: the fleet's.
    egressCa: CertificateAuthority.shared(async () => JSON.stringify(enrollment.egressCa), egressBox(nodeKey)),
  };
}

/** How long an API node believes a host is not enrolled before it looks again. */
const NOT_ENROLLED_MS = 5000;

/**
 * An API node's (or the operator CLI's) hop client: every host's key from the fleet secret, and a
 * certificate of the fleet's hop CA for itself. A host that is enrolled is reached over TLS only:
 * a plain http:// address in its row is refused, whoever wrote it.
 */
export async function apiHopClient(nodes: NodeRepo, fleetSecret: string, box: Sealer): Promise<HopClient & { keys: FleetKeys; close(): void }> {
  const tls = new HopTls(await (await hopCa(nodes, box)).apiIdentity());
  const enrolled = new Set<string>();
  const notEnrolled = new Map<string, number>();
  const isEnrolled = async (name: string): Promise<boolean> => {
    if (enrolled.has(name)) return true;
    if ((notEnrolled.get(name) ?? 0) > Date.now()) return false;
    if ((await nodes.credential(name)) !== undefined) {
      enrolled.add(name);
      return true;
    }
    notEnrolled.set(name, Date.now() + NOT_ENROLLED_MS);
    return false;
  };
  return {
    keys: new FleetKeys(fleetSecret),
    tls,
    plainRefusal: async (target: HopTarget) => ((await isEnrolled(target.name)) ? `VM host '${target.name}' is enrolled for TLS, and its registered address is plain http://` : null),
    close: () => tls.close(),
  };
}
