/**
 * The HTTP facade: parses, authenticates, authorizes, validates and calls the core. It holds no
 * domain rules of its own.
 */
import { randomBytes } from 'node:crypto';
import type { IncomingMessage } from 'node:http';
import Fastify, { LogController, type FastifyBaseLogger, type FastifyContextConfig, type FastifyInstance, type FastifyRequest, type onRequestHookHandler, type onResponseHookHandler } from 'fastify';
import swagger from '@fastify/swagger';
import websocket from '@fastify/websocket';
import { Type } from '@sinclair/typebox';
import type { TypeBoxTypeProvider } from '@fastify/type-provider-typebox';
import { Ajv, type Options as AjvOptions } from 'ajv';
import addFormats from 'ajv-formats';
import type { Core } from '../core/core.js';
import type { IngressAddress } from '../core/ingress-urls.js';
import { VesselError } from '../core/errors.js';
import { hasScope } from '../core/tokens.js';
import type { Principal, Scope } from '../core/types.js';
import { errorHandler, sendError } from './errors.js';
import { isLoopbackHost } from './loopback.js';
import { maskTokens } from './log-options.js';
import { Metrics } from './metrics.js';
import { clientKey } from '../platform/client-key.js';
import { RateLimiter, type RateLimitConfig } from './rate-limit.js';
import { TokenLookups } from './token-lookups.js';
import { lingerAfterEarlyResponses } from './linger.js';
import { openapiOptions } from './openapi.js';
import { DataOf, Health, SHARED_SCHEMAS } from './schemas.js';
import { checkpointRoutes } from './routes/checkpoints.js';
import { consoleLogRoutes } from './routes/console-log.js';
import { tokenRoutes } from './routes/tokens.js';
import { consoleRoutes, type ConsoleOptions } from './console.js';
import { fileRoutes } from './routes/files.js';
import { endEventStreams } from './event-stream.js';
import { processRoutes, stdinRoutes } from './routes/processes.js';
import { TERMINAL_MAX_MESSAGE, terminalRoutes } from './routes/terminal.js';
import { runtimeRoutes } from './routes/runtimes.js';
import { secretRoutes, ruleRoutes, auditRoutes } from './routes/secrets.js';
import { bearerFromProtocols, selectProtocol } from './websocket-auth.js';
import { SeenHops, verifyHop, type VerifiedHop } from '../cluster/hop.js';
import type { HostHop } from '../cluster/host-hops.js';
import { checkpointMoveRoutes } from '../cluster/checkpoint-moves.js';
import { runtimeMoveRoutes } from '../cluster/runtime-moves.js';
import { routeKind, type Forwarder } from '../cluster/forwarder.js';

declare module 'fastify' {
  interface FastifyRequest {
    principal: Principal;
  }
  interface FastifyContextConfig {
    /** The scope a token needs for this route; routes without one are public. */
    scope?: Scope;
  }
}

export interface ApiOptions {
  core: Core;
  /** The service's pino logger; false for none (tests). */
  logger: FastifyBaseLogger | false;
  /** Per bearer token. */
  rateLimit: RateLimitConfig;
  /** Per client address, for requests without a valid token (missing, malformed or rejected). */
  unauthenticatedRateLimit: RateLimitConfig;
  /**
   * Peers whose X-Forwarded-For is believed (addresses, CIDRs, or proxy-addr's `loopback`,
   * `linklocal`, `uniquelocal`): the client address, for its bucket, is then the nearest one
   * not in the list. Empty or absent: the connection's address, and the header is ignored.
   */
  trustedProxies?: readonly string[] | undefined;
  /** Largest file a PUT accepts. */
  maxFileBytes: number;
  /** The address the API listens on: beyond loopback, /metrics needs an admin token. */
  listenHost: string;
  /** The web console at /console/ (src/api/console.ts). */
  console?: ConsoleOptions | undefined;
  /** Where the service's ingress listener is reached, for the runtimes' ingress_urls; absent when it runs none. */
  ingress?: IngressAddress | undefined;
  /**
   * A VM host of a fleet (`--role node`): calls come from API nodes over the hop, signed with this
   * host's own key (src/cluster/hop.ts); a bearer token is accepted for /metrics alone.
   */
  hop?: HostHop | undefined;
  /** An API node of a fleet (`--role api`): what needs a VM is sent on to its host. */
  forwarder?: Forwarder | undefined;
}

export const API_VERSION = '0.0.4';
export const JSON_BODY_LIMIT = 1024 * 1024;

const tooManyFailures = (retryAfterSecs: number): VesselError =>
  new VesselError('rate_limited', 'too many requests without a valid bearer token from this address', { retryAfterSecs });
/** One answer for every token refused, whatever the reason: it tells a guesser nothing. */
const NOT_ACCEPTED = 'the bearer token was not accepted';
/** A restart takes seconds; a client that waits this long meets the next service, or a closed port. */
const shuttingDown = (): VesselError => new VesselError('unavailable', 'the service is shutting down', { retryAfterSecs: 1 });

function makeAjv(options: AjvOptions): Ajv {
  const ajv = new Ajv({ strict: false, useDefaults: true, allErrors: false, ...options });
  (addFormats as unknown as (a: Ajv) => void)(ajv);
  for (const schema of SHARED_SCHEMAS) ajv.addSchema(schema);
  return ajv;
}

export async function buildApi(options: ApiOptions): Promise<FastifyInstance> {
  // Request ids: random per process, then a sequence; unique across restarts without drawing a
  // UUID per request.
  const requestIdPrefix = `${randomBytes(4).toString('hex')}-`;
  let requestCount = 0;
  const app = Fastify({
    ...(options.logger === false ? { logger: false } : { loggerInstance: options.logger }),
    // Fastify's own request logging costs a tenth of the throughput even when its level is off;
    // the onResponse hook below writes one line per request instead, only at info or finer.
    logController: new LogController({ disableRequestLogging: true }),
    bodyLimit: JSON_BODY_LIMIT,
    trustProxy: options.trustedProxies !== undefined && options.trustedProxies.length > 0 ? [...options.trustedProxies] : false,
    // Display names run to 128 characters and share the path segment with IDs.
    routerOptions: { maxParamLength: 256 },
    genReqId: (req) => {
      const given = req.headers['x-request-id'];
      return typeof given === 'string' && /^[\w.-]{1,64}$/.test(given) ? given : `${requestIdPrefix}${(++requestCount).toString(36)}`;
    },
    // Fastify's own 503 while closing is not the error envelope: the onRequest hook below answers.
    return503OnClosing: false,
    // Router-level failures (malformed URL, over-long path parameter) never reach the error
    // handler nor the hooks; they get the envelope and the request id here. Every path parameter
    // is an identifier, so one too long to exist is simply not found.
    frameworkErrors: (err, req, reply) => {
      const tooLong = err.code === 'FST_ERR_MAX_PARAM_LENGTH';
      void reply.header('x-request-id', req.id);
      return sendError(reply, new VesselError(tooLong ? 'not_found' : 'invalid_argument', tooLong ? 'no object has an identifier that long' : 'malformed URL'));
    },
  }).withTypeProvider<TypeBoxTypeProvider>();

  // Bodies are typed exactly; query strings and paths are text and may be coerced.
  const bodyAjv = makeAjv({ coerceTypes: false, removeAdditional: false });
  // 'array': a query parameter given once is a list of one (`?label=a` as well as `?label=a&label=b`).
  const textAjv = makeAjv({ coerceTypes: 'array', removeAdditional: false });
  // A raw body (a tar archive) is a stream for the handler: its schema is there for OpenAPI only.
  const raw = () => true;
  app.setValidatorCompiler(({ schema, httpPart, contentType }) => {
    if (httpPart !== 'body') return textAjv.compile(schema);
    return contentType === undefined || contentType === 'application/json' ? bodyAjv.compile(schema) : raw;
  });
  app.setErrorHandler(errorHandler);
  // A refusal sent while its request's body is still coming is delivered before the close.
  lingerAfterEarlyResponses(app);

  // An empty body is fine for operations that take none, even when a client labels it JSON.
  const defaultJson = app.getDefaultJsonParser('error', 'error');
  app.removeAllContentTypeParsers();
  app.addContentTypeParser('application/json', { parseAs: 'string' }, (req, body, done) => {
    if (body === '' || body === undefined) return done(null, undefined);
    defaultJson(req, body as string, done);
  });

  for (const schema of SHARED_SCHEMAS) app.addSchema(schema);
  await app.register(swagger, openapiOptions(API_VERSION));

  const limiter = new RateLimiter(options.rateLimit);
  const unauthenticatedLimiter = new RateLimiter(options.unauthenticatedRateLimit);
  const tokens = options.core.tokens;
  const lookups = new TokenLookups(tokens);
  app.decorateRequest('principal', null as unknown as Principal);

  /**
   * Authentication, rate limiting and authorization for a route that needs `scope`. A callback
   * hook, so that a token seen in the last seconds is admitted without a promise in between;
   * only a token not in the cache waits for the store.
   *
   * A valid token is never refused for its client's address: behind a proxy, a NAT or a load
   * balancer many clients share one, and a stranger's failures there must not lock them out.
   * Only failures (a missing or malformed header, a token that cannot be ours, one the store
   * refused) draw on their address's bucket, and over it they are answered 429 instead of 401.
   * The store is kept from that load by TokenLookups instead (shape, recent failures, shared reads).
   */
  const guard = (scope: Scope, websocketRoute: boolean, bearerOnHost: boolean): onRequestHookHandler => (request, reply, done) => {
    const hop = options.hop;
    if (hop !== undefined && !bearerOnHost) {
      // A VM host serves API nodes only: the hop says who the caller is, and no token is taken.
      const vouched = verifyHop(hop.secret, request.headers, { method: request.method, url: request.url, requestId: request.id, node: hop.node }, Date.now(), seenHops);
      if (typeof vouched === 'string') return void sendError(reply, new VesselError('unauthenticated', `this is a VM host: call an API node (${vouched})`));
      if (!hasScope(vouched.principal, scope)) return void sendError(reply, new VesselError('permission_denied', `this token lacks the '${scope}' scope`));
      request.principal = vouched.principal;
      // Its body is read only through the hop's check (preParsing, below).
      hopBodies.set(request, vouched.checkBody);
      return done();
    }
    // The client's address is worked out only for failures: the hot path of a known token does
    // not pay for it. The message never tells why a token was refused (nor repeats it).
    const refuse = (message: string): void => {
      const wait = unauthenticatedLimiter.take(clientKey(request.ip));
      sendError(reply, wait > 0 ? tooManyFailures(wait) : new VesselError('unauthenticated', message));
    };
    const header = request.headers.authorization;
    // A browser's WebSocket carries its token in a subprotocol (websocket-auth.ts), and only a
    // route that upgrades takes it from there.
    const token = typeof header === 'string' ? /^Bearer ([\x21-\x7e]{1,512})$/i.exec(header)?.[1] : websocketRoute ? bearerFromProtocols(request.headers) : null;
    if (token === undefined || token === null) return refuse('missing or malformed bearer token');
    const admit = (principal: Principal): void => {
      const wait = limiter.take(principal.tokenId);
      if (wait > 0) return void sendError(reply, new VesselError('rate_limited', 'rate limit exceeded for this token', { retryAfterSecs: wait }));
      if (!hasScope(principal, scope)) return void sendError(reply, new VesselError('permission_denied', `this token lacks the '${scope}' scope`));
      request.principal = principal;
      done();
    };
    const cached = tokens.cachedPrincipal(token);
    if (cached !== undefined) return admit(cached);
    const lookup = lookups.principal(token);
    if (lookup === null) return refuse(NOT_ACCEPTED);
    lookup.then((principal) => (principal === null ? refuse(NOT_ACCEPTED) : admit(principal)), done);
  };

  const seenHops = new SeenHops();
  const hopBodies = new WeakMap<FastifyRequest, VerifiedHop['checkBody']>();
  // On a VM host, no parser or handler reads a hop's body but through its check: a digest or
  // frames bound into the hop's MAC (src/cluster/hop-body.ts).
  if (options.hop !== undefined) {
    app.addHook('preParsing', (request, _reply, payload, done) => {
      const check = hopBodies.get(request);
      done(null, check === undefined ? payload : check(payload));
    });
  }
  const metrics = new Metrics();
  const observe = (route: string): onResponseHookHandler => (request, reply, done) => {
    metrics.observe(route, request, reply);
    done();
  };

  // Routes get their guard and their metrics when they are declared: nothing is looked up per
  // request (Fastify builds request.routeOptions afresh on every access).
  const routePatterns: Array<{ method: string; re: RegExp }> = [];
  app.addHook('onRoute', (route) => {
    const re = new RegExp('^' + route.url.replace(/:[^/]+/g, '[^/]+') + '/?$');
    for (const m of [route.method].flat()) routePatterns.push({ method: m, re });
    const scope = route.config?.scope;
    if (scope !== undefined) route.onRequest = [guard(scope, 'wsHandler' in route, route.url === '/metrics'), ...[route.onRequest ?? []].flat()];
    const forwarded = options.forwarder === undefined ? null : routeKind(route.url, [route.method].flat()[0]!);
    if (forwarded !== null) route.onRequest = [...[route.onRequest ?? []].flat(), options.forwarder!.hook(forwarded, 'wsHandler' in route)];
    route.onResponse = [...[route.onResponse ?? []].flat(), observe(route.url)];
  });

  let closing = false;
  // The ws library writes an upgrade's 101 itself, past the reply's headers: it is told the id.
  const upgradeIds = new WeakMap<IncomingMessage, string>();
  app.addHook('onRequest', (request, reply, done) => {
    void reply.header('x-request-id', request.id);
    if (request.headers.upgrade !== undefined) upgradeIds.set(request.raw, request.id);
    // A request that came on a kept-alive connection after close() began.
    if (closing) return void sendError(reply, shuttingDown());
    done();
  });

  const logRequests = options.logger !== false && ['trace', 'debug', 'info'].includes(options.logger.level);
  app.addHook('onResponse', (request, reply, done) => {
    if (request.is404) metrics.observe('unmatched', request, reply);
    if (logRequests) {
      // The path only: query strings carry file paths and filters, and bodies are never logged.
      const path = maskTokens(request.url.split('?', 1)[0]!);
      request.log.info({ method: request.method, path, status: reply.statusCode, ms: Math.round(reply.elapsedTime * 10) / 10 }, 'request completed');
    }
    done();
  });

  app.setNotFoundHandler(async (request, reply) => {
    const path = request.url.split('?', 1)[0]!;
    const allowed = [...new Set(routePatterns.filter((r) => r.re.test(path)).map((r) => r.method))];
    if (allowed.length > 0) {
      void reply.header('allow', allowed.join(', '));
      return sendError(reply, new VesselError('invalid_argument', `method ${request.method} is not allowed on ${path}`, { httpStatus: 405 }));
    }
    return sendError(reply, new VesselError('not_found', `no route for ${request.method} ${path}`));
  });

  const health = { tags: ['health'], security: [] };
  app.get('/healthz', {
    // HEAD is its own route below, without a body.
    exposeHeadRoute: false,
    schema: { ...health, operationId: 'getHealth', summary: 'Liveness check', response: { 200: DataOf(Type.Ref(Health), 'the service is up') } },
  }, async () => ({ data: { status: 'ok' as const } }));
  app.head('/healthz', {
    config: {
      swagger: { exposeHeadRoute: true },
      // @fastify/swagger names a HEAD operation after its route's operationId plus `-head`.
      swaggerTransform: ({ schema, url }) => ({ schema: { ...schema, operationId: 'headHealth' }, url }),
    },
    schema: { ...health, summary: 'Liveness check, without a body', response: { 200: { description: 'the service is up', type: 'null' } } },
  }, async (_req, reply) => reply.send());
  app.get('/openapi.json', { schema: { hide: true } }, async () => app.swagger());
  // Open to a local Prometheus; from elsewhere, route names and counts tell what tenants do.
  const metricsConfig: FastifyContextConfig = isLoopbackHost(options.listenHost) ? {} : { scope: 'admin' };
  app.get('/metrics', { schema: { hide: true }, config: metricsConfig }, async (_req, reply) => reply.type(metrics.contentType).send(await metrics.render()));

  app.addHook('preClose', (done) => {
    closing = true;
    // An open event stream is never idle: Fastify would wait for it to end before closing.
    endEventStreams(app.server);
    done();
  });

  const core = options.core;
  await app.register(runtimeRoutes, { core, ingress: options.ingress ?? null });
  await app.register(websocket, { options: { maxPayload: TERMINAL_MAX_MESSAGE, handleProtocols: selectProtocol } });
  app.websocketServer.on('headers', (headers, raw) => {
    const id = upgradeIds.get(raw);
    if (id !== undefined) headers.push(`x-request-id: ${id}`);
  });
  await app.register(processRoutes, { core });
  await app.register(terminalRoutes, { core });
  await app.register(stdinRoutes, { core, maxStdinBytes: options.maxFileBytes });
  await app.register(fileRoutes, { core, maxFileBytes: options.maxFileBytes });
  await app.register(secretRoutes, { core });
  await app.register(ruleRoutes, { core });
  await app.register(checkpointRoutes, { core });
  await app.register(auditRoutes, { core });
  await app.register(tokenRoutes, { core });
  await app.register(consoleLogRoutes, { core });
  await app.register(consoleRoutes, options.console ?? {});
  if (options.hop !== undefined) {
    await app.register(checkpointMoveRoutes, { core, ...options.hop });
    await app.register(runtimeMoveRoutes, { core, ...options.hop });
  }
  return app;
}
