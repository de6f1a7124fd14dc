/** The service's own public routes: liveness, and the OpenAPI document. */
import { Type } from '@sinclair/typebox';
import type { FastifyPluginAsyncTypebox } from '@fastify/type-provider-typebox';
import { DataOf, Health } from '../schemas.js';

export const healthRoutes: FastifyPluginAsyncTypebox = async (app) => {
  const health = { tags: ['health'], security: [] };
  app.get('/healthz', {
    // HEAD is its own route below, without a body.
    exposeHeadRoute: false,
    schema: { ...health, operationId: 'getHealth', summary: 'Liveness check', response: { 200: DataOf(Type.Ref(Health), 'the service is up') } },
  }, async () => ({ data: { status: 'ok' as const } }));
  app.head('/healthz', {
    config: {
      swagger: { exposeHeadRoute: true },
      // @fastify/swagger names a HEAD operation after its route's operationId plus `-head`.
      swaggerTransform: ({ schema, url }) => ({ schema: { ...schema, operationId: 'headHealth' }, url }),
    },
    schema: { ...health, summary: 'Liveness check, without a body', response: { 200: { description: 'the service is up', type: 'null' } } },
  }, async (_req, reply) => reply.send());
  app.get('/openapi.json', { schema: { hide: true } }, async () => app.swagger());
};
