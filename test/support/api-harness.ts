/**
 * Builds the real API over a real store (SQLite in a temp dir unless the test gives another); the
 * VM driver is chosen by the test.
 */
import { mkdtempSync, rmSync } from 'node:fs';
import { tmpdir } from 'node:os';
import { join } from 'node:path';
import { randomBytes } from 'node:crypto';
import type { FastifyBaseLogger, FastifyInstance, InjectOptions } from 'fastify';
import { buildApi } from '../../src/api/app.js';
import type { ConsoleOptions } from '../../src/api/console.js';
import type { FleetRole } from '../../src/api/fleet.js';
import type { RateLimitConfig } from '../../src/api/rate-limit.js';
import { loadAdminToken } from '../../src/cli/data-dir.js';
import { Core } from '../../src/core/core.js';
import type { IngressAddress } from '../../src/core/ingress-urls.js';
import type { Store, TemplateBuilder, VmDriver } from '../../src/core/ports.js';
import { SecretBox } from '../../src/core/secret-box.js';
import type { Scope, TenantLimits } from '../../src/core/types.js';
import { SqliteStore } from '../../src/store/sqlite-store.js';
import { FakeDriver } from './fake-driver.js';
import { FakeTemplateBuilder } from './fake-template-builder.js';
import { FakeGateway } from './fake-gateway.js';

export const silentLog = { info() {}, warn() {}, error() {} };

export interface ApiHarness {
  app: FastifyInstance;
  core: Core;
  driver: VmDriver;
  admin: string;
  dir: string;
  store: Store;
  call(method: InjectOptions['method'], url: string, body?: unknown, token?: string | null): Promise<{ status: number; body: any; headers: Record<string, unknown> }>;
  token(tenant: string, scopes: Scope[]): Promise<string>;
  close(): Promise<void>;
}

/** `dir` reopens the store of an earlier harness, as a restarted service would (it is then left in place). */
/** Limits for every tenant that no test reaches unless it means to. */
export const ROOMY_TENANT_LIMITS: TenantLimits = { runtimes: 1000, vcpus: 1000, memoryMib: 1024 * 1024, checkpoints: 1000, checkpointGib: 1024, templates: 1000, templateGib: 1024 };

export async function apiHarness(
  opts: {
    driver?: VmDriver;
    rate?: RateLimitConfig;
    unauthenticatedRate?: RateLimitConfig;
    dir?: string;
    tenantLimits?: TenantLimits;
    /** Where the API would listen (default loopback). */
    listenHost?: string;
    /** The web console's settings (src/api/console.ts). */
    console?: ConsoleOptions;
    /** The API's logger (default none). */
    logger?: FastifyBaseLogger;
    /** Another store than the temp dir's SQLite (PostgreSQL); the harness closes it. */
    store?: Store;
    /** The admin token, as VESSEL_ADMIN_TOKEN gives it; processes sharing one store must agree on it. */
    adminToken?: string;
    /** Where ingress is reached, for ingress_urls (default: no ingress). */
    ingress?: IngressAddress;
    /** The node's part in a fleet (default: a single host); a function is given the harness's core. */
    fleet?: FleetRole | ((core: Core) => FleetRole);
    /** What builds templates (default: a FakeTemplateBuilder). */
    templateBuilder?: TemplateBuilder;
  } = {},
): Promise<ApiHarness> {
  const dir = opts.dir ?? mkdtempSync(join(tmpdir(), 'vessel-api-'));
  const store = opts.store ?? new SqliteStore(join(dir, 'vessel.db'));
  const driver = opts.driver ?? new FakeDriver();
  const core = new Core({ store, driver, gateway: new FakeGateway(), secretBox: new SecretBox(randomBytes(32)), log: silentLog, tenantLimits: opts.tenantLimits ?? ROOMY_TENANT_LIMITS, templateBuilder: opts.templateBuilder ?? new FakeTemplateBuilder() });
  // Kept in the directory as the service keeps it: a harness reopening `dir` is a restarted
  // service, and must not revoke the admin token its predecessor's tests still hold.
  const admin = loadAdminToken(dir, opts.adminToken).token;
  await core.tokens.installAdmin(admin);
  const app = await buildApi({
    core,
    logger: opts.logger ?? false,
    rateLimit: opts.rate ?? { ratePerSec: 0, burst: 0 },
    unauthenticatedRateLimit: opts.unauthenticatedRate ?? { ratePerSec: 0, burst: 0 },
    maxFileBytes: 1024 * 1024,
    listenHost: opts.listenHost ?? '127.0.0.1',
    console: opts.console,
    ingress: opts.ingress,
    fleet: typeof opts.fleet === 'function' ? opts.fleet(core) : opts.fleet,
  });
  await app.ready();
  return {
    app,
    core,
    driver,
    admin,
    dir,
    store,
    async call(method, url, body, token = admin) {
      const headers: Record<string, string> = {};
      if (token !== null) headers.authorization = `Bearer ${token}`;
      const res = await app.inject({ method, url, headers, ...(body === undefined ? {} : { payload: body as object }) });
      let parsed: unknown = res.body;
      if ((res.headers['content-type'] ?? '').toString().includes('json') && res.body !== '') parsed = JSON.parse(res.body);
      return { status: res.statusCode, body: parsed, headers: res.headers };
    },
    async token(tenant, scopes) {
      return (await core.tokens.create(tenant, scopes)).token;
    },
    async close() {
      await app.close();
      await core.close();
      if (opts.dir === undefined) rmSync(dir, { recursive: true, force: true });
    },
  };
}
