/**
 * Moving a runtime between VM hosts over the hop (docs/scaling.md, "Moving runtimes";
 * core/runtime-moves.ts). The host that runs it is asked to move it (`move-to`); it captures the
 * runtime and asks the other host to take it (`take`), which pulls the capture's files straight
 * from it (`move/:capture/description`, `move/:capture/files/:file`), restores it, and commits. Every call is a
 * signed hop under the caller's principal, so only the runtime's own tenant (or an operator
 * holding the cluster secret) moves it. The hosts call each other under two grants the caller
 * makes for this one runtime (fleet-keys.ts): the moving host may ask the other to take it, and
 * the other may read its capture; neither may do anything else on the other.
 */
import { Type } from '@sinclair/typebox';
import type { FastifyPluginAsyncTypebox } from '@fastify/type-provider-typebox';
import type { Core } from '../core/core.js';
import { failedPrecondition } from '../core/errors.js';
import type { RuntimeMoves } from '../core/runtime-moves.js';
import type { Principal } from '../core/types.js';
import { MOVE_HERE_MS, MOVE_IDLE_MS, ownCalls, reachHost, remoteSource } from './checkpoint-moves.js';
import { callHop, type HopClient, type HopTarget } from './hop-proxy.js';
import { grantsHeader, type FleetKeys } from './fleet-keys.js';
import { hostClient, type HostHop } from './host-hops.js';

const NodeName = Type.String({ minLength: 1, maxLength: 63, pattern: '^[A-Za-z0-9][A-Za-z0-9._-]*$' });
const Params = Type.Object({ runtime_id: Type.String({ format: 'uuid' }) });
const CaptureParams = Type.Object({ runtime_id: Type.String({ format: 'uuid' }), capture_id: Type.String({ format: 'uuid' }) });
const FileParams = Type.Object({ runtime_id: Type.String({ format: 'uuid' }), capture_id: Type.String({ format: 'uuid' }), file: Type.String({ pattern: '^(state|ram|[0-9a-f-]{36})$' }) });
const MoveTo = Type.Object({ node: NodeName });
const Take = Type.Object({
  from: NodeName,
  capture: Type.String({ format: 'uuid' }),
  stamp: Type.String({ minLength: 1, maxLength: 64 }),
});

const base = (runtimeId: string): string => `/internal/runtimes/${runtimeId}`;

/**
 * Asks `source`, the host that runs the runtime, to move it to VM host `to`: resolves once the
 * runtime runs there (or is paused there, as it was).
 */
export async function moveRuntime(client: HopClient & { keys: FleetKeys }, source: HopTarget, principal: Principal, requestId: string, runtimeId: string, to: string): Promise<void> {
  const query = new URLSearchParams({ node: to });
  const expires = Date.now() + MOVE_HERE_MS + 2 * MOVE_IDLE_MS;
  const tenant = principal.tenantId;
  const grants = [
    client.keys.grant({ user: source.name, target: to, methods: ['POST'], prefix: `${base(runtimeId)}/take?`, tenant, expires }),
    // Sealed for the taking host: the moving host hands it on with its call.
    client.keys.grant({ user: to, target: source.name, methods: ['GET'], prefix: `${base(runtimeId)}/move/`, tenant, expires }),
  ];
  // The moving host answers once the other host has taken it: the whole copy, RAM included.
  const call = { ...ownCalls(principal, requestId)('POST', `${base(runtimeId)}/move-to?${query}`), headers: grantsHeader(grants) };
  const answer = await callHop(client, source, call, MOVE_HERE_MS + 60_000);
  answer.resume();
}

/** The routes a VM host serves for runtime moves: moving its own away, offering their captures, taking another host's. */
export const runtimeMoveRoutes: FastifyPluginAsyncTypebox<{ core: Core } & HostHop> = async (app, { core, ...hop }) => {
  const config = { scope: 'runtimes:write' as const };
  const hidden = { hide: true };
  const moves = (): RuntimeMoves => {
    if (core.runtimeMoves === null) throw failedPrecondition('a single host moves no runtimes');
    return core.runtimeMoves;
  };

  app.post('/internal/runtimes/:runtime_id/move-to', { config, schema: { ...hidden, params: Params, querystring: MoveTo } }, async (req) => {
    const call = ownCalls(req.principal, req.id);
    const target = await reachHost(core, req.query.node, 'which was to take the runtime');
    const moved = await moves().moveOut(req.principal.tenantId, req.params.runtime_id, target.name, async (offer) => {
      const query = new URLSearchParams({ from: offer.from, capture: offer.captureId, stamp: offer.stamp });
      // Nothing flows on this call until the other host has the runtime running: every file first.
      (await callHop(hostClient(hop, req.headers), target, call('POST', `${base(offer.runtimeId)}/take?${query}`), MOVE_HERE_MS)).resume();
    });
    return { data: { node: moved.node } };
  });

  app.get('/internal/runtimes/:runtime_id/move/:capture_id/description', { config, schema: { ...hidden, params: CaptureParams } }, async (req) =>
    moves().describeCapture(req.principal.tenantId, req.params.runtime_id, req.params.capture_id),
  );

  app.get('/internal/runtimes/:runtime_id/move/:capture_id/files/:file', { config, schema: { ...hidden, params: FileParams } }, async (req, reply) => {
    const frames = await moves().readCapture(req.principal.tenantId, req.params.runtime_id, req.params.capture_id, req.params.file);
    return reply.type('application/octet-stream').send(frames);
  });

  app.post('/internal/runtimes/:runtime_id/take', { config, schema: { ...hidden, params: Params, querystring: Take } }, async (req, reply) => {
    // The moving host waits on this answer; once it has gone, it settles the move itself, and
    // a commit here must not come after it.
    let callerGone = false;
    reply.raw.once('close', () => void (callerGone = true));
    const { from, capture, stamp } = req.query;
    const source = await remoteSource(hostClient(hop, req.headers), await reachHost(core, from, 'which runs the runtime'), ownCalls(req.principal, req.id), `${base(req.params.runtime_id)}/move/${capture}`);
    const offer = { runtimeId: req.params.runtime_id, from, captureId: capture, stamp };
    const taken = await moves().takeHere(req.principal.tenantId, req.params.runtime_id, offer, source, () => !callerGone && !req.raw.socket.destroyed);
    return { data: { node: taken.node } };
  });
};
