/** What the routes share: their plugin type, raw bodies, list paging and the errors beyond every operation's. */
import { Readable } from 'node:stream';
import type { FastifyPluginAsyncTypebox } from '@fastify/type-provider-typebox';
import type { FastifyRequest } from 'fastify';
import type { Core } from '../../core/core.js';
import type { PageRequest } from '../../core/types.js';
import { detachableBody } from '../linger.js';

export type RoutePlugin<Extra = object> = FastifyPluginAsyncTypebox<{ core: Core } & Extra>;

/**
 * `command_failed` (422), for the operations that start a command. The errors every operation
 * can answer, and those of request bodies, are added to the OpenAPI document by openapi.ts.
 */
export const COMMAND_FAILED = { 422: { $ref: 'ErrorEnvelope#' } } as const;

/** Raw bytes in OpenAPI, as a request or response body of `mediaType`. */
export const binary = (mediaType: string) => ({ content: { [mediaType]: { schema: { type: 'string', format: 'binary' } } } });

/**
 * In this plugin scope every request body is a raw byte stream for the handler, whatever its
 * type: a detachable one, so that a handler giving up on it (a body over its limit) leaves the
 * connection to deliver the refusal (linger.ts).
 */
export function acceptRawBodies(app: Parameters<RoutePlugin>[0]): void {
  app.removeAllContentTypeParsers();
  app.addContentTypeParser('*', (_req, payload, done) => done(null, detachableBody(payload)));
}

/** A request's raw body under acceptRawBodies; a request without one is an empty stream. */
export const rawBody = (req: FastifyRequest): Readable => (req.body as Readable | undefined) ?? Readable.from([]);

export const pageOf = (q: { limit?: number; page_token?: string }): PageRequest => ({ limit: q.limit ?? 100, pageToken: q.page_token });
