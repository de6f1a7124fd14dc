/**
 * Moving a checkpoint's files between VM hosts over the hop (docs/scaling.md, "Moving
 * checkpoints"). An API node asks the host that will fork it to take it (`move-here`); that host
 * pulls the manifest and each file straight from the host that holds them, checks them, records
 * the checkpoint as its own, and has the old host drop its copy. The API node never carries the
 * files; every call is a signed hop under the caller's principal, so a tenant moves only what it
 * owns. The taking host calls the holder under a grant the API node made for this one checkpoint
 * (fleet-keys.ts): it can read and drop that checkpoint's files there, and nothing else.
 */
import { Type } from '@sinclair/typebox';
import type { FastifyPluginAsyncTypebox } from '@fastify/type-provider-typebox';
import type { Core } from '../core/core.js';
import { VesselError } from '../core/errors.js';
import type { CheckpointDescription, RemoteCheckpoint } from '../core/ports.js';
import type { Principal } from '../core/types.js';
import { callHop, readBounded, type HopClient, type HopTarget, type OwnHopCall } from './hop-proxy.js';
import { grantsHeader, type FleetKeys } from './fleet-keys.js';
import { hostClient, type HostHop } from './host-hops.js';

/** A host that sends nothing for this long while a file is on its way is taken to be gone. */
export const MOVE_IDLE_MS = 60_000;
/**
 * The API node waits this long for a host to take a checkpoint: nothing flows on that call until
 * every file has crossed (a busy 16 GiB guest's RAM at tens of MB/s is minutes).
 */
export const MOVE_HERE_MS = 15 * 60_000;
/** A manifest names its layers and digests: a few KiB, even for a chain of thousands. */
const MAX_DESCRIPTION_BYTES = 1024 * 1024;

const Params = Type.Object({ checkpoint_id: Type.String({ format: 'uuid' }) });
const FileParams = Type.Object({ checkpoint_id: Type.String({ format: 'uuid' }), file: Type.String({ pattern: '^(state|ram|[0-9a-f-]{36})$' }) });

const path = (checkpointId: string, rest: string): string => `/internal/checkpoints/${checkpointId}/${rest}`;

/** The calls one request makes of its own: each needs a request id of its own, since a signature is good once. */
export function ownCalls(principal: Principal, requestId: string): (method: OwnHopCall['method'], path: string) => OwnHopCall {
  let n = 0;
  return (method, p) => ({ principal, method, path: p, requestId: `${requestId.slice(0, 48)}.m${++n}` });
}

/** Asks `target` to take the checkpoint's files from `holder`, the host that has them: resolves once it holds them. */
export async function moveCheckpoint(client: HopClient & { keys: FleetKeys }, target: HopTarget, holder: string, principal: Principal, requestId: string, checkpointId: string): Promise<void> {
  // The taker may read the files there, and have the holder drop them once they are its own.
  const grant = client.keys.grant({ user: target.name, target: holder, methods: ['GET', 'DELETE'], prefix: path(checkpointId, ''), tenant: principal.tenantId, expires: Date.now() + MOVE_HERE_MS + MOVE_IDLE_MS });
  const call = { ...ownCalls(principal, requestId)('POST', path(checkpointId, 'move-here')), headers: grantsHeader([grant]) };
  const answer = await callHop(client, target, call, MOVE_HERE_MS);
  answer.resume();
}

async function readDescription(answer: AsyncIterable<Buffer>): Promise<CheckpointDescription | null> {
  const parsed = JSON.parse((await readBounded(answer, MAX_DESCRIPTION_BYTES)).toString('utf8')) as { manifest?: unknown; image?: unknown; files?: unknown } | null;
  const files = Array.isArray(parsed?.files) && parsed.files.every((f) => typeof f === 'string') ? (parsed.files as string[]) : null;
  return typeof parsed?.image === 'string' && files !== null ? { manifest: parsed.manifest, image: parsed.image, files } : null;
}

/** A live VM host to call for a move; `role` says what it is to the move, for the refusal. */
export async function reachHost(core: Core, name: string, role: string): Promise<HopTarget> {
  const node = await core.nodes.find(name);
  if (node?.alive !== true) throw new VesselError('unavailable', `VM host '${name}', ${role}, holds no lease`, { retryAfterSecs: 5 });
  return node;
}

/** The files another host offers under `base` (`${base}/description`, `${base}/files/:file`), as an import reads them. */
export async function remoteSource(client: HopClient, source: HopTarget, call: ReturnType<typeof ownCalls>, base: string): Promise<RemoteCheckpoint> {
  const answer = await callHop(client, source, call('GET', `${base}/description`), MOVE_IDLE_MS);
  const description = await readDescription(answer).catch(() => null);
  if (description === null) throw new VesselError('unavailable', `VM host '${source.name}' did not describe the files as a VM host does`);
  return { description, open: (file) => callHop(client, source, call('GET', `${base}/files/${file}`), MOVE_IDLE_MS) };
}

/** The routes a VM host serves for moves: offering its files, and taking another host's. */
export const checkpointMoveRoutes: FastifyPluginAsyncTypebox<{ core: Core } & HostHop> = async (app, { core, ...hop }) => {
  const config = { scope: 'runtimes:write' as const };
  const hidden = { hide: true };

  app.get('/internal/checkpoints/:checkpoint_id/description', { config, schema: { ...hidden, params: Params } }, async (req) =>
    core.checkpoints.describeForMove(req.principal.tenantId, req.params.checkpoint_id),
  );

  app.get('/internal/checkpoints/:checkpoint_id/files/:file', { config, schema: { ...hidden, params: FileParams } }, async (req, reply) => {
    const frames = await core.checkpoints.readForMove(req.principal.tenantId, req.params.checkpoint_id, req.params.file);
    return reply.type('application/octet-stream').send(frames);
  });

  app.post('/internal/checkpoints/:checkpoint_id/move-here', { config, schema: { ...hidden, params: Params } }, async (req) => {
    const call = ownCalls(req.principal, req.id);
    const client = hostClient(hop, req.headers);
    const reach = (name: string) => reachHost(core, name, "which holds the checkpoint's files");
    const connect = async (name: string, id: string): Promise<RemoteCheckpoint> => remoteSource(client, await reach(name), call, `/internal/checkpoints/${id}`);
    const { checkpoint, from } = await core.checkpoints.moveHere(req.principal.tenantId, req.params.checkpoint_id, connect);
    if (from !== null) {
      // Its copy there is of no use now; if it cannot be told, it drops it at its next start.
      await reach(from)
        .then((source) => callHop(client, source, call('DELETE', path(checkpoint.id, 'files')), MOVE_IDLE_MS))
        .then((answer) => answer.resume())
        .catch((err: unknown) => req.log.warn({ checkpointId: checkpoint.id, from, err: (err as Error).message }, 'the old host keeps its copy of a moved checkpoint until it restarts'));
    }
    return { data: { node: checkpoint.node, from } };
  });

  app.delete('/internal/checkpoints/:checkpoint_id/files', { config, schema: { ...hidden, params: Params } }, async (req) => {
    await core.checkpoints.dropMovedFiles(req.principal.tenantId, req.params.checkpoint_id);
    return { data: {} };
  });
};
