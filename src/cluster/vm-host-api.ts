/**
 * A VM host's part in the API (`--role node`): it serves API nodes only. The hop says who the
 * caller is (hop.ts), so a route that needs a scope takes no bearer token; a hop's body is read
 * only through the hop's check, a digest or frames bound into its MAC (hop-body.ts); and the
 * host serves the fleet's own routes for moving checkpoints and runtimes. This module is the
 * one place the API meets the hop's verification.
 */
import type { FastifyPluginAsync, FastifyRequest } from 'fastify';
import type { Core } from '../core/core.js';
import { VesselError } from '../core/errors.js';
import { hasScope } from '../core/tokens.js';
import { sendError } from '../api/errors.js';
import type { FleetRole } from '../api/fleet.js';
import { lacksScope } from '../api/guard.js';
import { checkpointMoveRoutes } from './checkpoint-moves.js';
import { SeenHops, verifyHop, type VerifiedHop } from './hop.js';
import type { HostHop } from './host-hops.js';
import { runtimeMoveRoutes } from './runtime-moves.js';

/** `hop.node`: this host's name in the fleet, and a hop meant for another host is refused; `hop.secret`: its own key (fleet-keys.ts). */
export function vmHostRole(core: Core, hop: HostHop): FleetRole {
  const { secret, node } = hop;
  const seen = new SeenHops();
  const bodies = new WeakMap<FastifyRequest, VerifiedHop['checkBody']>();
  const routes: FastifyPluginAsync = async (app) => {
    await app.register(checkpointMoveRoutes, { core, ...hop });
    await app.register(runtimeMoveRoutes, { core, ...hop });
  };
  return {
    guard: (scope) => (request, reply, done) => {
      const vouched = verifyHop(secret, request.headers, { method: request.method, url: request.url, requestId: request.id, node }, Date.now(), seen);
      if (typeof vouched === 'string') return void sendError(reply, new VesselError('unauthenticated', `this is a VM host: call an API node (${vouched})`));
      if (!hasScope(vouched.principal, scope)) return void sendError(reply, lacksScope(scope));
      request.principal = vouched.principal;
      // Its body is read only through the hop's check (preParsing, below).
      bodies.set(request, (payload) => vouched.checkBody(payload));
      done();
    },
    preParsing: (request, _reply, payload, done) => {
      const check = bodies.get(request);
      done(null, check === undefined ? payload : check(payload));
    },
    routes,
  };
}
