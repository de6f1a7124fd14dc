/**
 * The served OpenAPI document (GET /openapi.json) beyond what each route's schema says: the
 * document's header (servers, license, tags), the error responses and headers that operations
 * share, declared once under `components`, and the pass that gives every operation its errors.
 * Routes declare their success responses and the errors only they send (common.ts).
 */
import type { FastifyDynamicSwaggerOptions } from '@fastify/swagger';
import type { OpenAPIV3 } from 'openapi-types';
import { ERROR_CODES, ERROR_STATUS, type ErrorCode } from '../core/errors.js';

const JSON_MEDIA = 'application/json';

/** Response headers, under the names they have on the wire. */
const HEADERS: Record<string, OpenAPIV3.HeaderObject> = {
  'x-request-id': {
    description: "The request's id, also in the service's log: the client's own x-request-id when it is 1 to 64 word characters, '.' or '-', else one the service made",
    schema: { type: 'string', maxLength: 64 },
  },
  'Retry-After': { description: 'Seconds to wait before trying again', schema: { type: 'integer', format: 'int32', minimum: 1 } },
  'WWW-Authenticate': { description: 'The authentication scheme the service takes', schema: { type: 'string', enum: ['Bearer'] } },
  Allow: { description: 'The methods the path takes, comma-separated', schema: { type: 'string' } },
};

interface ErrorKind {
  /** Its name under components.responses. */
  name: string;
  /** What it means: for the spec's kinds, the spec's words (runtime-api.md, "Errors"). */
  meaning: string;
  /** The codes it carries, where they are not the catalogue's codes of its status. */
  codes?: readonly ErrorCode[];
  /** Headers beyond x-request-id. */
  headers?: readonly string[];
}

/** Every error response, by status; 405, 413 and 415 are the HTTP refinements of invalid_argument. */
const ERROR_KINDS: Record<string, ErrorKind> = {
  400: { name: 'InvalidArgument', meaning: 'Validation or application error' },
  401: { name: 'Unauthenticated', meaning: 'Authentication failure: missing, malformed, or rejected bearer token', headers: ['WWW-Authenticate'] },
  403: { name: 'PermissionDenied', meaning: 'Authorization failure: the bearer token is not allowed to perform this action' },
  404: { name: 'NotFound', meaning: "Not found: the requested resource was not found (another tenant's objects are not found either)" },
  405: { name: 'MethodNotAllowed', meaning: 'The path does not take this method; Allow lists the methods it takes', codes: ['invalid_argument'], headers: ['Allow'] },
  409: { name: 'Conflict', meaning: 'Conflict: the request conflicts with current resource state (a name in use, a state or a quota that forbids it)' },
  413: { name: 'PayloadTooLarge', meaning: 'The request body is over its limit: 1 MiB of JSON, or the largest file the service takes', codes: ['invalid_argument'] },
  415: { name: 'UnsupportedMediaType', meaning: 'The request body is not application/json', codes: ['invalid_argument'] },
  422: { name: 'CommandFailed', meaning: 'The command could not be started: no such executable or working directory' },
  429: { name: 'RateLimited', meaning: 'Rate limit exceeded', headers: ['Retry-After'] },
  500: { name: 'Internal', meaning: 'Internal error: a bug; the message is always "internal error"' },
  503: {
    name: 'Unavailable',
    meaning: 'Upstream service is unavailable: host capacity, a VM that failed to boot or stopped answering; or the service is shutting down, with Retry-After',
    headers: ['Retry-After'],
  },
  504: { name: 'DeadlineExceeded', meaning: 'Upstream request timed out: the command ran past timeout_secs and was killed' },
  default: { name: 'Error', meaning: 'Generic error response', codes: ERROR_CODES },
};

/** What every operation can answer: the spec's kinds, an internal error, and 405 on its path. */
const EVERY_OPERATION = ['400', '401', '403', '404', '405', '409', '429', '500', '503', '504'];

const codesOf = (status: string, kind: ErrorKind): readonly ErrorCode[] => kind.codes ?? ERROR_CODES.filter((code) => String(ERROR_STATUS[code]) === status);

const headerRefs = (names: readonly string[]): Record<string, OpenAPIV3.ReferenceObject> =>
  Object.fromEntries(names.map((name) => [name, { $ref: `#/components/headers/${name}` }]));

function errorResponses(): Record<string, OpenAPIV3.ResponseObject> {
  return Object.fromEntries(
    Object.entries(ERROR_KINDS).map(([status, kind]) => [
      kind.name,
      {
        description: `${kind.meaning}. \`error.code\`: ${codesOf(status, kind).join(', ')}.`,
        headers: headerRefs(['x-request-id', ...(kind.headers ?? [])]),
        content: { [JSON_MEDIA]: { schema: { $ref: '#/components/schemas/ErrorEnvelope' } } },
      },
    ]),
  );
}

const errorRef = (status: string): OpenAPIV3.ReferenceObject => ({ $ref: `#/components/responses/${ERROR_KINDS[status]!.name}` });

/** Errors of a request body: over its limit, and for JSON, not JSON. */
function bodyErrors(body: OpenAPIV3.RequestBodyObject | undefined): string[] {
  if (body === undefined) return [];
  return JSON_MEDIA in body.content ? ['413', '415'] : ['413'];
}

const withRequestId = (response: OpenAPIV3.ResponseObject): OpenAPIV3.ResponseObject => ({ ...response, headers: { ...headerRefs(['x-request-id']), ...response.headers } });

/**
 * Gives the operation every error it can answer, each a reference to the shared response of its
 * kind, and the spec's `default`. A JSON body whose schema accepts null is optional: Fastify
 * validates an absent body as null.
 */
function completeOperation(op: OpenAPIV3.OperationObject): void {
  const declared = op.responses as Record<string, OpenAPIV3.ResponseObject>;
  const body = op.requestBody as OpenAPIV3.RequestBodyObject | undefined;
  const statuses = new Set([...Object.keys(declared), ...EVERY_OPERATION, ...bodyErrors(body)]);
  const responses: OpenAPIV3.ResponsesObject = {};
  for (const status of [...statuses].sort()) {
    if (Number(status) < 400) responses[status] = withRequestId(declared[status]!);
    else if (status in ERROR_KINDS) responses[status] = errorRef(status);
    else throw new Error(`${op.operationId}: status ${status} has no shared error response in openapi.ts`);
  }
  responses.default = errorRef('default');
  op.responses = responses;
  const jsonBody = body?.content[JSON_MEDIA]?.schema as OpenAPIV3.SchemaObject | undefined;
  if (body !== undefined && jsonBody?.nullable === true) body.required = false;
}

/**
 * Moves each parameter that several operations take, defined the same in all, to
 * components.parameters under its name, and refers to it there (runtime_id is in most).
 */
function shareParameters(doc: OpenAPIV3.Document, operations: OpenAPIV3.OperationObject[]): void {
  // By name: its definition as JSON and how many operations take it, or null once two differ.
  const seen = new Map<string, { json: string; uses: number } | null>();
  for (const op of operations) {
    for (const param of (op.parameters ?? []) as OpenAPIV3.ParameterObject[]) {
      const json = JSON.stringify(param);
      const known = seen.get(param.name);
      seen.set(param.name, known === undefined ? { json, uses: 1 } : known?.json === json ? { json, uses: known.uses + 1 } : null);
    }
  }
  const shared = new Map([...seen].flatMap(([name, s]) => (s !== null && s.uses > 1 ? [[name, JSON.parse(s.json) as OpenAPIV3.ParameterObject]] : [])));
  if (shared.size === 0) return;
  doc.components = { ...doc.components, parameters: Object.fromEntries(shared) };
  for (const op of operations) {
    op.parameters = (op.parameters as OpenAPIV3.ParameterObject[] | undefined)?.map((p) => (shared.has(p.name) ? { $ref: `#/components/parameters/${p.name}` } : p));
  }
}

const METHODS = ['get', 'put', 'post', 'delete', 'options', 'head', 'patch', 'trace'] as const;

function completeDocument(doc: OpenAPIV3.Document): OpenAPIV3.Document {
  const operations = Object.values(doc.paths).flatMap((item) => METHODS.flatMap((method) => item?.[method] ?? []));
  for (const op of operations) completeOperation(op);
  shareParameters(doc, operations);
  return doc;
}

const TAGS: OpenAPIV3.TagObject[] = [
  { name: 'health', description: 'Liveness of the service; no token needed' },
  { name: 'runtimes', description: 'MicroVM sandboxes: create, fork, patch, lifecycle, and buffered or streamed exec' },
  { name: 'processes', description: 'Background processes, their output and stdin, and terminals over WebSocket (docs/processes.md)' },
  { name: 'files', description: 'Files and directories inside a running runtime, as raw bytes or tar archives' },
  { name: 'secrets', description: 'Stored secret values, never returned, for injection into egress requests' },
  { name: 'secret-injection-rules', description: "Which egress requests of a runtime get which secret, as a header or query parameter" },
  { name: 'checkpoints', description: "Captures of a runtime's memory and disk to fork new runtimes from (beta)" },
  { name: 'templates', description: 'Environments you bring (a registry image or an image archive), built into a disk that runtimes start from (docs/templates.md)' },
  { name: 'audits', description: 'What the egress gateway allowed and denied' },
  { name: 'tokens', description: "Bearer tokens of every tenant: the operator's, with the admin scope" },
];

/** The @fastify/swagger options that make the document; `version` is the API's. */
export function openapiOptions(version: string): FastifyDynamicSwaggerOptions {
  return {
    openapi: {
      openapi: '3.0.3',
      info: {
        title: 'Vessel runtime API',
        version,
        description: 'MicroVM sandboxes: runtimes, exec, processes, files, egress, secrets, checkpoints.',
        license: { name: 'Apache-2.0', url: 'https://www.apache.org/licenses/LICENSE-2.0' },
      },
      servers: [
        {
          url: '{base_url}',
          description: 'A Vessel service',
          variables: { base_url: { default: 'http://127.0.0.1:8080', description: 'the scheme, host and port the service listens on' } },
        },
      ],
      tags: TAGS,
      components: { securitySchemes: { bearer: { type: 'http', scheme: 'bearer' } }, headers: HEADERS, responses: errorResponses() },
      security: [{ bearer: [] }],
    },
    refResolver: { buildLocalReference: (json, _base, _fragment, i) => (typeof json.$id === 'string' ? json.$id : `def-${i}`) },
    transformObject: (doc) => ('openapiObject' in doc ? completeDocument(doc.openapiObject as OpenAPIV3.Document) : doc.swaggerObject),
  };
}
