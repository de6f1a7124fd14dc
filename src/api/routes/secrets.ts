import { Type } from '@sinclair/typebox';
import { auditView, listView, ruleView, secretView } from '../presenters.js';
import {
  Audit,
  AuditQuery,
  DataOf,
  Empty,
  ListOf,
  ListQuery,
  RuleCreateBody,
  RuleParams,
  RuntimeParams,
  RuntimeRuleParams,
  Secret,
  SecretCreateBody,
  SecretInjectionRule,
  SecretParams,
} from '../schemas.js';
import { ERROR_RESPONSES, pageOf, type RoutePlugin } from './common.js';

export const secretRoutes: RoutePlugin = async (app, { core }) => {
  const tags = ['secrets'];
  const SecretData = DataOf(Type.Ref(Secret));

  app.get('/v1/secrets', {
    config: { scope: 'secrets:read' },
    schema: { tags, summary: 'List secret metadata', querystring: ListQuery, response: { 200: ListOf(Type.Ref(Secret)), ...ERROR_RESPONSES } },
  }, async (req) => listView(await core.secrets.list(req.principal.tenantId, pageOf(req.query)), secretView));

  app.post('/v1/secrets', {
    config: { scope: 'secrets:write' },
    schema: { tags, summary: 'Store a secret; its value is never returned', body: SecretCreateBody, response: { 201: SecretData, ...ERROR_RESPONSES } },
  }, async (req, reply) => reply.code(201).send({ data: secretView(await core.secrets.create(req.principal.tenantId, req.body)) }));

  app.get('/v1/secrets/:secret_id', {
    config: { scope: 'secrets:read' },
    schema: { tags, summary: 'Get secret metadata', params: SecretParams, response: { 200: SecretData, ...ERROR_RESPONSES } },
  }, async (req) => ({ data: secretView(await core.secrets.get(req.principal.tenantId, req.params.secret_id)) }));

  app.delete('/v1/secrets/:secret_id', {
    config: { scope: 'secrets:write' },
    schema: { tags, summary: 'Delete a secret that no rule uses', params: SecretParams, response: { 200: Empty, ...ERROR_RESPONSES } },
  }, async (req) => {
    await core.secrets.delete(req.principal.tenantId, req.params.secret_id);
    return { data: {} };
  });
};

export const ruleRoutes: RoutePlugin = async (app, { core }) => {
  const tags = ['secret-injection-rules'];
  const RuleData = DataOf(Type.Ref(SecretInjectionRule));
  const RuleList = ListOf(Type.Ref(SecretInjectionRule));

  app.get('/v1/runtimes/:runtime_id/secret-injection-rules', {
    config: { scope: 'secrets:read' },
    schema: { tags, summary: "List a runtime's rules", params: RuntimeParams, querystring: ListQuery, response: { 200: RuleList, ...ERROR_RESPONSES } },
  }, async (req) => listView(await core.rules.list(req.principal.tenantId, pageOf(req.query), req.params.runtime_id), ruleView));

  app.post('/v1/runtimes/:runtime_id/secret-injection-rules', {
    config: { scope: 'secrets:write' },
    schema: { tags, summary: 'Create a runtime-scoped rule', params: RuntimeParams, body: RuleCreateBody, response: { 201: RuleData, ...ERROR_RESPONSES } },
  }, async (req, reply) => reply.code(201).send({ data: ruleView(await core.rules.create(req.principal.tenantId, req.params.runtime_id, req.body)) }));

  app.get('/v1/runtimes/:runtime_id/secret-injection-rules/:rule_id', {
    config: { scope: 'secrets:read' },
    schema: { tags, summary: "Get a runtime's rule", params: RuntimeRuleParams, response: { 200: RuleData, ...ERROR_RESPONSES } },
  }, async (req) => ({ data: ruleView(await core.rules.get(req.principal.tenantId, req.params.rule_id, req.params.runtime_id)) }));

  app.delete('/v1/runtimes/:runtime_id/secret-injection-rules/:rule_id', {
    config: { scope: 'secrets:write' },
    schema: { tags, summary: "Delete a runtime's rule", params: RuntimeRuleParams, response: { 200: Empty, ...ERROR_RESPONSES } },
  }, async (req) => {
    await core.rules.delete(req.principal.tenantId, req.params.rule_id, req.params.runtime_id);
    return { data: {} };
  });

  app.get('/v1/secret-injection-rules', {
    config: { scope: 'secrets:read' },
    schema: { tags, summary: 'List all rules', querystring: ListQuery, response: { 200: RuleList, ...ERROR_RESPONSES } },
  }, async (req) => listView(await core.rules.list(req.principal.tenantId, pageOf(req.query)), ruleView));

  app.delete('/v1/secret-injection-rules/:rule_id', {
    config: { scope: 'secrets:write' },
    schema: { tags, summary: 'Delete a rule by UUID', params: RuleParams, response: { 200: Empty, ...ERROR_RESPONSES } },
  }, async (req) => {
    await core.rules.delete(req.principal.tenantId, req.params.rule_id);
    return { data: {} };
  });
};

export const auditRoutes: RoutePlugin = async (app, { core }) => {
  app.get('/v1/audits', {
    config: { scope: 'audits:read' },
    schema: { tags: ['audits'], summary: 'List recent audits, newest first', querystring: AuditQuery, response: { 200: ListOf(Type.Ref(Audit)), ...ERROR_RESPONSES } },
  }, async (req) => {
    const audits = await core.audits.list(req.principal.tenantId, { category: req.query.category, runtime: req.query.runtime, limit: req.query.limit ?? 100 });
    return { data: audits.map(auditView) };
  });
};
