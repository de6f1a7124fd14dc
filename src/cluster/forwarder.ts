/**
 * What an API node (`--role api`) sends on to a VM host, and which host (docs/scaling.md,
 * "Routing"). It answers from the store itself whatever needs no VM: runtime and checkpoint
 * reads, secrets, tokens, audits, rule lists. What needs the VM, its files or its network goes to
 * the host that owns them: every call under /v1/runtimes/{id}/…, a runtime's PATCH and DELETE
 * (its policy lives in the host's gateway), a create (placed by placement.ts), a checkpoint's
 * DELETE (its files) and a rule's DELETE (the gateway of its runtime's host). Each such route
 * says so where it is declared (`config.forward`, src/api/fleet.ts); this sends it on.
 */
import type { FastifyReply, FastifyRequest, onRequestHookHandler } from 'fastify';
import { VesselError, failedPrecondition, notFound, unavailable } from '../core/errors.js';
import type { NodeDirectory } from '../core/node-directory.js';
import type { Store } from '../core/ports.js';
import { DEFAULT_MEMORY_MIB } from '../core/runtimes.js';
import type { NodeLoad, VmNode } from '../core/types.js';
import { sendError, toVesselError } from '../api/errors.js';
import type { FleetRole, VmHostOf } from '../api/fleet.js';
import { forwardRequest, forwardUpgrade, HopUnreachable, type HopCall, type HopClient, type HopTarget } from './hop-proxy.js';
import type { FleetKeys } from './fleet-keys.js';
import { moveCheckpoint } from './checkpoint-moves.js';
import { LastKnown } from './last-known.js';
import { addLoad, placeRuntime, type Demand } from './placement.js';

/** How long a caller is told to wait before it tries a host that is away again. */
const RETRY_AFTER_SECS = 5;

export class Forwarder {
  /** Creates this API node has sent on and not yet seen answered: the store does not count them yet. */
  readonly #placing = new Map<string, NodeLoad>();
  /** Each runtime's host as last read, for calls to it while the store is away. */
  readonly #routes = new LastKnown<{ displayName: string; node: string | null }>();
  #next = 0;

  constructor(
    private readonly store: Store,
    private readonly nodes: NodeDirectory,
    /** Every host's key (from the fleet secret) and this node's fleet certificate. */
    private readonly client: HopClient & { keys: FleetKeys },
    /** The largest create body it reads to place one (the API's JSON limit). */
    private readonly maxBodyBytes: number,
  ) {}

  /** This API node's part in the API: every route that declares `config.forward` is sent on by `hook`. */
  role(): FleetRole {
    return { forward: (to, websocket) => this.hook(to, websocket) };
  }

  /** The onRequest hook that sends one declared route on to its host (after authentication). */
  hook(kind: VmHostOf, websocket: boolean): onRequestHookHandler {
    return (request, reply, done) => {
      void this.#forward(kind, websocket, request, reply).catch((err: unknown) => {
        if (!reply.sent && !reply.raw.headersSent) sendError(reply, toVesselError(err instanceof HopUnreachable ? unavailable(err.message) : err));
        else reply.raw.destroy();
      });
      // Never `done`: the route's own handler runs on the host, not here.
      void done;
    };
  }

  async #forward(kind: VmHostOf, websocket: boolean, request: FastifyRequest, reply: FastifyReply): Promise<void> {
    const tenantId = request.principal.tenantId;
    const params = request.params as Record<string, string>;
    const call: HopCall = { principal: request.principal, requestId: request.id, clientIp: request.ip };
    let target: VmNode;
    let placed: { node: string; demand: Demand } | null = null;
    if (kind === 'create') {
      call.body = await readBody(request, this.maxBodyBytes);
      ({ target, placed } = await this.#placeCreate(call, call.body));
    } else if (kind === 'runtime') {
      target = await this.#ownerOfRuntime(tenantId, params.runtime_id!);
    } else if (kind === 'checkpoint') {
      const cp = await this.store.checkpoints.find(tenantId, params.checkpoint_id!, true);
      if (cp === undefined) throw notFound('checkpoint', params.checkpoint_id!);
      // As a single host says it, without naming the host that holds the template.
      if (cp.tenantId === null) throw failedPrecondition(`checkpoint '${cp.displayName}' is a system checkpoint and is managed by the service`);
      target = cp.node === null ? await this.#anyNode() : await this.#live(cp.node, `checkpoint '${cp.displayName}' has its files on VM host '${cp.node}'`);
    } else {
      const rule = await this.store.rules.find(tenantId, params.rule_id!);
      if (rule === undefined) throw notFound('secret injection rule', params.rule_id!);
      target = await this.#ownerOfRuntime(tenantId, rule.runtimeId);
    }
    const hop: HopTarget = { name: target.name, internalUrl: target.internalUrl };
    if (placed !== null) addLoad(this.#placing, placed.node, placed.demand, 1);
    let settled = false;
    const settle = () => {
      if (placed === null || settled) return;
      settled = true;
      addLoad(this.#placing, placed.node, placed.demand, -1);
    };
    try {
      // Only a WebSocket route upgrades, and only a request that came as one (@fastify/websocket's `ws`).
      if (websocket && (request as { ws?: boolean }).ws === true) {
        await forwardUpgrade(this.client, hop, request.raw, request.raw.socket, call);
        reply.hijack();
        return;
      }
      // Settled when the caller's response ends, however early: a create given up on frees its place.
      reply.raw.once('close', settle);
      const stream = await forwardRequest(this.client, hop, request.raw, reply.raw, call);
      reply.hijack();
      stream();
    } catch (err) {
      settle();
      throw err;
    }
  }

  async #ownerOfRuntime(tenantId: string, ref: string): Promise<VmNode> {
    const rt = await this.#routes.get(`${tenantId}\0${ref}`, async () => {
      const found = await this.store.runtimes.find(tenantId, ref);
      return found === undefined ? undefined : { displayName: found.displayName, node: found.node };
    });
    if (rt === undefined) throw notFound('runtime', ref);
    if (rt.node === null) throw unavailable(`runtime '${rt.displayName}' records no VM host: it was made by a single-host service`);
    return this.#live(rt.node, `runtime '${rt.displayName}' runs on VM host '${rt.node}'`);
  }

  /** The node, if its lease holds; otherwise `unavailable`, saying whose and since when. */
  async #live(name: string, what: string): Promise<VmNode> {
    const node = await this.nodes.find(name);
    if (node?.alive === true) return node;
    const why = node === undefined ? 'which is not registered' : `whose lease ran out at ${node.leaseExpiresAt}`;
    throw new VesselError('unavailable', `${what}, ${why}`, { retryAfterSecs: RETRY_AFTER_SECS });
  }

  async #anyNode(): Promise<VmNode> {
    const alive = (await this.nodes.list()).filter((n) => n.alive);
    if (alive.length === 0) throw new VesselError('unavailable', 'no VM host holds a lease', { retryAfterSecs: RETRY_AFTER_SECS });
    return alive[this.#next++ % alive.length]!;
  }

  async #placeCreate(call: HopCall, body: Buffer): Promise<{ target: VmNode; placed: { node: string; demand: Demand } | null }> {
    const wanted = createShape(body);
    // A body the host will refuse anyway (not JSON, wrong types) goes to any host, for its exact error.
    if (wanted === null) return { target: await this.#anyNode(), placed: null };
    if (wanted.checkpoint === undefined) {
      const choice = await this.#place(wanted.demand);
      return { target: choice, placed: { node: choice.name, demand: wanted.demand } };
    }
    const cp = await this.store.checkpoints.find(call.principal.tenantId, wanted.checkpoint, true);
    if (cp === undefined || cp.node === null) return { target: await this.#anyNode(), placed: null };
    const demand = { memoryMib: cp.resources.limits.memory_mib, vcpus: cp.resources.vcpus };
    const where = `checkpoint '${cp.displayName}' has its files on VM host '${cp.node}'`;
    const holder = await this.nodes.find(cp.node);
    // Where its files are, while that host takes runtimes: a restore from a local file, sharing its pages.
    if (holder?.alive === true && !holder.draining) return { target: holder, placed: { node: holder.name, demand } };
    // A host that is gone leaves a checkpoint only object storage can bring back (docs/scaling.md, "Object storage").
    const stored = holder?.alive !== true && cp.tenantId !== null && (await this.store.checkpoints.archiveDigest(cp.id)) !== null;
    if (holder?.alive !== true && !stored) await this.#live(cp.node, where);
    if (cp.tenantId === null) {
      // A system template is its host's own and never moves; every host has one of each shape.
      throw failedPrecondition(`checkpoint '${cp.displayName}' is VM host '${cp.node}''s template and that host is draining: create without a checkpoint, with the same resources, for another host's`);
    }
    // Its host takes no new runtimes, or is gone: the fork goes where placement says, and the
    // checkpoint's files go there first, from that host or from object storage (docs/scaling.md,
    // "Moving checkpoints").
    const target = await this.#place(demand);
    await moveCheckpoint(this.client, target, cp.node, call.principal, call.requestId, cp.id);
    return { target, placed: { node: target.name, demand } };
  }

  /** The host placement picks for a runtime of this size, counting the creates this node is placing. */
  async #place(demand: Demand): Promise<VmNode> {
    const [nodes, stored] = await Promise.all([this.nodes.list(), this.store.nodes.load()]);
    const load = new Map(stored);
    for (const [name, mine] of this.#placing) addLoad(load, name, mine, 1);
    const choice = placeRuntime(nodes, load, demand);
    if (typeof choice === 'string') throw new VesselError('unavailable', `no VM host can take the runtime: ${choice}`, { retryAfterSecs: RETRY_AFTER_SECS });
    return choice;
  }
}

/** What placement needs of a create body; null when it is not a JSON object of the right shape. */
function createShape(body: Buffer): { checkpoint?: string; demand: Demand } | null {
  let parsed: unknown;
  try {
    parsed = JSON.parse(body.toString('utf8'));
  } catch {
    return null;
  }
  if (typeof parsed !== 'object' || parsed === null) return null;
  const { checkpoint, resources } = parsed as { checkpoint?: unknown; resources?: { limits?: { memory_mib?: unknown }; vcpus?: unknown } };
  if (checkpoint !== undefined && typeof checkpoint !== 'string') return null;
  const memory = resources?.limits?.memory_mib ?? DEFAULT_MEMORY_MIB;
  const vcpus = resources?.vcpus ?? 1;
  // Out of range, the host refuses it with its own 400: placement only needs numbers it can add up.
  const sane = (n: unknown): n is number => Number.isSafeInteger(n) && (n as number) > 0;
  if (!sane(memory) || !sane(vcpus)) return null;
  return { ...(checkpoint === undefined ? {} : { checkpoint }), demand: { memoryMib: memory, vcpus } };
}

/** The request's body, read whole up to the limit (a create's JSON: the host reads it again). */
function readBody(request: FastifyRequest, limit: number): Promise<Buffer> {
  return new Promise((resolve, reject) => {
    const tooLarge = () => new VesselError('invalid_argument', 'request body is too large', { httpStatus: 413 });
    if (Number(request.headers['content-length'] ?? 0) > limit) return reject(tooLarge());
    const chunks: Buffer[] = [];
    let size = 0;
    const onData = (chunk: Buffer) => {
      size += chunk.length;
      if (size <= limit) return void chunks.push(chunk);
      // No more is read: the refusal goes out, and the connection closes behind it.
      request.raw.off('data', onData);
      request.raw.pause();
      reject(tooLarge());
    };
    request.raw.on('data', onData);
    request.raw.once('end', () => resolve(Buffer.concat(chunks)));
    request.raw.once('error', reject);
  });
}
