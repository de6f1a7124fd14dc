/**
 * The served OpenAPI document in tests: its operations, swagger-parser's validation, and a check
 * that a real response is one the document declares, with the headers and body it says.
 */
import assert from 'node:assert/strict';
import SwaggerParser from '@apidevtools/swagger-parser';
import { Ajv, type ValidateFunction } from 'ajv';
import addFormats from 'ajv-formats';
import type { OpenAPIV3 } from 'openapi-types';
import type { ApiHarness } from './api-harness.js';

export const METHODS = ['get', 'put', 'post', 'delete', 'patch', 'head'] as const;

export interface Operation {
  method: (typeof METHODS)[number];
  path: string;
  op: OpenAPIV3.OperationObject;
}

/** `GET /v1/runtimes/{runtime_id}`, as the contract test lists operations. */
export const nameOf = (o: Pick<Operation, 'method' | 'path'>): string => `${o.method.toUpperCase()} ${o.path}`;

export async function servedDocument(h: ApiHarness): Promise<OpenAPIV3.Document> {
  const r = await h.call('GET', '/openapi.json', undefined, null);
  assert.equal(r.status, 200);
  return r.body as OpenAPIV3.Document;
}

export function operationsOf(doc: OpenAPIV3.Document): Operation[] {
  return Object.entries(doc.paths).flatMap(([path, item]) => METHODS.flatMap((method) => (item?.[method] === undefined ? [] : [{ method, path, op: item[method]! }])));
}

/** Validated against the OpenAPI 3.0 schema and its rules, with every $ref replaced by what it names. */
export async function dereferenced(doc: OpenAPIV3.Document): Promise<OpenAPIV3.Document> {
  return (await SwaggerParser.validate(structuredClone(doc) as never)) as OpenAPIV3.Document;
}

/** The header every response carries; the others, with the statuses that carry them. */
const ALWAYS = 'x-request-id';
const HEADER_OF_STATUS: Record<number, string> = { 401: 'www-authenticate', 405: 'allow', 429: 'retry-after' };

export interface ObservedResponse {
  statusCode: number;
  headers: Record<string, unknown>;
  body: string;
}

/** Checks real responses against a dereferenced document, and counts the operations they answered. */
export class ResponseChecker {
  readonly #ajv = new Ajv({ strict: false, allErrors: true });
  readonly #validators = new Map<object, ValidateFunction>();
  readonly #routes: Array<{ re: RegExp; method: string; operation: Operation }>;
  readonly answered = new Set<string>();

  constructor(api: OpenAPIV3.Document) {
    (addFormats as unknown as (a: Ajv) => void)(this.#ajv);
    this.#ajv.addFormat('binary', true);
    this.#routes = operationsOf(api).map((operation) => ({
      re: new RegExp(`^${operation.path.replace(/\{[^}]+\}/g, '[^/]+')}$`),
      method: operation.method.toUpperCase(),
      operation,
    }));
  }

  /** The operation `method url` is; for a method the path does not take (405), any of the path's. */
  operationFor(method: string | null, url: string): Operation {
    const path = url.split('?', 1)[0]!;
    const found = this.#routes.find((r) => (method === null || r.method === method) && r.re.test(path));
    assert.ok(found, `no operation in the document for ${method ?? 'any method'} ${path}`);
    return found.operation;
  }

  /** Asserts that `res`, the answer to `method url`, is as the document declares it. */
  check(method: string, url: string, res: ObservedResponse): void {
    const operation = this.operationFor(res.statusCode === 405 ? null : method, url);
    const where = `${method} ${url} → ${res.statusCode}`;
    const responses = operation.op.responses as Record<string, OpenAPIV3.ResponseObject>;
    const declared = responses[String(res.statusCode)] ?? responses.default!;
    // Only unimplemented (501), which no operation sends yet, is left to `default`.
    if (res.statusCode !== 501) assert.ok(responses[String(res.statusCode)], `${where}: the status is declared`);
    assert.ok(declared.headers?.[ALWAYS] && res.headers[ALWAYS], `${where}: ${ALWAYS} declared and sent`);
    const special = HEADER_OF_STATUS[res.statusCode];
    if (special !== undefined) {
      assert.ok(Object.keys(declared.headers ?? {}).some((h) => h.toLowerCase() === special), `${where}: ${special} declared`);
      assert.ok(res.headers[special], `${where}: ${special} sent`);
    }
    if (res.statusCode !== 405) this.answered.add(nameOf(operation));
    if (method === 'HEAD' || res.statusCode === 101) return;
    const contentType = res.headers['content-type'];
    const type = (typeof contentType === 'string' ? contentType : '').split(';', 1)[0]!;
    const media = declared.content?.[type];
    assert.ok(media?.schema, `${where}: ${type} is declared`);
    if (type === 'text/event-stream') return this.#checkEvents(where, media.schema as object, res.body);
    if (type !== 'application/json') return;
    const validate = this.#validatorOf(media.schema as object);
    const body: unknown = JSON.parse(res.body);
    assert.ok(validate(body), `${where}: ${this.#ajv.errorsText(validate.errors)} in ${res.body.slice(0, 500)}`);
  }

  /** Each event, as its fields (the data parsed), is what the event stream's schema allows. */
  #checkEvents(where: string, schema: object, body: string): void {
    const blocks = body.split('\n\n').filter((block) => /^(event|data):/m.test(block));
    assert.ok(blocks.length > 0, `${where}: events sent`);
    const validate = this.#validatorOf(schema);
    for (const block of blocks) {
      const field = (name: string) => [...block.matchAll(new RegExp(`^${name}: (.*)$`, 'gm'))].map((m) => m[1]!);
      const [id] = field('id');
      const event = { event: field('event')[0] ?? 'message', data: JSON.parse(field('data').join('\n')), ...(id === undefined ? {} : { id }) };
      assert.ok(validate(event), `${where}: event ${event.event}: ${this.#ajv.errorsText(validate.errors)} in ${block.slice(0, 500)}`);
    }
  }

  #validatorOf(schema: object): ValidateFunction {
    let validate = this.#validators.get(schema);
    if (validate === undefined) this.#validators.set(schema, (validate = this.#ajv.compile(schema)));
    return validate;
  }
}
