/** Configuration from the environment (DESIGN.md lists every variable), read once at start. */
import { isIP } from 'node:net';
import { hostname } from 'node:os';
import { resolve } from 'node:path';
import { publicIngressAddress, type IngressAddress } from '../core/ingress-urls.js';
import type { TenantLimits } from '../core/types.js';
import { parseCidrList } from '../net/blocked-ranges.js';
import { parseRegistryList } from '../templates/registry-policy.js';
import type { ObjectStoreSettings } from '../objects/chunk-store.js';
import { DEFAULT_MAX_CONNECTIONS_PER_RUNTIME, DEFAULT_MAX_CONNECTIONS_PER_TENANT } from '../net/connection-limits.js';

export interface Config {
  host: string;
  port: number;
  dataDir: string;
  /** PostgreSQL to keep state in (postgres://…); undefined keeps the embedded SQLite in dataDir. */
  databaseUrl: string | undefined;
  adminToken: string | undefined;
  masterKey: string | undefined;
  accel: 'kvm' | 'tcg' | 'auto';
  rateLimit: { ratePerSec: number; burst: number };
  /** Per client address, for requests without a valid token. */
  unauthenticatedRateLimit: { ratePerSec: number; burst: number };
  /** Proxies whose X-Forwarded-For names the client (addresses, CIDRs); empty: none. */
  trustedProxies: string[];
  maxFileBytes: number;
  memoryOvercommit: number;
  logLevel: string;
  /** The idle timeout of runtimes whose lifecycle sets none (no exec, file or egress activity that long suspends them); 0 = never. */
  idleSuspendSecs: number;
  /** Spare VMs kept forked and ready for creates without a checkpoint; 0 = none. */
  warmPoolSize: number;
  /** What each tenant may hold unless `vessel tenant limits set` gave it limits of its own. */
  tenantLimits: TenantLimits;
  /** Registries (`host[:port]`) builds may pull from whatever their address; those on loopback over plain HTTP (docs/templates.md). */
  templateRegistriesAllowed: string[];
  egress: {
    allowCidrs: string[];
    extraCaFile: string | undefined;
    dnsOverridesFile: string | undefined;
    /** Where guest traffic is redirected on the gateway address. */
    proxyPort: number;
    dnsPort: number;
    injectPlainHttp: boolean;
    icmpAuditSecs: number;
    /** Open egress connections one runtime, and one tenant's runtimes together, may hold. */
    maxConnectionsPerRuntime: number;
    maxConnectionsPerTenant: number;
    /**
     * `port` and `domain` are the listener's; `publicAddress` is where clients reach it, which the
     * runtimes' ingress_urls show: VESSEL_INGRESS_PUBLIC_URL, or the listener's own domain and port.
     */
    ingress: { host: string; port: number; domain: string; publicAddress: IngressAddress };
  };
  /** S3-compatible object storage for checkpoints (docs/scaling.md, "Object storage"); null: none, files stay on their host. */
  objectStore: ObjectStoreSettings | null;
  /** A fleet of API nodes and VM hosts on one PostgreSQL (docs/scaling.md); unused by `--role all`. */
  fleet: {
    /** What this VM host registers as, and `vessel node drain` names. */
    nodeName: string;
    /** The fleet secret, which API nodes derive every host's key from (src/cluster/fleet-keys.ts); at least 32 characters. */
    internalSecret: string | undefined;
    /** A VM host's own key, as `vessel node enroll NAME` printed it: all an enrolled host holds of the fleet's keys. */
    nodeKey: string | undefined;
    /** Where a VM host serves the hop (and /healthz, /metrics). */
    internalPort: number;
    /** The address API nodes reach this host at (its internal and ingress listeners). */
    advertiseHost: string;
    /** How long a VM host's lease lasts unless renewed; it renews three times within it. */
    leaseSecs: number;
    /** Where an enrolled VM host reaches API nodes to have secrets unsealed (VESSEL_API_URL): origins, asked in turn. */
    apiUrls: string[];
  };
}

/** A node's name is a DNS label or a dotted host name: it appears in URLs, logs and messages. */
const NODE_NAME = /^[a-z0-9]([a-z0-9.-]{0,61}[a-z0-9])?$/;

/** A VM host's name as the fleet spells it (lower case), or an error saying what one is. */
export function checkNodeName(given: string, setting = 'VESSEL_NODE_NAME'): string {
  const name = given.toLowerCase();
  if (!NODE_NAME.test(name)) throw new Error(`${setting} must be a host name (letters, digits, '-' and '.', at most 63), got '${name.slice(0, 80)}'`);
  return name;
}

const nodeName = (env: NodeJS.ProcessEnv): string => checkNodeName(env.VESSEL_NODE_NAME || hostname());

/**
 * VESSEL_API_URL: one or more origins (`http://` or `https://`, host and port, no path), separated
 * by commas or spaces. The host signs the path it calls, so an address with a path of its own
 * (a proxy that rewrites it) would be refused at every call: refused here instead.
 */
export function apiUrls(text: string | undefined): string[] {
  const list = (text ?? '').split(/[\s,]+/).filter((s) => s !== '');
  return list.map((entry) => {
    let url: URL;
    try {
      url = new URL(entry);
    } catch {
      throw new Error(`VESSEL_API_URL: '${entry.slice(0, 80)}' is not a URL`);
    }
    const plainOrigin = (url.protocol === 'http:' || url.protocol === 'https:') && url.username === '' && url.password === '' && url.pathname === '/' && url.search === '' && url.hash === '';
    if (!plainOrigin) throw new Error(`VESSEL_API_URL: '${entry.slice(0, 80)}' must be an http:// or https:// address with no path, query or credentials (an API node's, or its Service's)`);
    return url.origin;
  });
}

/** S3's rules for a bucket's name: 3 to 63 lower-case letters, digits, '.' and '-'. */
const BUCKET = /^[a-z0-9][a-z0-9.-]{1,61}[a-z0-9]$/;

/**
 * VESSEL_OBJECT_STORE_URL (the S3 endpoint, an http:// or https:// origin), _BUCKET, _REGION
 * (us-east-1 unless given: what S3-compatible servers take), and the keys: both of
 * VESSEL_OBJECT_STORE_ACCESS_KEY_ID and _SECRET_ACCESS_KEY, or neither, which leaves them to the
 * AWS SDK's own chain (AWS_* variables, a web identity token on Kubernetes, an instance role).
 */
export function objectStore(env: NodeJS.ProcessEnv): ObjectStoreSettings | null {
  const url = env.VESSEL_OBJECT_STORE_URL;
  if (url === undefined || url === '') return null;
  let parsed: URL;
  try {
    parsed = new URL(url);
  } catch {
    throw new Error(`VESSEL_OBJECT_STORE_URL: '${url.slice(0, 80)}' is not a URL`);
  }
  const origin = (parsed.protocol === 'http:' || parsed.protocol === 'https:') && parsed.username === '' && parsed.password === '' && parsed.pathname === '/' && parsed.search === '';
  if (!origin) throw new Error('VESSEL_OBJECT_STORE_URL must be an http:// or https:// address with no path or credentials (the S3 endpoint; the bucket is VESSEL_OBJECT_STORE_BUCKET)');
  const bucket = env.VESSEL_OBJECT_STORE_BUCKET ?? '';
  if (!BUCKET.test(bucket)) throw new Error(`VESSEL_OBJECT_STORE_BUCKET must name a bucket (3 to 63 lower-case letters, digits, '.' and '-'), got '${bucket.slice(0, 80)}'`);
  const accessKeyId = env.VESSEL_OBJECT_STORE_ACCESS_KEY_ID || undefined;
  const secretAccessKey = env.VESSEL_OBJECT_STORE_SECRET_ACCESS_KEY || undefined;
  if ((accessKeyId === undefined) !== (secretAccessKey === undefined)) throw new Error('VESSEL_OBJECT_STORE_ACCESS_KEY_ID and VESSEL_OBJECT_STORE_SECRET_ACCESS_KEY go together: give both, or neither for the AWS SDK\'s own credentials');
  return {
    endpoint: parsed.origin,
    bucket,
    region: env.VESSEL_OBJECT_STORE_REGION || 'us-east-1',
    credentials: accessKeyId === undefined || secretAccessKey === undefined ? null : { accessKeyId, secretAccessKey },
  };
}

/** Only a PostgreSQL URL: a typo must not silently fall back to a fresh SQLite file. */
function databaseUrl(env: NodeJS.ProcessEnv): string | undefined {
  const url = env.VESSEL_DATABASE_URL;
  if (url === undefined || url === '') return undefined;
  if (!/^postgres(ql)?:\/\//.test(url)) throw new Error('VESSEL_DATABASE_URL must be a postgres:// or postgresql:// URL');
  return url;
}

/** proxy-addr's names for ranges, which Fastify's trustProxy accepts beside addresses and CIDRs. */
const PROXY_RANGES = ['loopback', 'linklocal', 'uniquelocal'];

/**
 * VESSEL_TRUSTED_PROXIES, checked here so that a typo stops the start with its name rather than
 * failing inside Fastify (or, worse, trusting something else).
 */
function trustedProxies(env: NodeJS.ProcessEnv): string[] {
  const list = (env.VESSEL_TRUSTED_PROXIES ?? '').split(/[\s,]+/).filter((s) => s !== '');
  for (const entry of list) {
    if (PROXY_RANGES.includes(entry)) continue;
    const [address = '', prefix, extra] = entry.split('/');
    const family = isIP(address);
    const bits = family === 4 ? 32 : 128;
    const prefixOk = prefix === undefined || (/^\d{1,3}$/.test(prefix) && Number(prefix) <= bits);
    if (family === 0 || !prefixOk || extra !== undefined) {
      throw new Error(`VESSEL_TRUSTED_PROXIES: '${entry.slice(0, 80)}' is not an IP address, a CIDR or one of ${PROXY_RANGES.join(', ')}`);
    }
  }
  return list;
}

/**
 * The per-token rate limit this process enforces. Buckets live in each API node's memory, so N
 * nodes behind a balancer would allow N times the rate; VESSEL_RATE_LIMIT_SHARES=N (the API
 * Deployment's replicas) gives each node its share, so that a token's requests, spread over the
 * nodes, meet the configured rate fleet-wide (docs/scaling.md, "Rate limits"). Rounded up: a
 * share is never zero unless the limit is off.
 */
function tokenRateLimit(env: NodeJS.ProcessEnv): { ratePerSec: number; burst: number } {
  const shares = wholeNumber(env, 'VESSEL_RATE_LIMIT_SHARES', 1);
  if (shares < 1) throw new Error(`VESSEL_RATE_LIMIT_SHARES must be at least 1 (the API nodes that share the rate), got '${env.VESSEL_RATE_LIMIT_SHARES}'`);
  const share = (n: number): number => Math.ceil(n / shares);
  return { ratePerSec: share(int(env, 'VESSEL_RATE_LIMIT_RPS', 200)), burst: share(int(env, 'VESSEL_RATE_LIMIT_BURST', 1000)) };
}

function int(env: NodeJS.ProcessEnv, name: string, fallback: number): number {
  const raw = env[name];
  if (raw === undefined || raw === '') return fallback;
  const n = Number(raw);
  if (!Number.isFinite(n) || n < 0) throw new Error(`${name} must be a non-negative number, got '${raw}'`);
  return n;
}

function wholeNumber(env: NodeJS.ProcessEnv, name: string, fallback: number): number {
  const n = int(env, name, fallback);
  if (!Number.isSafeInteger(n)) throw new Error(`${name} must be a whole number, got '${env[name]}'`);
  return n;
}

/**
 * Per-tenant defaults for a small team's host (8 to 16 cores, 32 to 64 GiB, a few hundred GB of
 * disk, a handful of tenants). A tenant can run 50 runtimes of the default shape (1 vCPU,
 * 512 MiB) at once, so the runtime count is the limit it meets first; larger shapes meet the
 * sums before they take the host: 64 vCPUs (idle guests cost little CPU, so 4 to 8 per core is
 * fair sharing, not capacity) and 32 GiB of memory limits (what the guests may grow to, half to
 * all of such a host's RAM). A checkpoint of an idle 512 MiB runtime takes about 100 MiB, one
 * whose guest filled its memory about 600 MiB: 50 checkpoints within 20 GiB keeps a tenant to a
 * tenth or less of the disk.
 *
 * Templates: a root disk is the image's files plus room to write (a Debian image with Python is
 * 1 to 2 GiB), so 20 templates within 40 GiB hold a team's environments.
 */
export const DEFAULT_TENANT_LIMITS: TenantLimits = { runtimes: 50, vcpus: 64, memoryMib: 32 * 1024, checkpoints: 50, checkpointGib: 20, templates: 20, templateGib: 40 };

/**
 * The ingress listener, and where clients reach it. Behind a proxy, VESSEL_INGRESS_PUBLIC_URL
 * names the proxy's origin; its domain is the one the listener routes (the proxy passes the
 * Host on), so VESSEL_INGRESS_DOMAIN, when set too, must be the same.
 */
function ingressSettings(env: NodeJS.ProcessEnv): Config['egress']['ingress'] {
  const port = int(env, 'VESSEL_INGRESS_PORT', 8081);
  const host = env.VESSEL_INGRESS_HOST ?? env.VESSEL_HOST ?? '127.0.0.1';
  const given = env.VESSEL_INGRESS_DOMAIN || undefined;
  if (!env.VESSEL_INGRESS_PUBLIC_URL) return { host, port, domain: given ?? 'localhost', publicAddress: { domain: given ?? 'localhost', port } };
  const publicAddress = publicIngressAddress(env.VESSEL_INGRESS_PUBLIC_URL);
  if (given !== undefined && given.toLowerCase().replace(/\.$/, '') !== publicAddress.domain.toLowerCase()) {
    throw new Error(`VESSEL_INGRESS_PUBLIC_URL's domain (${publicAddress.domain}) must be VESSEL_INGRESS_DOMAIN (${given.slice(0, 80)}): the proxy passes the Host on, and the ingress routes by it`);
  }
  return { host, port, domain: given ?? publicAddress.domain, publicAddress };
}

export function loadConfig(env: NodeJS.ProcessEnv = process.env): Config {
  const accel = (env.VESSEL_ACCEL ?? 'auto').toLowerCase();
  if (accel !== 'kvm' && accel !== 'tcg' && accel !== 'auto') throw new Error(`VESSEL_ACCEL must be kvm, tcg or auto, got '${accel}'`);
  return {
    host: env.VESSEL_HOST ?? '127.0.0.1',
    port: int(env, 'VESSEL_PORT', 8080),
    dataDir: resolve(env.VESSEL_DATA_DIR ?? './data'),
    databaseUrl: databaseUrl(env),
    adminToken: env.VESSEL_ADMIN_TOKEN || undefined,
    masterKey: env.VESSEL_MASTER_KEY || undefined,
    accel,
    rateLimit: tokenRateLimit(env),
    // A client with no valid token has nothing to do but mistype one a few times: 20 attempts
    // at once, then 2 a second, keeps failed logins from becoming load (each is a hash and a
    // store read) without getting in the way of a client fixing its configuration.
    unauthenticatedRateLimit: { ratePerSec: int(env, 'VESSEL_UNAUTH_RATE_LIMIT_RPS', 2), burst: int(env, 'VESSEL_UNAUTH_RATE_LIMIT_BURST', 20) },
    // Off by default: believing X-Forwarded-For from anyone would let each request pick its bucket.
    trustedProxies: trustedProxies(env),
    maxFileBytes: int(env, 'VESSEL_MAX_FILE_BYTES', 1024 ** 3),
    memoryOvercommit: int(env, 'VESSEL_MEMORY_OVERCOMMIT', 8),
    logLevel: env.VESSEL_LOG_LEVEL ?? 'info',
    idleSuspendSecs: int(env, 'VESSEL_IDLE_SUSPEND_SECS', 0),
    warmPoolSize: int(env, 'VESSEL_WARM_POOL', 2),
    tenantLimits: {
      runtimes: wholeNumber(env, 'VESSEL_TENANT_MAX_RUNTIMES', DEFAULT_TENANT_LIMITS.runtimes),
      vcpus: wholeNumber(env, 'VESSEL_TENANT_MAX_VCPUS', DEFAULT_TENANT_LIMITS.vcpus),
      memoryMib: wholeNumber(env, 'VESSEL_TENANT_MAX_MEMORY_MIB', DEFAULT_TENANT_LIMITS.memoryMib),
      checkpoints: wholeNumber(env, 'VESSEL_TENANT_MAX_CHECKPOINTS', DEFAULT_TENANT_LIMITS.checkpoints),
      checkpointGib: wholeNumber(env, 'VESSEL_TENANT_MAX_CHECKPOINT_GIB', DEFAULT_TENANT_LIMITS.checkpointGib),
      templates: wholeNumber(env, 'VESSEL_TENANT_MAX_TEMPLATES', DEFAULT_TENANT_LIMITS.templates),
      templateGib: wholeNumber(env, 'VESSEL_TENANT_MAX_TEMPLATE_GIB', DEFAULT_TENANT_LIMITS.templateGib),
    },
    templateRegistriesAllowed: parseRegistryList(env.VESSEL_TEMPLATE_REGISTRIES_ALLOWED),
    objectStore: objectStore(env),
    egress: {
      allowCidrs: parseCidrList(env.VESSEL_EGRESS_ALLOW_CIDRS),
      extraCaFile: env.VESSEL_EGRESS_EXTRA_CA || undefined,
      dnsOverridesFile: env.VESSEL_DNS_OVERRIDES || undefined,
      proxyPort: int(env, 'VESSEL_EGRESS_PROXY_PORT', 15001),
      dnsPort: int(env, 'VESSEL_EGRESS_DNS_PORT', 15053),
      injectPlainHttp: env.VESSEL_EGRESS_INJECT_PLAIN_HTTP === '1',
      icmpAuditSecs: int(env, 'VESSEL_ICMP_AUDIT_SECS', 10),
      maxConnectionsPerRuntime: wholeNumber(env, 'VESSEL_EGRESS_MAX_CONNECTIONS_PER_RUNTIME', DEFAULT_MAX_CONNECTIONS_PER_RUNTIME),
      maxConnectionsPerTenant: wholeNumber(env, 'VESSEL_EGRESS_MAX_CONNECTIONS_PER_TENANT', DEFAULT_MAX_CONNECTIONS_PER_TENANT),
      ingress: ingressSettings(env),
    },
    fleet: {
      nodeName: nodeName(env),
      internalSecret: env.VESSEL_INTERNAL_SECRET || undefined,
      nodeKey: env.VESSEL_NODE_KEY || undefined,
      internalPort: int(env, 'VESSEL_INTERNAL_PORT', 8082),
      advertiseHost: env.VESSEL_ADVERTISE_HOST || (['0.0.0.0', '::'].includes(env.VESSEL_HOST ?? '') ? hostname() : (env.VESSEL_HOST ?? '127.0.0.1')),
      leaseSecs: int(env, 'VESSEL_NODE_LEASE_SECS', 15),
      apiUrls: apiUrls(env.VESSEL_API_URL),
    },
  };
}
