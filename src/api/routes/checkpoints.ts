import { Type } from '@sinclair/typebox';
import { checkpointView, listView } from '../presenters.js';
import { Checkpoint, CheckpointCreateBody, CheckpointListQuery, CheckpointParams, DataOf, Empty, ListOf, RuntimeParams } from '../schemas.js';
import { ERROR_RESPONSES, pageOf, type RoutePlugin } from './common.js';

export const checkpointRoutes: RoutePlugin = async (app, { core }) => {
  const tags = ['checkpoints'];
  const CheckpointData = DataOf(Type.Ref(Checkpoint));

  app.post('/v1/runtimes/:runtime_id/checkpoints', {
    config: { scope: 'checkpoints:write' },
    schema: {
      tags,
      summary: 'Checkpoint a running or paused runtime (beta; kind full). Answers in state creating.',
      params: RuntimeParams,
      body: Type.Optional(CheckpointCreateBody),
      response: { 201: CheckpointData, ...ERROR_RESPONSES },
    },
  }, async (req, reply) => {
    const cp = await core.checkpoints.create(req.principal.tenantId, req.params.runtime_id, req.body ?? {});
    return reply.code(201).send({ data: checkpointView(cp) });
  });

  app.get('/v1/checkpoints', {
    config: { scope: 'checkpoints:read' },
    schema: { tags, summary: 'List checkpoints; include_system adds the service-owned templates', querystring: CheckpointListQuery, response: { 200: ListOf(Type.Ref(Checkpoint)), ...ERROR_RESPONSES } },
  }, async (req) => listView(await core.checkpoints.list(req.principal.tenantId, pageOf(req.query), req.query.include_system ?? false), checkpointView));

  app.get('/v1/checkpoints/:checkpoint_id', {
    config: { scope: 'checkpoints:read' },
    schema: { tags, summary: 'Get checkpoint metadata', params: CheckpointParams, response: { 200: CheckpointData, ...ERROR_RESPONSES } },
  }, async (req) => ({ data: checkpointView(await core.checkpoints.get(req.principal.tenantId, req.params.checkpoint_id)) }));

  app.delete('/v1/checkpoints/:checkpoint_id', {
    config: { scope: 'checkpoints:write' },
    schema: { tags, summary: 'Delete a checkpoint; its files live on while forks need them', params: CheckpointParams, response: { 200: Empty, ...ERROR_RESPONSES } },
  }, async (req) => {
    await core.checkpoints.delete(req.principal.tenantId, req.params.checkpoint_id);
    return { data: {} };
  });
};
