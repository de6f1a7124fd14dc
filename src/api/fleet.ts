/**
 * What a fleet role changes in the API (docs/scaling.md). The API declares where a role plugs
 * in; src/cluster supplies the role (`vmHostRole` in cluster/vm-host-api.ts, `Forwarder.role()`
 * in cluster/forwarder.ts). The fleet builds on the API: the API imports nothing
 * of it.
 */
import type { FastifyInstance, FastifyPluginAsync, onRequestHookHandler, preParsingHookHandler } from 'fastify';
import type { Guard } from './guard.js';

/**
 * Which VM host serves a route on an API node: the one running the path's runtime (`runtime`),
 * the one placement picks for a new runtime (`create`), the one holding a checkpoint's files
 * (`checkpoint`), or the one running a rule's runtime (`rule`).
 */
export type VmHostOf = 'runtime' | 'create' | 'checkpoint' | 'rule';

declare module 'fastify' {
  interface FastifyContextConfig {
    /**
     * The route needs a VM, its files or its network: on an API node it is sent on to the VM host
     * this names, once the guard has admitted it. A route without it is answered from the store.
     */
    forward?: VmHostOf;
  }
}

export interface FleetRole {
  /** A VM host's guard, in place of bearer tokens (but on routes marked `bearerOnVmHost`). */
  guard?: Guard;
  /** An API node's hook that sends a route declaring `config.forward` on to its VM host. */
  forward?(to: VmHostOf, websocket: boolean): onRequestHookHandler;
  /** Runs on every request before its body is parsed (a VM host reads a hop's body only through the hop's check). */
  preParsing?: preParsingHookHandler;
  /** The role's own routes (a VM host's moves), guarded like any route. */
  routes?: FastifyPluginAsync;
}

/**
 * Installs the role's hooks: after guardRoutes, so that a forwarded route is sent on only once
 * its caller has been admitted here.
 */
export function installFleetRole(app: FastifyInstance, role: FleetRole): void {
  const forward = role.forward?.bind(role);
  if (forward !== undefined) {
    app.addHook('onRoute', (route) => {
      const to = route.config?.forward;
      if (to !== undefined) route.onRequest = [...[route.onRequest ?? []].flat(), forward(to, 'wsHandler' in route)];
    });
  }
  if (role.preParsing !== undefined) app.addHook('preParsing', role.preParsing);
}
