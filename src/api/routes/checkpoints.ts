import { Type } from '@sinclair/typebox';
import { checkpointView, listView } from '../presenters.js';
import { Checkpoint, CheckpointCreateBody, CheckpointListQuery, CheckpointParams, DataOf, Empty, ListOf, Nullable, RuntimeParams } from '../schemas.js';
import { pageOf, type RoutePlugin } from './common.js';

export const checkpointRoutes: RoutePlugin = async (app, { core }) => {
  const tags = ['checkpoints'];

  app.post('/v1/runtimes/:runtime_id/checkpoints', {
    config: { scope: 'checkpoints:write', forward: 'runtime' },
    schema: {
      operationId: 'createCheckpoint',
      tags,
      summary: 'Checkpoint a running or paused runtime (beta; kind full). Answers in state creating.',
      params: RuntimeParams,
      // Optional: Fastify validates an absent body as null, which this schema accepts.
      body: Nullable(CheckpointCreateBody),
      response: { 201: DataOf(Type.Ref(Checkpoint), 'the checkpoint, in state creating') },
    },
  }, async (req, reply) => {
    const cp = await core.checkpoints.create(req.principal.tenantId, req.params.runtime_id, req.body ?? {});
    return reply.code(201).send({ data: checkpointView(cp) });
  });

  app.get('/v1/checkpoints', {
    config: { scope: 'checkpoints:read' },
    schema: {
      operationId: 'listCheckpoints',
      tags,
      summary: 'List checkpoints, newest first; include_system adds the service-owned templates',
      querystring: CheckpointListQuery,
      response: { 200: ListOf(Type.Ref(Checkpoint), 'a page of checkpoints') },
    },
  }, async (req) => listView(await core.checkpoints.list(req.principal.tenantId, pageOf(req.query), req.query.include_system ?? false), checkpointView));

  app.get('/v1/checkpoints/:checkpoint_id', {
    config: { scope: 'checkpoints:read' },
    schema: { operationId: 'getCheckpoint', tags, summary: 'Get checkpoint metadata', params: CheckpointParams, response: { 200: DataOf(Type.Ref(Checkpoint), 'the checkpoint') } },
  }, async (req) => ({ data: checkpointView(await core.checkpoints.get(req.principal.tenantId, req.params.checkpoint_id)) }));

  app.delete('/v1/checkpoints/:checkpoint_id', {
    config: { scope: 'checkpoints:write', forward: 'checkpoint' },
    schema: {
      operationId: 'deleteCheckpoint',
      tags,
      summary: 'Delete a checkpoint; its files live on while forks need them',
      params: CheckpointParams,
      response: { 200: Empty('the checkpoint is gone from every list') },
    },
  }, async (req) => {
    await core.checkpoints.delete(req.principal.tenantId, req.params.checkpoint_id);
    return { data: {} };
  });
};
