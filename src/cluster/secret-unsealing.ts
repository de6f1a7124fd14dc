/**
 * Secrets for a fleet's enrolled VM hosts (docs/scaling.md, "Secrets on VM hosts"). Such a host
 * holds no master key and may not read a secret's sealed value from the store. When its gateway
 * needs a secret, the host asks an API node, which opens the secret only while a rule of a runtime
 * that the store places on that host names it, and answers it sealed for that host.
 *
 * The request, `POST /internal/nodes/{node}/secrets/{secret_id}/unseal` on an API node's API port
 * (VESSEL_API_URL), is signed as a hop is (hop.ts: method, path, a principal naming the tenant, the
 * request id, the host's name, the time, no body), under a key derived from the host's own key for
 * this use alone: good once, for a minute, and made by nothing but that host (or an API node).
 * The answer is AES-256-GCM sealed under another key derived from the host's key, and bound to the
 * request (host, tenant, secret, request id): whoever sees it on the way reads nothing, and can
 * pass no other answer off as this one, with TLS or without. Even "the secret is gone" is sealed.
 */
import { randomBytes } from 'node:crypto';
import { Type } from '@sinclair/typebox';
import type { FastifyPluginAsyncTypebox } from '@fastify/type-provider-typebox';
import type { Core } from '../core/core.js';
import { ERROR_CODES, VesselError, unavailable, type ErrorCode } from '../core/errors.js';
import type { RevealedSecret, SecretUnsealer } from '../core/ports.js';
import type { Logger } from '../core/runtimes.js';
import { SecretBox } from '../core/secret-box.js';
import type { Scope } from '../core/types.js';
import { GRANT_HEADERS, subKey, type FleetKeys } from './fleet-keys.js';
import { NO_BODY } from './hop-body.js';
import { SeenHops, signHop, verifyHop } from './hop.js';

/** A guest's connection waits for this at most, per API node asked. */
const UNSEAL_TIMEOUT_MS = 10_000;
/** A sealed 64 KiB secret in its JSON envelope is under 100 KiB; an error envelope far less. */
const MAX_ANSWER_BYTES = 256 * 1024;
/** What of an API node's refusal is kept in the error (and so in the host's log). */
const MAX_MESSAGE_CHARS = 500;

const requestKey = (hostKey: string): string => subKey(hostKey, 'unseal-request').toString('hex');
const answerBox = (hostKey: string): SecretBox => new SecretBox(subKey(hostKey, 'unseal-answer'));
const answerContext = (node: string, tenantId: string, secretId: string, requestId: string): string => ['vessel-unseal-v1', node, tenantId, secretId, requestId].join('\n');

export const unsealPath = (node: string, secretId: string): string => `/internal/nodes/${node}/secrets/${secretId}/unseal`;

/** A request by host `node`, signed with its key, for the tenant's secret: its path, headers and request id. */
export function unsealRequest(node: string, nodeKey: string, tenantId: string, secretId: string): { path: string; headers: Record<string, string>; requestId: string } {
  const path = unsealPath(node, secretId);
  const requestId = `unseal-${randomBytes(12).toString('base64url')}`;
  const principal = { tokenId: `node:${node}`, tenantId, scopes: new Set<Scope>() };
  const headers = { ...signHop(requestKey(nodeKey), principal, { method: 'POST', url: path, requestId, node, body: NO_BODY }), 'x-request-id': requestId };
  return { path, headers, requestId };
}

/** The answer to request `requestId` by host `node` for the tenant's secret, opened with the host's key: null when the secret is gone. */
export function openAnswer(node: string, nodeKey: string, tenantId: string, secretId: string, requestId: string, sealed: string): RevealedSecret | null {
  const unsealed = JSON.parse(answerBox(nodeKey).open(sealed, answerContext(node, tenantId, secretId, requestId))) as Unsealed;
  if (unsealed.value === null) return null;
  if (typeof unsealed.value !== 'string' || !Number.isSafeInteger(unsealed.cache_ttl_secs) || unsealed.cache_ttl_secs < 0) throw new Error('not a secret');
  return { value: unsealed.value, cacheTtlSecs: unsealed.cache_ttl_secs };
}

/** What is sealed in an answer: the value (null: the secret is gone) and how long the host may keep it. */
interface Unsealed {
  value: string | null;
  cache_ttl_secs: number;
}

const Params = Type.Object({
  node: Type.String({ pattern: '^[a-z0-9]([a-z0-9.-]{0,61}[a-z0-9])?$' }),
  secret_id: Type.String({ format: 'uuid' }),
});

/**
 * An API node's route for its hosts. A refusal says why (never anything of the value) and is
 * logged with the host, tenant and secret it named: an authentication failure as `unauthenticated`,
 * a secret no rule of a runtime on that host names as `permission_denied`.
 */
export function unsealRoutes(core: Core, keys: FleetKeys): FastifyPluginAsyncTypebox {
  const seen = new SeenHops();
  return async (app) => {
    app.post(
      '/internal/nodes/:node/secrets/:secret_id/unseal',
      {
        schema: { hide: true, params: Params },
        // Checked before anything of the request is read: an unsigned one is refused, body unread.
        onRequest: async (req) => {
          const { node, secret_id: secretId } = req.params as { node: string; secret_id: string };
          const refuse = (reason: string): never => {
            req.log.warn({ node, secretId, reason }, 'a request to unseal a secret for a VM host was refused');
            throw new VesselError('unauthenticated', `this route takes a request signed by VM host '${node}' (${reason})`);
          };
          // A grant is for moves between hosts: never for this.
          if (GRANT_HEADERS.some((h) => req.headers[h] !== undefined)) refuse('a grant was sent');
          // Keys are derived only for registered hosts: a stranger's names cost no memory.
          if ((await core.nodes.find(node)) === undefined) refuse('no VM host of that name is registered');
          const vouched = verifyHop(requestKey(keys.keyOf(node)), req.headers, { method: req.method, url: req.url, requestId: req.id, node }, Date.now(), seen);
          if (typeof vouched === 'string') return refuse(vouched);
          // The host's own principal: it names the tenant whose secret the host asks for.
          req.principal = vouched.principal;
        },
      },
      async (req, reply) => {
        const { node, secret_id: secretId } = req.params;
        const tenantId = req.principal.tenantId;
        const revealed = await core.secrets.revealForNode(node, tenantId, secretId).catch((err: unknown) => {
          if (err instanceof VesselError && err.code === 'permission_denied') req.log.warn({ node, tenantId, secretId }, 'a VM host asked for a secret that no rule of a runtime on it names');
          throw err;
        });
        const unsealed: Unsealed = { value: revealed?.value ?? null, cache_ttl_secs: revealed?.cacheTtlSecs ?? 0 };
        void reply.header('cache-control', 'no-store');
        return { data: { sealed: answerBox(keys.keyOf(node)).seal(JSON.stringify(unsealed), answerContext(node, tenantId, secretId, req.id)) } };
      },
    );
  };
}

/** An API node that could not be asked (down, unreachable, overloaded): the next one is. */
class ApiNodeAway extends Error {}

/**
 * An enrolled host's way to its secrets: the API nodes at `apiUrls` (VESSEL_API_URL), asked in
 * turn from the last one that answered; one that is away costs a retry on the next, not the
 * guest's connection.
 */
export class ApiNodeUnsealer implements SecretUnsealer {
  #next = 0;

  constructor(
    private readonly apiUrls: readonly string[],
    private readonly node: string,
    /** This host's own key (VESSEL_NODE_KEY). */
    private readonly nodeKey: string,
    private readonly log: Logger,
  ) {
    if (apiUrls.length === 0) {
      throw new Error('an enrolled VM host holds no master key and has its secrets unsealed by an API node: set VESSEL_API_URL to the API nodes\' address (docs/scaling.md, "Secrets on VM hosts")');
    }
  }

  async unseal(tenantId: string, secretId: string): Promise<RevealedSecret | null> {
    const reasons: string[] = [];
    for (let i = 0; i < this.apiUrls.length; i++) {
      const at = (this.#next + i) % this.apiUrls.length;
      try {
        const answer = await this.#ask(this.apiUrls[at]!, tenantId, secretId);
        this.#next = at;
        return answer;
      } catch (err) {
        if (!(err instanceof ApiNodeAway)) throw err;
        reasons.push(err.message);
        this.log.warn({ apiUrl: this.apiUrls[at], reason: err.message }, 'an API node could not unseal a secret for this host; the next one is asked');
      }
    }
    throw unavailable(`no API node unsealed secret '${secretId}': ${reasons.join('; ')}`);
  }

  async #ask(apiUrl: string, tenantId: string, secretId: string): Promise<RevealedSecret | null> {
    const { path, headers, requestId } = unsealRequest(this.node, this.nodeKey, tenantId, secretId);
    let status: number;
    let body: Buffer;
    try {
      const response = await fetch(new URL(path, apiUrl), { method: 'POST', headers, redirect: 'error', signal: AbortSignal.timeout(UNSEAL_TIMEOUT_MS) });
      status = response.status;
      body = await readAtMost(response, MAX_ANSWER_BYTES);
    } catch (err) {
      // fetch says only "fetch failed"; what failed (a refused connection, a timeout) is its cause.
      const { message, cause } = err as Error & { cause?: unknown };
      throw new ApiNodeAway(`${apiUrl}: ${cause instanceof Error ? cause.message : message}`);
    }
    if (status !== 200) {
      const error = refusal(status, body);
      if (error.httpStatus >= 500) throw new ApiNodeAway(`${apiUrl}: ${error.message}`);
      throw error;
    }
    return this.#open(body, tenantId, secretId, requestId);
  }

  #open(body: Buffer, tenantId: string, secretId: string, requestId: string): RevealedSecret | null {
    try {
      const sealed = (JSON.parse(body.toString('utf8')) as { data?: { sealed?: unknown } }).data?.sealed;
      if (typeof sealed !== 'string') throw new Error('no sealed answer');
      return openAnswer(this.node, this.nodeKey, tenantId, secretId, requestId, sealed);
    } catch {
      // Never the answer's text: it is a sealed value, or whatever stood in its place.
      throw unavailable(`an API node's answer to unseal secret '${secretId}' is not a secret sealed for this host and this request`);
    }
  }
}

/** The response's body, refused once it passes `limit` bytes. */
async function readAtMost(response: Response, limit: number): Promise<Buffer> {
  const parts: Uint8Array[] = [];
  let size = 0;
  if (response.body === null) return Buffer.alloc(0);
  for await (const part of response.body) {
    size += part.length;
    if (size > limit) {
      await response.body.cancel().catch(() => undefined);
      throw new Error(`an answer over ${limit} bytes`);
    }
    parts.push(part);
  }
  return Buffer.concat(parts, size);
}

/** An API node's error envelope as the error it names; anything else is the API node being unwell. */
function refusal(status: number, body: Buffer): VesselError {
  try {
    const { error } = JSON.parse(body.toString('utf8')) as { error?: { code?: unknown; message?: unknown } };
    const code = error?.code as ErrorCode;
    if (ERROR_CODES.includes(code) && typeof error?.message === 'string') {
      return new VesselError(code, `an API node refused to unseal a secret for this host: ${error.message.slice(0, MAX_MESSAGE_CHARS)}`);
    }
  } catch {
    // not an envelope
  }
  return unavailable(`an API node answered ${status} without an error envelope`);
}

/** How a process opens secrets: with the master key (`box`), or, holding none, through API nodes (`unsealer`). */
export type SecretOpening = { box: SecretBox; unsealer: null } | { box: null; unsealer: SecretUnsealer };

/**
 * An enrolled VM host's: no master key at all (none is read or made in its data directory), and
 * API nodes at `apiUrls` to unseal what its gateway injects. One given the master key anyway is
 * told to drop it: held, it would open every tenant's secrets to whoever takes the host.
 */
export function enrolledHostSecrets(settings: { apiUrls: readonly string[]; nodeName: string; masterKey: string | undefined }, nodeKey: string, log: Logger): SecretOpening {
  if (settings.masterKey !== undefined) {
    log.warn({}, 'VESSEL_MASTER_KEY is set on an enrolled VM host, which does not use it: remove it from the host\'s environment (an API node unseals its secrets)');
  }
  return { box: null, unsealer: new ApiNodeUnsealer(settings.apiUrls, settings.nodeName, nodeKey, log) };
}
