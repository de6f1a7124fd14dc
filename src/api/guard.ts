/**
 * Who may call a route: authentication, the per-token and per-address rate limits, and the
 * route's scope. A route declares the scope it needs (`config.scope`); a route without one is
 * public. Each guarded route gets its onRequest hook when it is declared, so nothing is looked up
 * per request (Fastify builds request.routeOptions afresh on every access).
 */
import type { FastifyContextConfig, FastifyInstance, onRequestHookHandler } from 'fastify';
import { VesselError } from '../core/errors.js';
import { hasScope, type TokenService } from '../core/tokens.js';
import type { Principal, Scope } from '../core/types.js';
import { clientKey } from '../platform/client-key.js';
import { sendError } from './errors.js';
import { RateLimiter, type RateLimitConfig } from './rate-limit.js';
import { TokenLookups } from './token-lookups.js';
import { bearerFromProtocols } from './websocket-auth.js';

declare module 'fastify' {
  interface FastifyRequest {
    /** Who called: set by the guard of a route with a scope, before any handler runs. */
    principal: Principal;
  }
  interface FastifyContextConfig {
    /** The scope a token needs for this route; routes without one are public. */
    scope?: Scope;
    /**
     * A VM host of a fleet admits API nodes' hops alone, except on a route marked so, which
     * takes a bearer token as any service does: its /metrics, scraped by its own Prometheus.
     */
    bearerOnVmHost?: true;
  }
}

/** The onRequest hook that admits a caller to a route needing `scope`, or answers it. `websocket`: the route upgrades. */
export type Guard = (scope: Scope, websocket: boolean) => onRequestHookHandler;

export const lacksScope = (scope: Scope): VesselError => new VesselError('permission_denied', `this token lacks the '${scope}' scope`);

const tooManyFailures = (retryAfterSecs: number): VesselError =>
  new VesselError('rate_limited', 'too many requests without a valid bearer token from this address', { retryAfterSecs });
/** One answer for every token refused, whatever the reason: it tells a guesser nothing. */
const NOT_ACCEPTED = 'the bearer token was not accepted';

export interface BearerLimits {
  /** Per bearer token. */
  rateLimit: RateLimitConfig;
  /** Per client address, for requests without a valid token (missing, malformed or rejected). */
  unauthenticatedRateLimit: RateLimitConfig;
}

/**
 * The guard of bearer tokens. A callback hook, so that a token seen in the last seconds is
 * admitted without a promise in between; only a token not in the cache waits for the store.
 *
 * A valid token is never refused for its client's address: behind a proxy, a NAT or a load
 * balancer many clients share one, and a stranger's failures there must not lock them out.
 * Only failures (a missing or malformed header, a token that cannot be ours, one the store
 * refused) draw on their address's bucket, and over it they are answered 429 instead of 401.
 * The store is kept from that load by TokenLookups instead (shape, recent failures, shared reads).
 */
export function bearerGuard(tokens: TokenService, limits: BearerLimits): Guard {
  const limiter = new RateLimiter(limits.rateLimit);
  const unauthenticatedLimiter = new RateLimiter(limits.unauthenticatedRateLimit);
  const lookups = new TokenLookups(tokens);
  return (scope, websocketRoute) => (request, reply, done) => {
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
      if (!hasScope(principal, scope)) return void sendError(reply, lacksScope(scope));
      request.principal = principal;
      done();
    };
    const cached = tokens.cachedPrincipal(token);
    if (cached !== undefined) return admit(cached);
    const lookup = lookups.principal(token);
    if (lookup === null) return refuse(NOT_ACCEPTED);
    lookup.then((principal) => (principal === null ? refuse(NOT_ACCEPTED) : admit(principal)), done);
  };
}

/**
 * Puts a guard first on every route that declares a scope, as it is declared: the bearer guard,
 * or on a VM host of a fleet the hop's (`vmHost`, src/cluster), but where the route says
 * `bearerOnVmHost`.
 */
export function guardRoutes(app: FastifyInstance, guards: { bearer: Guard; vmHost?: Guard | undefined }): void {
  app.decorateRequest('principal', null as unknown as Principal);
  const guardOf = (config: FastifyContextConfig): Guard => (guards.vmHost !== undefined && config.bearerOnVmHost !== true ? guards.vmHost : guards.bearer);
  app.addHook('onRoute', (route) => {
    const config = route.config ?? {};
    if (config.scope === undefined) return;
    route.onRequest = [guardOf(config)(config.scope, 'wsHandler' in route), ...[route.onRequest ?? []].flat()];
  });
}
