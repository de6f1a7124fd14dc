import { Type } from '@sinclair/typebox';
import type { LifecycleOp } from '../../core/lifecycle.js';
import { runtimeView, listView } from '../presenters.js';
import {
  DataOf,
  Empty,
  ListOf,
  ListQuery,
  Runtime,
  RuntimeCreateBody,
  RuntimeParams,
  RuntimePatchBody,
} from '../schemas.js';
import { ERROR_RESPONSES, pageOf, type RoutePlugin } from './common.js';

const RuntimeData = DataOf(Type.Ref(Runtime));
const tags = ['runtimes'];

export const runtimeRoutes: RoutePlugin = async (app, { core }) => {
  const runtimes = core.runtimes;

  app.get('/v1/runtimes', {
    config: { scope: 'runtimes:read' },
    schema: { tags, summary: 'List runtimes', querystring: ListQuery, response: { 200: ListOf(Type.Ref(Runtime)), ...ERROR_RESPONSES } },
  }, async (req) => listView(await runtimes.list(req.principal.tenantId, pageOf(req.query)), runtimeView));

  app.post('/v1/runtimes', {
    config: { scope: 'runtimes:write' },
    schema: { tags, summary: 'Create a runtime; answers once it is running', body: RuntimeCreateBody, response: { 201: RuntimeData, ...ERROR_RESPONSES } },
  }, async (req, reply) => {
    const rt = await runtimes.create(req.principal.tenantId, req.body);
    return reply.code(201).send({ data: runtimeView(rt) });
  });

  app.get('/v1/runtimes/:runtime_id', {
    config: { scope: 'runtimes:read' },
    schema: { tags, summary: 'Get a runtime', params: RuntimeParams, response: { 200: RuntimeData, ...ERROR_RESPONSES } },
  }, async (req) => ({ data: runtimeView(await runtimes.get(req.principal.tenantId, req.params.runtime_id)) }));

  app.delete('/v1/runtimes/:runtime_id', {
    config: { scope: 'runtimes:write' },
    schema: { tags, summary: 'Delete a runtime (from any state)', params: RuntimeParams, response: { 200: Empty, ...ERROR_RESPONSES } },
  }, async (req) => {
    await runtimes.delete(req.principal.tenantId, req.params.runtime_id);
    return { data: {} };
  });

  app.patch('/v1/runtimes/:runtime_id', {
    config: { scope: 'runtimes:write' },
    schema: { tags, summary: 'Patch resources or egress policy', params: RuntimeParams, body: RuntimePatchBody, response: { 200: RuntimeData, ...ERROR_RESPONSES } },
  }, async (req) => ({ data: runtimeView(await runtimes.patch(req.principal.tenantId, req.params.runtime_id, req.body)) }));

  const lifecycle: Array<[LifecycleOp, string]> = [
    ['start', 'Boot a shut-down, crashed or suspended runtime'],
    ['pause', 'Pause a running runtime'],
    ['resume', 'Resume a paused or suspended runtime'],
    ['stop', 'Gracefully shut a running or paused runtime down'],
  ];
  for (const [op, summary] of lifecycle) {
    app.post(`/v1/runtimes/:runtime_id/${op}`, {
      config: { scope: 'runtimes:write' },
      schema: { tags, summary, params: RuntimeParams, response: { 200: RuntimeData, ...ERROR_RESPONSES } },
    }, async (req) => ({ data: runtimeView(await runtimes.lifecycle(req.principal.tenantId, req.params.runtime_id, op)) }));
  }
};
