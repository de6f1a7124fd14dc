/**
 * Token management (docs/api.md, "Tokens"): the operator's, so every route needs the admin
 * scope, and works across tenants. A token's value is in the creation reply only: it is not
 * stored (only its hash), logged or shown again.
 */
import { Type } from '@sinclair/typebox';
import { listView, tokenView } from '../presenters.js';
import { DataOf, ListOf, Token, TokenCreateBody, TokenCreated, TokenListQuery, TokenParams } from '../schemas.js';
import { pageOf, type RoutePlugin } from './common.js';

const tags = ['tokens'];

export const tokenRoutes: RoutePlugin = async (app, { core }) => {
  const tokens = core.tokens;

  app.post('/v1/tokens', {
    config: { scope: 'admin' },
    schema: {
      operationId: 'createToken',
      tags,
      summary: 'Create a token for a tenant; its value is in this reply only',
      body: TokenCreateBody,
      response: { 201: DataOf(Type.Ref(TokenCreated), 'the token, with its value: store it now, it is never shown again') },
    },
  }, async (req, reply) => {
    const { token, record } = await tokens.create(req.body.tenant, req.body.scopes, req.body.name);
    req.log.info({ tokenId: record.id, tenant: record.tenantId, scopes: record.scopes, by: req.principal.tokenId }, 'token created');
    // The one answer that carries a credential: no cache or proxy between may keep it.
    return reply.code(201).header('cache-control', 'no-store').send({ data: { ...tokenView(record), token } });
  });

  app.get('/v1/tokens', {
    config: { scope: 'admin' },
    schema: {
      operationId: 'listTokens',
      tags,
      summary: 'List tokens of every tenant or of one, newest first, revoked ones included',
      querystring: TokenListQuery,
      response: { 200: ListOf(Type.Ref(Token), 'a page of tokens, without their values') },
    },
  }, async (req) => listView(await tokens.page({ tenantId: req.query.tenant, ...pageOf(req.query) }), tokenView));

  app.get('/v1/tokens/:token_id', {
    config: { scope: 'admin' },
    schema: { operationId: 'getToken', tags, summary: 'Get a token, without its value', params: TokenParams, response: { 200: DataOf(Type.Ref(Token), 'the token, without its value') } },
  }, async (req) => ({ data: tokenView(await tokens.get(req.params.token_id)) }));

  app.delete('/v1/tokens/:token_id', {
    config: { scope: 'admin' },
    schema: {
      operationId: 'revokeToken',
      tags,
      summary: 'Revoke a token, at once; not the bootstrap admin token, nor the calling one',
      params: TokenParams,
      response: { 200: DataOf(Type.Ref(Token), 'the token, revoked') },
    },
  }, async (req) => {
    const record = await tokens.revokeAs(req.principal, req.params.token_id);
    req.log.info({ tokenId: record.id, tenant: record.tenantId, by: req.principal.tokenId }, 'token revoked');
    return { data: tokenView(record) };
  });
};
