/**
 * The served OpenAPI document as third-party tools take it (issue 14): valid for swagger-parser,
 * clean under redocly's recommended rules, and complete for client generators. What the server
 * does against what the document says is test/api/openapi-behaviour.test.ts.
 */
import { test, before, after } from 'node:test';
import assert from 'node:assert/strict';
import { spawnSync } from 'node:child_process';
import { mkdtempSync, readFileSync, rmSync, writeFileSync } from 'node:fs';
import { createRequire } from 'node:module';
import { tmpdir } from 'node:os';
import { join } from 'node:path';
import type { OpenAPIV3 } from 'openapi-types';
import { apiHarness, type ApiHarness } from '../support/api-harness.js';
import { dereferenced, nameOf, operationsOf, servedDocument, type Operation } from '../support/openapi.js';

const require = createRequire(import.meta.url);

let h: ApiHarness;
let doc: OpenAPIV3.Document;
let ops: Operation[];
before(async () => {
  h = await apiHarness();
  doc = await servedDocument(h);
  ops = operationsOf(doc);
});
after(() => h.close());

/** Names that generated clients build on: changing one breaks them, so each is pinned here. */
const OPERATION_IDS: Record<string, string> = {
  'GET /healthz': 'getHealth',
  'HEAD /healthz': 'headHealth',
  'GET /v1/runtimes': 'listRuntimes',
  'POST /v1/runtimes': 'createRuntime',
  'GET /v1/runtimes/{runtime_id}': 'getRuntime',
  'PATCH /v1/runtimes/{runtime_id}': 'patchRuntime',
  'DELETE /v1/runtimes/{runtime_id}': 'deleteRuntime',
  'POST /v1/runtimes/{runtime_id}/start': 'startRuntime',
  'POST /v1/runtimes/{runtime_id}/stop': 'stopRuntime',
  'POST /v1/runtimes/{runtime_id}/suspend': 'suspendRuntime',
  'POST /v1/runtimes/{runtime_id}/pause': 'pauseRuntime',
  'POST /v1/runtimes/{runtime_id}/resume': 'resumeRuntime',
  'POST /v1/runtimes/{runtime_id}/exec': 'execCommand',
  'GET /v1/runtimes/{runtime_id}/files': 'readFile',
  'PUT /v1/runtimes/{runtime_id}/files': 'writeFile',
  'POST /v1/runtimes/{runtime_id}/checkpoints': 'createCheckpoint',
  'GET /v1/checkpoints': 'listCheckpoints',
  'GET /v1/checkpoints/{checkpoint_id}': 'getCheckpoint',
  'DELETE /v1/checkpoints/{checkpoint_id}': 'deleteCheckpoint',
  'POST /v1/secrets': 'createSecret',
  'GET /v1/secrets': 'listSecrets',
  'GET /v1/secrets/{secret_id}': 'getSecret',
  'DELETE /v1/secrets/{secret_id}': 'deleteSecret',
  'POST /v1/runtimes/{runtime_id}/secret-injection-rules': 'createSecretInjectionRule',
  'GET /v1/runtimes/{runtime_id}/secret-injection-rules': 'listRuntimeSecretInjectionRules',
  'GET /v1/runtimes/{runtime_id}/secret-injection-rules/{rule_id}': 'getRuntimeSecretInjectionRule',
  'DELETE /v1/runtimes/{runtime_id}/secret-injection-rules/{rule_id}': 'deleteRuntimeSecretInjectionRule',
  'GET /v1/secret-injection-rules': 'listSecretInjectionRules',
  'DELETE /v1/secret-injection-rules/{rule_id}': 'deleteSecretInjectionRule',
  'GET /v1/audits': 'listAudits',
  'GET /v1/runtimes/{runtime_id}/files/list': 'listDir',
  'GET /v1/runtimes/{runtime_id}/files/stat': 'statPath',
  'POST /v1/runtimes/{runtime_id}/files/mkdir': 'makeDir',
  'DELETE /v1/runtimes/{runtime_id}/files': 'removePath',
  'GET /v1/runtimes/{runtime_id}/files/archive': 'downloadArchive',
  'PUT /v1/runtimes/{runtime_id}/files/archive': 'uploadArchive',
  'POST /v1/runtimes/{runtime_id}/processes': 'startProcess',
  'GET /v1/runtimes/{runtime_id}/processes': 'listProcesses',
  'GET /v1/runtimes/{runtime_id}/processes/{process_id}': 'getProcess',
  'DELETE /v1/runtimes/{runtime_id}/processes/{process_id}': 'forgetProcess',
  'GET /v1/runtimes/{runtime_id}/processes/{process_id}/output': 'streamProcessOutput',
  'POST /v1/runtimes/{runtime_id}/processes/{process_id}/signal': 'signalProcess',
  'POST /v1/runtimes/{runtime_id}/processes/{process_id}/stdin': 'writeProcessStdin',
  'GET /v1/runtimes/{runtime_id}/terminal': 'openTerminal',
  'GET /v1/runtimes/{runtime_id}/console-log': 'getRuntimeConsoleLog',
  'POST /v1/tokens': 'createToken',
  'GET /v1/tokens': 'listTokens',
  'GET /v1/tokens/{token_id}': 'getToken',
  'DELETE /v1/tokens/{token_id}': 'revokeToken',
  'POST /v1/templates': 'createTemplate',
  'GET /v1/templates': 'listTemplates',
  'GET /v1/templates/{template_id}': 'getTemplate',
  'DELETE /v1/templates/{template_id}': 'deleteTemplate',
  'GET /v1/templates/{template_id}/build': 'streamTemplateBuild',
};

/** The spec's meaning of each response kind (runtime-api.md, "Errors"), which the document repeats. */
const SPEC_MEANINGS: Record<string, string> = {
  400: 'validation or application error',
  401: 'missing, malformed, or rejected bearer token',
  403: 'the bearer token is not allowed to perform this action',
  404: 'the requested resource was not found',
  409: 'the request conflicts with current resource state',
  429: 'rate limit exceeded',
  503: 'upstream service is unavailable',
  504: 'upstream request timed out',
  default: 'generic error response',
};
const EVERY_OPERATION = ['400', '401', '403', '404', '405', '409', '429', '500', '503', '504', 'default'];
const STARTS_A_COMMAND = ['execCommand', 'startProcess', 'openTerminal'];

const ref = <T>(x: T | OpenAPIV3.ReferenceObject): T => {
  if (typeof x === 'object' && x !== null && '$ref' in x) {
    const [, , kind, name] = x.$ref.split('/');
    return (doc.components as Record<string, Record<string, T>>)[kind!]![name!]!;
  }
  return x;
};
const responseOf = (o: Operation, status: string) => ref(o.op.responses[status]!) as OpenAPIV3.ResponseObject;
const parameterOf = (o: Operation, name: string) => (o.op.parameters ?? []).map((p) => ref(p) as OpenAPIV3.ParameterObject).find((p) => p.name === name);
const schemaOf = (name: string) => doc.components!.schemas![name] as OpenAPIV3.SchemaObject;
const jsonBody = (o: Operation) => ref((ref(o.op.requestBody!) as OpenAPIV3.RequestBodyObject).content['application/json']!.schema!) as OpenAPIV3.SchemaObject;
const byId = (id: string) => ops.find((o) => o.op.operationId === id)!;

/** Every schema object in the document, with where it is. */
function* schemas(node: unknown, where = '#', isSchema = false): Generator<[string, OpenAPIV3.SchemaObject]> {
  if (typeof node !== 'object' || node === null) return;
  if (isSchema) yield [where, node as OpenAPIV3.SchemaObject];
  const s = node as Record<string, unknown>;
  for (const [key, value] of Object.entries(s)) {
    const at = `${where}/${key}`;
    if (isSchema && key === 'properties') for (const [p, v] of Object.entries(value as object)) yield* schemas(v, `${at}/${p}`, true);
    else if (isSchema && (key === 'items' || (key === 'additionalProperties' && typeof value === 'object'))) yield* schemas(value, at, true);
    else if (isSchema && ['allOf', 'anyOf', 'oneOf'].includes(key)) for (const [i, v] of (value as unknown[]).entries()) yield* schemas(v, `${at}/${i}`, true);
    else if (!isSchema && key === 'schema') yield* schemas(value, at, true);
    else if (!isSchema && where === '#/components' && key === 'schemas') for (const [n, v] of Object.entries(value as object)) yield* schemas(v, `${at}/${n}`, true);
    else if (!isSchema) yield* schemas(value, at, false);
  }
}

test('swagger-parser validates it; dereferenced, every response says what it is, with its schema, errors in the envelope', async () => {
  const api = await dereferenced(doc);
  assert.equal(api.openapi, '3.0.3');
  const envelope = api.components!.schemas!.ErrorEnvelope;
  for (const o of operationsOf(api)) {
    for (const [status, r] of Object.entries(o.op.responses)) {
      const response = r as OpenAPIV3.ResponseObject;
      assert.ok(response.description && response.description !== 'Default Response', `${nameOf(o)} ${status}: ${response.description}`);
      if (o.method === 'head' || status === '101') continue;
      const media = Object.entries(response.content ?? {});
      assert.ok(media.length > 0, `${nameOf(o)} ${status} has a body`);
      for (const [type, { schema }] of media) assert.ok(schema, `${nameOf(o)} ${status} ${type} has a schema`);
      if (status === 'default' || Number(status) >= 400) assert.deepEqual(response.content, { 'application/json': { schema: envelope } }, `${nameOf(o)} ${status}`);
    }
  }
});

test("redocly's recommended ruleset finds no error and no warning", () => {
  const dir = mkdtempSync(join(tmpdir(), 'vessel-openapi-'));
  try {
    const file = join(dir, 'openapi.json');
    writeFileSync(file, JSON.stringify(doc));
    // Its own directory, so that no redocly.yaml applies; no telemetry and no update check, since
    // tests run offline.
    const run = spawnSync(process.execPath, [require.resolve('@redocly/cli/bin/cli.js'), 'lint', '--extends=recommended', '--format=json', file], {
      cwd: dir,
      env: { ...process.env, REDOCLY_TELEMETRY: 'off', REDOCLY_SUPPRESS_UPDATE_NOTICE: 'true' },
      encoding: 'utf8',
      timeout: 120_000,
    });
    assert.ok(run.stdout.startsWith('{'), `redocly printed no report: ${run.stderr.slice(-2000)}`);
    const report = JSON.parse(run.stdout) as { totals: object; problems: Array<{ severity: string; ruleId: string; message: string; location: Array<{ pointer: string }> }> };
    assert.deepEqual(report.problems.map((p) => `${p.severity} ${p.ruleId}: ${p.message} (${p.location[0]?.pointer})`), []);
    assert.deepEqual(report.totals, { errors: 0, warnings: 0, ignored: 0 });
    assert.equal(run.status, 0);
  } finally {
    rmSync(dir, { recursive: true, force: true });
  }
});

test('every operation has its pinned camelCase operationId, a summary, and tags the document describes', () => {
  assert.deepEqual(Object.fromEntries(ops.map((o) => [nameOf(o), o.op.operationId])), OPERATION_IDS);
  for (const id of Object.values(OPERATION_IDS)) assert.match(id, /^[a-z]+[A-Z][A-Za-z]*$/);
  const described = new Map((doc.tags ?? []).map((t) => [t.name, t.description]));
  for (const o of ops) {
    assert.ok(o.op.summary, nameOf(o));
    assert.ok(o.op.tags?.length, nameOf(o));
    for (const tag of o.op.tags!) assert.ok(described.get(tag), `${nameOf(o)}: tag ${tag} is described`);
  }
});

test('servers has a {base_url} variable; the license is the package\'s', () => {
  assert.equal(doc.servers?.[0]?.url, '{base_url}');
  assert.match(String(doc.servers?.[0]?.variables?.base_url?.default), /^http:\/\//);
  const pkg = JSON.parse(readFileSync(require.resolve('../../../package.json'), 'utf8')) as { license: string };
  assert.equal(doc.info.license?.name, pkg.license);
});

test('every error response is the shared response of its kind: the envelope, the spec\'s meaning, its headers', () => {
  for (const o of ops) {
    const statuses = Object.keys(o.op.responses);
    for (const status of EVERY_OPERATION) assert.ok(statuses.includes(status), `${nameOf(o)} declares ${status}`);
    for (const status of statuses.filter((s) => s === 'default' || Number(s) >= 400)) {
      assert.match((o.op.responses[status] as OpenAPIV3.ReferenceObject).$ref ?? '', /^#\/components\/responses\//, `${nameOf(o)} ${status}`);
    }
    assert.equal(statuses.includes('422'), STARTS_A_COMMAND.includes(o.op.operationId!), `${nameOf(o)}: 422 where a command starts`);
    const body = o.op.requestBody === undefined ? undefined : (ref(o.op.requestBody) as OpenAPIV3.RequestBodyObject);
    const json = body !== undefined && 'application/json' in body.content;
    assert.equal(statuses.includes('413'), body !== undefined, `${nameOf(o)}: 413 where a body is taken`);
    assert.equal(statuses.includes('415'), json, `${nameOf(o)}: 415 where the body is JSON`);
  }
  const someOp = byId('getRuntime');
  for (const status of ['400', '401', '403', '404', '405', '409', '413', '415', '422', '429', '500', '503', '504', 'default']) {
    const response = responseOf(status === '413' || status === '415' ? byId('createRuntime') : status === '422' ? byId('execCommand') : someOp, status);
    if (SPEC_MEANINGS[status]) assert.ok(response.description.toLowerCase().includes(SPEC_MEANINGS[status]!), `${status}: ${response.description}`);
    const headers = Object.keys(response.headers ?? {});
    assert.ok(headers.includes('x-request-id'), status);
    const special = { 401: 'WWW-Authenticate', 405: 'Allow', 429: 'Retry-After', 503: 'Retry-After' }[status];
    if (special !== undefined) assert.ok(headers.includes(special), `${status} documents ${special}`);
  }
  assert.deepEqual(schemaOf('ErrorEnvelope').required, ['error']);
  assert.deepEqual((schemaOf('ErrorEnvelope').properties!.error as OpenAPIV3.SchemaObject).required, ['code', 'message']);
});

test('success responses carry x-request-id; raw bytes are binary, event streams text/event-stream', () => {
  for (const o of ops) {
    for (const [status, r] of Object.entries(o.op.responses).filter(([s]) => Number(s) < 400)) {
      assert.ok((ref(r) as OpenAPIV3.ResponseObject).headers?.['x-request-id'], `${nameOf(o)} ${status}: x-request-id`);
    }
  }
  const binary = { type: 'string', format: 'binary' };
  const content = (id: string, status = '200') => responseOf(byId(id), status).content!;
  const bodyOf = (id: string) => (ref(byId(id).op.requestBody!) as OpenAPIV3.RequestBodyObject).content;
  assert.deepEqual(content('readFile'), { 'application/octet-stream': { schema: binary } });
  assert.deepEqual(content('downloadArchive'), { 'application/x-tar': { schema: binary } });
  assert.ok(responseOf(byId('downloadArchive'), '200').headers?.['Content-Disposition']);
  assert.deepEqual(bodyOf('writeFile'), { 'application/octet-stream': { schema: binary } });
  assert.deepEqual(bodyOf('uploadArchive'), { 'application/x-tar': { schema: binary } });
  assert.deepEqual(bodyOf('writeProcessStdin'), { 'application/octet-stream': { schema: binary } });
  assert.deepEqual(Object.keys(content('execCommand')).sort(), ['application/json', 'text/event-stream']);
  assert.deepEqual(Object.keys(content('streamProcessOutput')), ['text/event-stream']);
  assert.ok(responseOf(byId('openTerminal'), '101').headers?.['Sec-WebSocket-Protocol']);
});

test('no schema is left empty or of unknown shape', () => {
  let count = 0;
  for (const [where, s] of schemas(doc)) {
    count++;
    if ('$ref' in s) continue;
    assert.ok(s.type !== undefined || s.allOf || s.anyOf || s.oneOf, `${where} has a type`);
    if (s.type === 'object') assert.ok(s.properties !== undefined || s.additionalProperties !== undefined, `${where}: an object says what it holds`);
  }
  assert.ok(count > 200, `walked ${count} schemas`);
});

test('integers say int32 or int64, and int32 only where every allowed value fits', () => {
  const INT32 = 2 ** 31;
  let count = 0;
  for (const [where, s] of schemas(doc)) {
    if (s.type !== 'integer') continue;
    count++;
    assert.ok(s.format === 'int32' || s.format === 'int64', `${where}: format ${s.format}`);
    if (s.format === 'int32') assert.ok((s.minimum ?? 0) >= -INT32 && (s.maximum ?? 0) < INT32, `${where}: int32 within its bounds`);
    if (s.maximum !== undefined && s.maximum >= INT32) assert.equal(s.format, 'int64', where);
  }
  assert.ok(count > 40, `walked ${count} integers`);
});

test('path parameters say what they take: an ID or a display name, as the spec has it', () => {
  const expected: Record<string, RegExp> = {
    runtime_id: /UUID or its display name/,
    secret_id: /UUID or its display name/,
    checkpoint_id: /UUID or its display name/,
    template_id: /UUID or its display name/,
    rule_id: /UUID/,
    process_id: /agent's id/,
    token_id: /token's UUID/,
  };
  for (const o of ops) {
    for (const name of [...o.path.matchAll(/\{([^}]+)\}/g)].map((m) => m[1]!)) {
      const p = parameterOf(o, name);
      assert.equal(p?.in, 'path', `${nameOf(o)} ${name}`);
      assert.match(p?.description ?? '', expected[name]!, `${nameOf(o)} ${name}`);
    }
  }
});

test("the spec's fields: its defaults, enums and bounds, as the server takes them", () => {
  const props = (s: OpenAPIV3.SchemaObject) => s.properties as Record<string, OpenAPIV3.SchemaObject>;
  // Checkpoints: kind is `full` and the default; the body is optional.
  const checkpoint = byId('createCheckpoint');
  assert.equal((ref(checkpoint.op.requestBody!) as OpenAPIV3.RequestBodyObject).required, false);
  assert.deepEqual([props(jsonBody(checkpoint)).kind!.enum, props(jsonBody(checkpoint)).kind!.default], [['full'], 'full']);
  for (const id of ['createRuntime', 'patchRuntime', 'execCommand', 'createSecret', 'createSecretInjectionRule', 'startProcess', 'signalProcess']) {
    assert.equal((ref(byId(id).op.requestBody!) as OpenAPIV3.RequestBodyObject).required, true, id);
  }
  // Exec: args default to [], output at most 4 MiB per stream.
  const exec = props(jsonBody(byId('execCommand')));
  assert.deepEqual(exec.args!.default, []);
  assert.equal(exec.max_output_bytes!.maximum, 4194304);
  assert.deepEqual(props(jsonBody(byId('createSecret'))).cache_ttl_secs!.default, 0);
  // Runtimes: the server refuses port 0; memory and vCPUs as the spec bounds them.
  const port = props(schemaOf('IngressSpec')).runtime_port!;
  assert.deepEqual([port.minimum, port.maximum], [1, 65535]);
  const resources = props(schemaOf('Resources'));
  assert.deepEqual([resources.vcpus!.minimum, resources.vcpus!.maximum], [1, 2147483647]);
  assert.deepEqual([props(resources.limits as OpenAPIV3.SchemaObject).memory_mib!.minimum, props(resources.limits as OpenAPIV3.SchemaObject).memory_mib!.format], [1, 'int64']);
  assert.equal(props(schemaOf('EgressPolicy')).allowed_hosts!.maxItems, 128);
  assert.equal(props(schemaOf('InjectionConfig')).headerName!.minLength, 1);
  assert.equal(props(schemaOf('InjectionConfig')).paramName!.minLength, 1);
  // Health: `data` is required.
  const health = responseOf(byId('getHealth'), '200').content!['application/json']!.schema as OpenAPIV3.SchemaObject;
  assert.deepEqual(health.required, ['data']);
  // Audits: a typed payload per kind, whose action is allow or deny.
  const egress = props(props(schemaOf('Audit')).payload!).egress!;
  for (const [kind, name] of [['tcp_connection', 'TcpConnectionAudit'], ['http_request', 'HttpRequestAudit'], ['icmp_drop', 'IcmpDropAudit']] as const) {
    assert.equal((props(egress)[kind] as OpenAPIV3.ReferenceObject).$ref, `#/components/schemas/${name}`);
    assert.deepEqual(props(schemaOf(name)).action!.enum, ['allow', 'deny'], name);
  }
});

test('every list that pages takes limit and page_token', () => {
  let lists = 0;
  for (const o of ops) {
    const ok = o.op.responses['200'] === undefined ? undefined : responseOf(o, '200').content?.['application/json']?.schema as OpenAPIV3.SchemaObject | undefined;
    if (ok?.properties?.next_page_token === undefined) continue;
    lists++;
    assert.equal(parameterOf(o, 'page_token')?.in, 'query', nameOf(o));
    assert.equal(parameterOf(o, 'limit')?.in, 'query', nameOf(o));
  }
  assert.equal(lists, 8, 'runtimes, secrets, both rule lists, checkpoints, templates, audits and tokens');
});
