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
import { pageOf, type RoutePlugin } from './common.js';

export const secretRoutes: RoutePlugin = async (app, { core }) => {
  const tags = ['secrets'];

  app.get('/v1/secrets', {
    config: { scope: 'secrets:read' },
    schema: { operationId: 'listSecrets', tags, summary: 'List secret metadata, newest first', querystring: ListQuery, response: { 200: ListOf(Type.Ref(Secret), 'a page of secrets') } },
  }, async (req) => listView(await core.secrets.list(req.principal.tenantId, pageOf(req.query)), secretView));

  app.post('/v1/secrets', {
    config: { scope: 'secrets:write' },
    schema: {
      operationId: 'createSecret',
      tags,
      summary: 'Store a secret; its value is never returned',
      body: SecretCreateBody,
      response: { 201: DataOf(Type.Ref(Secret), 'the secret, without its value') },
    },
  }, async (req, reply) => reply.code(201).send({ data: secretView(await core.secrets.create(req.principal.tenantId, req.body)) }));

  app.get('/v1/secrets/:secret_id', {
    config: { scope: 'secrets:read' },
    schema: { operationId: 'getSecret', tags, summary: 'Get secret metadata', params: SecretParams, response: { 200: DataOf(Type.Ref(Secret), 'the secret, without its value') } },
  }, async (req) => ({ data: secretView(await core.secrets.get(req.principal.tenantId, req.params.secret_id)) }));

  app.delete('/v1/secrets/:secret_id', {
    config: { scope: 'secrets:write' },
    schema: { operationId: 'deleteSecret', tags, summary: 'Delete a secret that no rule uses', params: SecretParams, response: { 200: Empty('the secret is gone') } },
  }, async (req) => {
    await core.secrets.delete(req.principal.tenantId, req.params.secret_id);
    return { data: {} };
  });
};

export const ruleRoutes: RoutePlugin = async (app, { core }) => {
  const tags = ['secret-injection-rules'];
  const RuleData = DataOf(Type.Ref(SecretInjectionRule), 'the rule');
  const RuleDeleted = Empty('the rule is gone');

  app.get('/v1/runtimes/:runtime_id/secret-injection-rules', {
    config: { scope: 'secrets:read', forward: 'runtime' },
    schema: {
      operationId: 'listRuntimeSecretInjectionRules',
      tags,
      summary: "List a runtime's rules, newest first",
      params: RuntimeParams,
      querystring: ListQuery,
      response: { 200: ListOf(Type.Ref(SecretInjectionRule), "a page of the runtime's rules") },
    },
  }, async (req) => listView(await core.rules.list(req.principal.tenantId, pageOf(req.query), req.params.runtime_id), ruleView));

  app.post('/v1/runtimes/:runtime_id/secret-injection-rules', {
    config: { scope: 'secrets:write', forward: 'runtime' },
    schema: { operationId: 'createSecretInjectionRule', tags, summary: 'Create a runtime-scoped rule', params: RuntimeParams, body: RuleCreateBody, response: { 201: RuleData } },
  }, async (req, reply) => reply.code(201).send({ data: ruleView(await core.rules.create(req.principal.tenantId, req.params.runtime_id, req.body)) }));

  app.get('/v1/runtimes/:runtime_id/secret-injection-rules/:rule_id', {
    config: { scope: 'secrets:read', forward: 'runtime' },
    schema: { operationId: 'getRuntimeSecretInjectionRule', tags, summary: "Get a runtime's rule", params: RuntimeRuleParams, response: { 200: RuleData } },
  }, async (req) => ({ data: ruleView(await core.rules.get(req.principal.tenantId, req.params.rule_id, req.params.runtime_id)) }));

  app.delete('/v1/runtimes/:runtime_id/secret-injection-rules/:rule_id', {
    config: { scope: 'secrets:write', forward: 'runtime' },
    schema: { operationId: 'deleteRuntimeSecretInjectionRule', tags, summary: "Delete a runtime's rule", params: RuntimeRuleParams, response: { 200: RuleDeleted } },
  }, async (req) => {
    await core.rules.delete(req.principal.tenantId, req.params.rule_id, req.params.runtime_id);
    return { data: {} };
  });

  app.get('/v1/secret-injection-rules', {
    config: { scope: 'secrets:read' },
    schema: {
      operationId: 'listSecretInjectionRules',
      tags,
      summary: 'List the rules of every runtime, newest first',
      querystring: ListQuery,
      response: { 200: ListOf(Type.Ref(SecretInjectionRule), 'a page of rules') },
    },
  }, async (req) => listView(await core.rules.list(req.principal.tenantId, pageOf(req.query)), ruleView));

  app.delete('/v1/secret-injection-rules/:rule_id', {
    config: { scope: 'secrets:write', forward: 'rule' },
    schema: { operationId: 'deleteSecretInjectionRule', tags, summary: 'Delete a rule by UUID', params: RuleParams, response: { 200: RuleDeleted } },
  }, async (req) => {
    await core.rules.delete(req.principal.tenantId, req.params.rule_id);
    return { data: {} };
  });
};

export const auditRoutes: RoutePlugin = async (app, { core }) => {
  app.get('/v1/audits', {
    config: { scope: 'audits:read' },
    schema: {
      operationId: 'listAudits',
      tags: ['audits'],
      summary: 'List recent audits, newest first',
      querystring: AuditQuery,
      response: { 200: ListOf(Type.Ref(Audit), 'a page of audits') },
    },
  }, async (req) => {
    const q = req.query;
    return listView(await core.audits.list(req.principal.tenantId, { category: q.category, runtime: q.runtime, ...pageOf(q) }), auditView);
  });
};
