/** What every /v1 route shares: its documented error responses and list paging. */
import type { FastifyPluginAsyncTypebox } from '@fastify/type-provider-typebox';
import type { Core } from '../../core/core.js';
import { ERROR_STATUS } from '../../core/errors.js';
import type { PageRequest } from '../../core/types.js';

export type RoutePlugin<Extra = object> = FastifyPluginAsyncTypebox<{ core: Core } & Extra>;

const ErrorRef = { $ref: 'ErrorEnvelope#' };

/** Every error status the catalogue can produce, so the OpenAPI document lists them per operation. */
export const ERROR_RESPONSES: Record<number, typeof ErrorRef> = Object.fromEntries(
  [...new Set(Object.values(ERROR_STATUS))].map((status) => [status, ErrorRef]),
);

/** In this plugin scope every request body is a raw byte stream for the handler, whatever its type. */
export function acceptRawBodies(app: Parameters<RoutePlugin>[0]): void {
  app.removeAllContentTypeParsers();
  app.addContentTypeParser('*', (_req, payload, done) => done(null, payload));
}

export const pageOf = (q: { limit?: number; page_token?: string }): PageRequest => ({ limit: q.limit ?? 100, pageToken: q.page_token });
