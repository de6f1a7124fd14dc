/**
 * Templates (docs/templates.md): created from a registry image (JSON) or an uploaded image
 * archive (the raw body), read, listed, deleted, and their build log as server-sent events.
 * Answered by this process alone: templates are single-host for now, so no route forwards.
 */
import { Type } from '@sinclair/typebox';
import type { Static } from '@sinclair/typebox';
import type { Readable } from 'node:stream';
import { invalidArgument } from '../../core/errors.js';
import type { TemplateCreateInput } from '../../core/templates.js';
import type { EgressPolicy } from '../../core/types.js';
import { EventStream } from '../event-stream.js';
import { buildEventView, listView, templateView } from '../presenters.js';
import { DataOf, Empty, ListOf, ListQuery, Template, TemplateArchiveQuery, TemplateBuildEvent, TemplateCreateBody, TemplateParams } from '../schemas.js';
import { acceptRawBodies, binary, pageOf, rawBody, type RoutePlugin } from './common.js';

const tags = ['templates'];
const TemplateData = (description: string) => DataOf(Type.Ref(Template), description);

export const templateRoutes: RoutePlugin = async (app, { core }) => {
  app.get('/v1/templates', {
    config: { scope: 'templates:read' },
    schema: { operationId: 'listTemplates', tags, summary: 'List templates, newest first', querystring: ListQuery, response: { 200: ListOf(Type.Ref(Template), 'a page of templates') } },
  }, async (req) => listView(await core.templates.list(req.principal.tenantId, pageOf(req.query)), templateView));

  app.get('/v1/templates/:template_id', {
    config: { scope: 'templates:read' },
    schema: { operationId: 'getTemplate', tags, summary: 'Get a template: its state, and why it failed', params: TemplateParams, response: { 200: TemplateData('the template') } },
  }, async (req) => ({ data: templateView(await core.templates.get(req.principal.tenantId, req.params.template_id)) }));

  app.delete('/v1/templates/:template_id', {
    config: { scope: 'templates:write' },
    schema: { operationId: 'deleteTemplate', tags, summary: 'Delete a template; a build still running is stopped', params: TemplateParams, response: { 200: Empty('the template is gone') } },
  }, async (req) => {
    await core.templates.delete(req.principal.tenantId, req.params.template_id);
    return { data: {} };
  });

  app.get('/v1/templates/:template_id/build', {
    config: { scope: 'templates:read' },
    schema: {
      operationId: 'streamTemplateBuild',
      tags,
      summary: "The build's log as server-sent events, from its first step until it ends",
      params: TemplateParams,
      response: { 200: { description: 'step, output and step_done events, then done', content: { 'text/event-stream': { schema: Type.Ref(TemplateBuildEvent) } } } },
    },
  }, async (req, reply) => {
    const stop = new AbortController();
    const { events } = await core.templates.buildLog(req.principal.tenantId, req.params.template_id, stop.signal);
    const stream = new EventStream(reply);
    stream.onClose(() => stop.abort());
    try {
      for await (const e of events) {
        const { event, data } = buildEventView(e);
        await stream.send(event, data);
        if (stream.closed) break;
      }
    } catch (err) {
      await stream.fail(err);
    } finally {
      stream.end();
    }
  });

  await app.register(templateCreateRoute, { core });
};

/**
 * The create, in a scope of its own: JSON names an image to pull; any other body is an image
 * archive (`docker save`, or an OCI archive), taken as a stream, its name in the query.
 */
const templateCreateRoute: RoutePlugin = async (app, { core }) => {
  acceptRawBodies(app);
  app.addContentTypeParser('application/json', { parseAs: 'string' }, (_req, body, done) => {
    try {
      done(null, JSON.parse(body as string));
    } catch {
      done(invalidArgument('the request body is not valid JSON'), undefined);
    }
  });

  app.post('/v1/templates', {
    config: { scope: 'templates:write' },
    schema: {
      operationId: 'createTemplate',
      tags,
      summary: 'Build a template from a registry image (JSON), an image archive (the raw body, with ?name=), or a Dockerfile and its build context (a tar body, with ?name=&dockerfile=). Answers in state building.',
      querystring: Type.Partial(TemplateArchiveQuery),
      body: { content: { 'application/json': { schema: TemplateCreateBody }, ...binary('application/x-tar').content } },
      response: { 201: TemplateData('the template, in state building') },
    },
  }, async (req, reply) => {
    const tenantId = req.principal.tenantId;
    const json = /^application\/json\b/i.test(req.headers['content-type'] ?? '');
    let created;
    if (json) {
      if (req.query.name !== undefined) throw invalidArgument('name goes in the JSON body when it names an image');
      const body = req.body as Static<typeof TemplateCreateBody>;
      created = await core.templates.create(tenantId, { name: body.name, image: body.image, registry_secret: body.registry_secret });
    } else {
      const q = req.query;
      if (q.name === undefined) throw invalidArgument('an uploaded image archive or build context needs ?name= for its template');
      const dockerfileOnly = [q.build_args, q.egress_policy, q.ready_cmd, q.ready_port, q.ready_timeout_secs];
      if (q.dockerfile === undefined && dockerfileOnly.some((v) => v !== undefined)) throw invalidArgument('build_args, egress_policy and ready_* go with dockerfile=');
      const input: TemplateCreateInput = { name: q.name };
      if (q.dockerfile !== undefined) {
        input.dockerfile = q.dockerfile;
        if (q.build_args !== undefined) input.build_args = jsonQuery('build_args', q.build_args, isStringRecord, 'an object of strings');
        if (q.egress_policy !== undefined) input.egress_policy = jsonQuery('egress_policy', q.egress_policy, isEgressPolicy, 'an object {"enabled": boolean, "allowed_hosts": [strings]}');
        input.ready_cmd = q.ready_cmd;
        input.ready_port = q.ready_port;
        input.ready_timeout_secs = q.ready_timeout_secs;
      }
      created = await core.templates.create(tenantId, input, rawBody(req) as Readable);
    }
    return reply.code(201).send({ data: templateView(created) });
  });
};

/** A query parameter that carries JSON (as Docker's build API takes buildargs), checked for its shape. */
function jsonQuery<T>(name: string, text: string, is: (v: unknown) => v is T, shape: string): T {
  let value: unknown;
  try {
    value = JSON.parse(text);
  } catch {
    throw invalidArgument(`${name} is not valid JSON`);
  }
  if (!is(value)) throw invalidArgument(`${name} must be ${shape}`);
  return value;
}

const isStringRecord = (v: unknown): v is Record<string, string> =>
  v !== null && typeof v === 'object' && !Array.isArray(v) && Object.values(v).every((x) => typeof x === 'string');

const isEgressPolicy = (v: unknown): v is EgressPolicy => {
  if (v === null || typeof v !== 'object' || Array.isArray(v)) return false;
  const o = v as Record<string, unknown>;
  return Object.keys(o).every((k) => k === 'enabled' || k === 'allowed_hosts') && typeof o.enabled === 'boolean' && Array.isArray(o.allowed_hosts) && o.allowed_hosts.every((h) => typeof h === 'string');
};
