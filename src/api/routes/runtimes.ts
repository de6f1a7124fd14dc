import { Type } from '@sinclair/typebox';
import type { IngressAddress } from '../../core/ingress-urls.js';
import type { LifecycleOp } from '../../core/lifecycle.js';
import { parseRuntimeFilter } from '../../core/runtime-settings.js';
import type { ShownRuntime } from '../../core/shown-runtimes.js';
import { runtimeView, listView } from '../presenters.js';
import {
  DataOf,
  Empty,
  ListOf,
  Runtime,
  RuntimeCreateBody,
  RuntimeListQuery,
  RuntimeParams,
  RuntimePatchBody,
} from '../schemas.js';
import { pageOf, type RoutePlugin } from './common.js';

const RuntimeData = DataOf(Type.Ref(Runtime), 'the runtime');
const tags = ['runtimes'];

/** `ingress`: where the service's ingress listener is reached, for the runtimes' ingress_urls; null when it runs none. */
export const runtimeRoutes: RoutePlugin<{ ingress: IngressAddress | null }> = async (app, { core, ingress }) => {
  const runtimes = core.runtimes;
  const view = (rt: ShownRuntime) => runtimeView(rt, ingress);

  app.get('/v1/runtimes', {
    config: { scope: 'runtimes:read' },
    schema: {
      operationId: 'listRuntimes',
      tags,
      summary: 'List runtimes, newest first, optionally only those with given labels or statuses',
      querystring: RuntimeListQuery,
      response: { 200: ListOf(Type.Ref(Runtime), 'a page of the runtimes that pass every filter') },
    },
  }, async (req) => {
    const page = await runtimes.list(req.principal.tenantId, pageOf(req.query), parseRuntimeFilter(req.query));
    return listView({ ...page, items: await core.shown.all(page.items) }, view);
  });

  app.post('/v1/runtimes', {
    config: { scope: 'runtimes:write', forward: 'create' },
    schema: {
      operationId: 'createRuntime',
      tags,
      summary: 'Create a runtime; answers once it is running',
      body: RuntimeCreateBody,
      response: { 201: DataOf(Type.Ref(Runtime), 'the runtime, running') },
    },
  }, async (req, reply) => {
    const rt = await runtimes.create(req.principal.tenantId, req.body);
    return reply.code(201).send({ data: view(rt) });
  });

  app.get('/v1/runtimes/:runtime_id', {
    config: { scope: 'runtimes:read' },
    schema: { operationId: 'getRuntime', tags, summary: 'Get a runtime', params: RuntimeParams, response: { 200: RuntimeData } },
  }, async (req) => ({ data: view(await core.shown.one(await runtimes.get(req.principal.tenantId, req.params.runtime_id))) }));

  app.delete('/v1/runtimes/:runtime_id', {
    config: { scope: 'runtimes:write', forward: 'runtime' },
    schema: { operationId: 'deleteRuntime', tags, summary: 'Delete a runtime (from any state)', params: RuntimeParams, response: { 200: Empty('the runtime, its VM, disk and rules are gone') } },
  }, async (req) => {
    await runtimes.delete(req.principal.tenantId, req.params.runtime_id);
    return { data: {} };
  });

  app.patch('/v1/runtimes/:runtime_id', {
    config: { scope: 'runtimes:write', forward: 'runtime' },
    schema: {
      operationId: 'patchRuntime',
      tags,
      summary: 'Patch resources, egress policy, labels (replaced whole) or lifecycle settings (each field given)',
      params: RuntimeParams,
      body: RuntimePatchBody,
      response: { 200: DataOf(Type.Ref(Runtime), 'the runtime; limits that apply at the next start are in pending_resources') },
    },
  }, async (req) => ({ data: view(await runtimes.patch(req.principal.tenantId, req.params.runtime_id, req.body)) }));

  const lifecycle: Array<[LifecycleOp, string, string]> = [
    ['start', 'startRuntime', 'Boot a shut-down, crashed or suspended runtime'],
    ['pause', 'pauseRuntime', 'Pause a running runtime'],
    ['resume', 'resumeRuntime', 'Resume a paused or suspended runtime'],
    ['suspend', 'suspendRuntime', 'Save a running runtime (memory, devices, processes) to disk and end its VM; resume or start restores it'],
    ['stop', 'stopRuntime', 'Gracefully shut a running or paused runtime down'],
  ];
  const InNewState = DataOf(Type.Ref(Runtime), 'the runtime in its new state');
  for (const [op, operationId, summary] of lifecycle) {
    app.post(`/v1/runtimes/:runtime_id/${op}`, {
      config: { scope: 'runtimes:write', forward: 'runtime' },
      schema: { operationId, tags, summary, params: RuntimeParams, response: { 200: InNewState } },
    }, async (req) => ({ data: view(await runtimes.lifecycle(req.principal.tenantId, req.params.runtime_id, op)) }));
  }
};
