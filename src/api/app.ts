/**
 * The HTTP facade: parses, authenticates, authorizes, validates and calls the core. It holds no
 * domain rules of its own. This module only assembles it; each concern is a module of its own
 * (the guard, request ids, parsing, metrics, unrouted requests, shutdown, the routes), installed
 * in the order their hooks must run.
 */
import Fastify, { LogController, type FastifyBaseLogger, type FastifyInstance } from 'fastify';
import swagger from '@fastify/swagger';
import websocket from '@fastify/websocket';
import type { TypeBoxTypeProvider } from '@fastify/type-provider-typebox';
import type { Core } from '../core/core.js';
import type { IngressAddress } from '../core/ingress-urls.js';
import { errorHandler, frameworkErrors } from './errors.js';
import { installFleetRole, type FleetRole } from './fleet.js';
import { bearerGuard, guardRoutes, type BearerLimits } from './guard.js';
import { lingerAfterEarlyResponses } from './linger.js';
import { measureRoutes } from './metrics.js';
import { answerUnrouted } from './not-found.js';
import { openapiOptions } from './openapi.js';
import { requestIdGenerator, sendRequestIds } from './request-ids.js';
import { logRequests } from './request-log.js';
import { parseRequests } from './request-parsing.js';
import { closeGracefully } from './shutdown.js';
import { selectProtocol } from './websocket-auth.js';
import { consoleRoutes, type ConsoleOptions } from './console.js';
import { checkpointRoutes } from './routes/checkpoints.js';
import { consoleLogRoutes } from './routes/console-log.js';
import { fileRoutes } from './routes/files.js';
import { healthRoutes } from './routes/health.js';
import { processRoutes, stdinRoutes } from './routes/processes.js';
import { runtimeRoutes } from './routes/runtimes.js';
import { auditRoutes, ruleRoutes, secretRoutes } from './routes/secrets.js';
import { TERMINAL_MAX_MESSAGE, terminalRoutes } from './routes/terminal.js';
import { templateRoutes } from './routes/templates.js';
import { tokenRoutes } from './routes/tokens.js';
import { e2bRoutes } from '../e2b/plugin.js';

export interface ApiOptions extends BearerLimits {
  core: Core;
  /** The service's pino logger; false for none (tests). */
  logger: FastifyBaseLogger | false;
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
   * The node's part in a fleet, from src/cluster: a VM host (`--role node`) takes calls from API
   * nodes over the signed hop; an API node (`--role api`) sends what needs a VM on to its host.
   * Absent on a single host.
   */
  fleet?: FleetRole | undefined;
}

export const API_VERSION = '0.0.4';
export const JSON_BODY_LIMIT = 1024 * 1024;

export async function buildApi(options: ApiOptions): Promise<FastifyInstance> {
  const app = Fastify({
    ...(options.logger === false ? { logger: false } : { loggerInstance: options.logger }),
    // Fastify's own request logging is replaced by request-log.ts.
    logController: new LogController({ disableRequestLogging: true }),
    bodyLimit: JSON_BODY_LIMIT,
    trustProxy: options.trustedProxies !== undefined && options.trustedProxies.length > 0 ? [...options.trustedProxies] : false,
    // Display names run to 128 characters and share the path segment with IDs.
    routerOptions: { maxParamLength: 256 },
    genReqId: requestIdGenerator(),
    // Fastify's own 503 while closing is not the error envelope: shutdown.ts answers.
    return503OnClosing: false,
    frameworkErrors,
  }).withTypeProvider<TypeBoxTypeProvider>();

  parseRequests(app);
  app.setErrorHandler(errorHandler);
  // A refusal sent while its request's body is still coming is delivered before the close.
  lingerAfterEarlyResponses(app);
  await app.register(swagger, openapiOptions(API_VERSION));

  // Hooks on every request, in this order: the id on the answer, then the refusal while closing.
  const requestIds = sendRequestIds(app);
  closeGracefully(app);
  logRequests(app, options.logger);
  answerUnrouted(app);
  // Hooks on each route, in this order: its guard, its forwarding (an API node), its metrics.
  const fleet = options.fleet ?? {};
  guardRoutes(app, { bearer: bearerGuard(options.core.tokens, options), vmHost: fleet.guard });
  installFleetRole(app, fleet);
  measureRoutes(app, options.listenHost);

  const core = options.core;
  await app.register(healthRoutes);
  await app.register(runtimeRoutes, { core, ingress: options.ingress ?? null });
  await app.register(websocket, { options: { maxPayload: TERMINAL_MAX_MESSAGE, handleProtocols: selectProtocol } });
  requestIds.tellWebSocketServer();
  await app.register(processRoutes, { core });
  await app.register(terminalRoutes, { core });
  await app.register(stdinRoutes, { core, maxStdinBytes: options.maxFileBytes });
  await app.register(fileRoutes, { core, maxFileBytes: options.maxFileBytes });
  await app.register(secretRoutes, { core });
  await app.register(ruleRoutes, { core });
  await app.register(checkpointRoutes, { core });
  await app.register(templateRoutes, { core });
  await app.register(auditRoutes, { core });
  await app.register(tokenRoutes, { core });
  await app.register(consoleLogRoutes, { core });
  await app.register(consoleRoutes, options.console ?? {});
  await app.register(e2bRoutes, { core, maxFileBytes: options.maxFileBytes });
  if (fleet.routes !== undefined) await app.register(fleet.routes);
  return app;
}
