/**
 * E2B's control plane (its REST API, `spec/openapi.yml` in e2b-dev/E2B) over Vessel's runtimes:
 * sandboxes created, listed, read, killed, paused, resumed, connected to, given a new timeout or
 * kept alive, and their metrics and logs. Served under
 * /e2b on the API port; the SDK reaches it with E2B_API_URL=http://HOST:PORT/e2b. Left out of
 * Vessel's OpenAPI document: it is E2B's API, documented by E2B and by docs/e2b.md.
 */
import { Type } from '@sinclair/typebox';
import type { FastifyRequest } from 'fastify';
import { DEFAULT_CONSOLE_LOG_BYTES } from '../core/console-log.js';
import { VesselError } from '../core/errors.js';
import type { RoutePlugin } from '../api/routes/common.js';
import { acceptTokenHeader, answerE2bErrors, sandboxNotFound } from './answers.js';
import { LOG_LEVELS, MAX_LOG_ENTRIES, consoleLines, logEntriesOf, type LogQuery } from './logs.js';
import { metricsOf } from './metrics.js';
import { pauseSandbox, resumeSandbox, wakeSandbox } from './pause.js';
import {
  DEFAULT_TEMPLATE,
  MAX_TIMEOUT_SECS,
  REFRESH_MIN_SECS,
  RESUME_TIMEOUT_SECS,
  createInputOf,
  filterOf,
  lifecycleOf,
  listedSandboxOf,
  sandboxDetailOf,
  sandboxOf,
  type SandboxState,
} from './sandboxes.js';

const Metadata = Type.Record(Type.String(), Type.String());
const Timeout = Type.Integer({ minimum: 1, maximum: MAX_TIMEOUT_SECS });

const NewSandbox = Type.Object({
  templateID: Type.String({ default: DEFAULT_TEMPLATE, maxLength: 256 }),
  timeout: Type.Optional(Timeout),
  metadata: Type.Optional(Metadata),
  envVars: Type.Optional(Metadata),
  autoPause: Type.Optional(Type.Boolean()),
  // Every sandbox is secured (envd checks the caller's token), so `secure` changes nothing.
  secure: Type.Optional(Type.Boolean()),
  autoPauseMemory: Type.Optional(Type.Boolean()),
  // Refused unless they ask for what a runtime has anyway (sandboxes.ts).
  allow_internet_access: Type.Optional(Type.Boolean()),
  network: Type.Optional(Type.Unknown()),
  mcp: Type.Optional(Type.Unknown()),
});

const SandboxParams = Type.Object({ runtime_id: Type.String({ maxLength: 256 }) });
const ListQuery = Type.Object({
  metadata: Type.Optional(Type.String({ maxLength: 8192 })),
  state: Type.Optional(Type.String({ maxLength: 64 })),
  limit: Type.Optional(Type.Integer({ minimum: 1, maximum: 100, default: 100 })),
  nextToken: Type.Optional(Type.String({ maxLength: 1024 })),
});
const TimeoutBody = Type.Object({ timeout: Timeout });
const ConnectBody = Type.Object({ timeout: Type.Optional(Timeout), memory: Type.Optional(Type.Boolean()) });
// The bodies of pause, resume and refreshes are optional in E2B's spec: see `noBodyIsEmpty`.
const PauseBody = Type.Object({ memory: Type.Optional(Type.Boolean()) });
const ResumeBody = Type.Object({ timeout: Type.Optional(Timeout), autoPause: Type.Optional(Type.Boolean()), memory: Type.Optional(Type.Boolean()) });
const RefreshBody = Type.Object({ duration: Type.Optional(Type.Integer({ minimum: 0, maximum: MAX_TIMEOUT_SECS })) });
const EpochSecs = Type.Integer({ minimum: 0, maximum: 2 ** 40 });
const MetricsQuery = Type.Object({ start: Type.Optional(EpochSecs), end: Type.Optional(EpochSecs) });
const MAX_BATCH_IDS = 100;
const BatchMetricsQuery = Type.Object({ sandbox_ids: Type.String({ minLength: 1, maxLength: MAX_BATCH_IDS * 64 }) });
const LogLimit = Type.Integer({ minimum: 0, maximum: MAX_LOG_ENTRIES });
const EpochMs = Type.Integer({ minimum: 0, maximum: 2 ** 50 });
const LogsQuery = Type.Object({ start: Type.Optional(EpochMs), limit: Type.Optional(LogLimit) });
const LogsV2Query = Type.Object({
  cursor: Type.Optional(EpochMs),
  direction: Type.Optional(Type.Union([Type.Literal('forward'), Type.Literal('backward')])),
  level: Type.Optional(Type.Union(LOG_LEVELS.map((l) => Type.Literal(l)))),
  limit: Type.Optional(LogLimit),
  search: Type.Optional(Type.String({ maxLength: 256 })),
});

/** A request with no body takes the defaults, as an empty object does: validation then sees `{}`. */
const noBodyIsEmpty = async (req: FastifyRequest) => {
  req.body ??= {};
};

const nullIfNotFound = (err: unknown): null => {
  if (err instanceof VesselError && err.code === 'not_found') return null;
  throw err;
};

/** The caller's own token, which E2B's SDK then sends to envd as the sandbox's access token. */
const callerToken = (req: FastifyRequest): string => (req.headers.authorization ?? '').replace(/^Bearer /i, '');

export const e2bControlPlane: RoutePlugin = async (app, { core }) => {
  acceptTokenHeader(app, 'x-api-key');
  answerE2bErrors(app);
  const runtimes = core.runtimes;

  /** The runtime of an E2B sandbox id, or E2B's 404. */
  const runtimeOf = async (tenantId: string, id: string) => {
    try {
      return await runtimes.get(tenantId, id);
    } catch (err) {
      throw err instanceof VesselError && err.code === 'not_found' ? sandboxNotFound(id) : err;
    }
  };

  for (const path of ['/sandboxes', '/v2/sandboxes']) {
    app.post(path, { config: { scope: 'runtimes:write' }, schema: { hide: true, body: NewSandbox } }, async (req, reply) => {
      const rt = await runtimes.create(req.principal.tenantId, createInputOf(req.body));
      return reply.code(201).send(sandboxOf(rt, callerToken(req)));
    });
  }

  /** A page of the caller's sandboxes in `states`; E2B pages with `nextToken` and the x-next-token header. */
  const list = async (tenantId: string, query: typeof ListQuery.static, defaultStates: readonly SandboxState[]) => {
    const { filter } = filterOf(query.metadata, query.state, defaultStates);
    const page = await runtimes.list(tenantId, { limit: query.limit ?? 100, pageToken: query.nextToken }, filter);
    return { items: page.items.flatMap((rt) => listedSandboxOf(rt) ?? []), next: page.nextPageToken };
  };

  app.get('/sandboxes', { config: { scope: 'runtimes:read' }, schema: { hide: true, querystring: ListQuery } }, async (req) => {
    // v1 lists running sandboxes only, on one page.
    return (await list(req.principal.tenantId, req.query, ['running'])).items;
  });

  app.get('/v2/sandboxes', { config: { scope: 'runtimes:read' }, schema: { hide: true, querystring: ListQuery } }, async (req, reply) => {
    const { items, next } = await list(req.principal.tenantId, req.query, ['running', 'paused']);
    if (next !== undefined) void reply.header('x-next-token', next);
    return items;
  });

  app.get('/sandboxes/:runtime_id', { config: { scope: 'runtimes:read' }, schema: { hide: true, params: SandboxParams } }, async (req) => {
    return sandboxDetailOf(await runtimeOf(req.principal.tenantId, req.params.runtime_id));
  });

  app.delete('/sandboxes/:runtime_id', { config: { scope: 'runtimes:write' }, schema: { hide: true, params: SandboxParams } }, async (req, reply) => {
    const rt = await runtimeOf(req.principal.tenantId, req.params.runtime_id);
    await runtimes.delete(req.principal.tenantId, rt.id);
    return reply.code(204).send();
  });

  app.post('/sandboxes/:runtime_id/timeout', { config: { scope: 'runtimes:write' }, schema: { hide: true, params: SandboxParams, body: TimeoutBody } }, async (req, reply) => {
    const rt = await runtimeOf(req.principal.tenantId, req.params.runtime_id);
    await runtimes.patch(req.principal.tenantId, rt.id, { lifecycle: lifecycleOf(req.body.timeout, rt.lifecycle.onIdle === 'suspend') });
    return reply.code(204).send();
  });

  app.post('/v2/sandboxes/:runtime_id/connect', { config: { scope: 'runtimes:write' }, schema: { hide: true, params: SandboxParams, body: ConnectBody } }, async (req, reply) => {
    const tenantId = req.principal.tenantId;
    let rt = await runtimeOf(tenantId, req.params.runtime_id);
    const resumed = rt.status !== 'running';
    rt = await wakeSandbox(runtimes, rt, req.body.memory ?? true);
    if (req.body.timeout !== undefined) rt = await runtimes.patch(tenantId, rt.id, { lifecycle: lifecycleOf(req.body.timeout, rt.lifecycle.onIdle === 'suspend') });
    return reply.code(resumed ? 201 : 200).send(sandboxOf(rt, callerToken(req)));
  });

  app.post('/sandboxes/:runtime_id/pause', { preValidation: noBodyIsEmpty, config: { scope: 'runtimes:write' }, schema: { hide: true, params: SandboxParams, body: PauseBody } }, async (req, reply) => {
    const rt = await runtimeOf(req.principal.tenantId, req.params.runtime_id);
    await pauseSandbox(runtimes, rt, req.body.memory ?? true);
    return reply.code(204).send();
  });

  app.post('/sandboxes/:runtime_id/resume', { preValidation: noBodyIsEmpty, config: { scope: 'runtimes:write' }, schema: { hide: true, params: SandboxParams, body: ResumeBody } }, async (req, reply) => {
    const tenantId = req.principal.tenantId;
    const body = req.body;
    const found = await runtimeOf(tenantId, req.params.runtime_id);
    const rt = await resumeSandbox(runtimes, found, body.memory ?? true);
    // E2B's resume always sets the timeout, 15 s unless asked; autoPause unless given stays as it was.
    const lifecycle = lifecycleOf(body.timeout ?? RESUME_TIMEOUT_SECS, body.autoPause ?? rt.lifecycle.onIdle === 'suspend');
    return reply.code(201).send(sandboxOf(await runtimes.patch(tenantId, rt.id, { lifecycle }), callerToken(req)));
  });

  app.post('/sandboxes/:runtime_id/refreshes', { preValidation: noBodyIsEmpty, config: { scope: 'runtimes:write' }, schema: { hide: true, params: SandboxParams, body: RefreshBody } }, async (req, reply) => {
    const tenantId = req.principal.tenantId;
    const rt = await runtimeOf(tenantId, req.params.runtime_id);
    // E2B keeps alive only a running sandbox; any other is not found to it.
    if (rt.status !== 'running') throw sandboxNotFound(req.params.runtime_id);
    runtimes.touch(rt.id);
    // The idle clock starts again now; a longer keep-alive than the idle timeout raises the timeout, never lowers it.
    const duration = Math.max(req.body.duration ?? REFRESH_MIN_SECS, REFRESH_MIN_SECS);
    const idle = rt.lifecycle.idleTimeoutSecs;
    if (idle !== null && idle > 0 && duration > idle) {
      await runtimes.patch(tenantId, rt.id, { lifecycle: lifecycleOf(duration, rt.lifecycle.onIdle === 'suspend') });
    }
    return reply.code(204).send();
  });

  app.get('/sandboxes/:runtime_id/metrics', { config: { scope: 'runtimes:read' }, schema: { hide: true, params: SandboxParams, querystring: MetricsQuery } }, async (req) => {
    return metricsOf(await runtimeOf(req.principal.tenantId, req.params.runtime_id), new Date(), req.query);
  });

  app.get('/sandboxes/metrics', { config: { scope: 'runtimes:read' }, schema: { hide: true, querystring: BatchMetricsQuery } }, async (req) => {
    const ids = [...new Set(req.query.sandbox_ids.split(','))];
    if (ids.length > MAX_BATCH_IDS) throw new VesselError('invalid_argument', `at most ${MAX_BATCH_IDS} sandbox ids`);
    const now = new Date();
    const sandboxes: Record<string, ReturnType<typeof metricsOf>[number]> = {};
    for (const id of ids) {
      // Another tenant's sandbox, like one that does not exist, is left out: E2B answers running sandboxes only.
      const rt = await runtimes.get(req.principal.tenantId, id).catch(nullIfNotFound);
      const metric = rt === null ? undefined : metricsOf(rt, now)[0];
      if (rt !== null && metric !== undefined) sandboxes[rt.id] = metric;
    }
    return { sandboxes };
  });

  /** E2B's log entries of the runtime's console, as `query` asks; a runtime with no console yet has none. */
  const logsOf = async (tenantId: string, id: string, query: LogQuery) => {
    const rt = await runtimeOf(tenantId, id);
    const log = await core.consoleLogs.read(tenantId, rt.id, DEFAULT_CONSOLE_LOG_BYTES).catch(nullIfNotFound);
    return logEntriesOf(consoleLines(log), new Date(), query);
  };

  app.get('/sandboxes/:runtime_id/logs', { config: { scope: 'runtimes:read' }, schema: { hide: true, params: SandboxParams, querystring: LogsQuery } }, async (req) => {
    const entries = await logsOf(req.principal.tenantId, req.params.runtime_id, { cursor: req.query.start, limit: req.query.limit });
    return { logs: entries.map((e) => ({ timestamp: e.timestamp, line: e.message })), logEntries: entries };
  });

  app.get('/v2/sandboxes/:runtime_id/logs', { config: { scope: 'runtimes:read' }, schema: { hide: true, params: SandboxParams, querystring: LogsV2Query } }, async (req) => {
    return { logs: await logsOf(req.principal.tenantId, req.params.runtime_id, req.query) };
  });
};
