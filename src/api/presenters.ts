/**
 * Domain records to the response shapes of the spec. Each view returns the static type of its
 * schema in schemas.ts, so a field the schema gains, loses or retypes is a compile error here
 * rather than a response that drifts from the document.
 */
import type { Static } from '@sinclair/typebox';
import { ingressUrls, type IngressAddress } from '../core/ingress-urls.js';
import type { RuleView } from '../core/rules.js';
import type { ShownRuntime } from '../core/shown-runtimes.js';
import { exitCodeOf } from '../core/processes.js';
import type { BuildEvent } from '../core/build-log.js';
import type { Audit, Checkpoint, Page, ProcessState, Secret, Template, TemplateFailure, Token } from '../core/types.js';
import type * as Wire from './schemas.js';

/** `ingress`: where the service's ingress listener is reached, or null when it runs none. */
export const runtimeView = (r: ShownRuntime, ingress: IngressAddress | null): Static<typeof Wire.Runtime> => ({
  id: r.id,
  display_name: r.displayName,
  status: r.status,
  ...(r.statusMessage === null ? {} : { status_message: r.statusMessage }),
  egress_policy: r.egressPolicy,
  ingress_specs: r.ingressSpecs,
  resources: r.resources,
  ...(r.pendingResources === null ? {} : { pending_resources: r.pendingResources }),
  labels: r.labels,
  env_names: Object.keys(r.env),
  lifecycle: { idle_timeout_secs: r.lifecycle.idleTimeoutSecs, on_idle: r.lifecycle.onIdle, auto_delete_secs: r.lifecycle.autoDeleteSecs },
  ingress_urls: ingressUrls(r, ingress),
  ...(r.templateId === null ? {} : { template_id: r.templateId }),
  created_at: r.createdAt,
});

export const secretView = (s: Secret): Static<typeof Wire.Secret> => ({
  id: s.id,
  display_name: s.displayName,
  cache_ttl_secs: s.cacheTtlSecs,
  created_at: s.createdAt,
});

export const ruleView = (v: RuleView): Static<typeof Wire.SecretInjectionRule> => ({
  id: v.rule.id,
  credential_display_name: v.secretName,
  host_pattern: v.rule.hostPattern,
  path_pattern: v.rule.pathPattern,
  injection_config_json: JSON.stringify(v.rule.injection),
  runtime_display_name: v.runtimeName,
});

export const checkpointView = (c: Checkpoint): Static<typeof Wire.Checkpoint> => ({
  id: c.id,
  display_name: c.displayName,
  state: c.state,
  ...(c.stateMessage === null ? {} : { state_message: c.stateMessage }),
  resources: c.resources,
  system: c.tenantId === null,
  source_runtime_id: c.sourceRuntimeId,
  created_at: c.createdAt,
});

const failureView = (f: TemplateFailure | null) => (f === null ? null : { step: f.step, exit_code: f.exitCode, output_tail: f.outputTail });

/** A build log event as its SSE event name and data. */
export const buildEventView = (e: BuildEvent): { event: string; data: object } => {
  if (e.event === 'done') return { event: e.event, data: { state: e.state, failure: failureView(e.failure) } };
  const { event, ...data } = e;
  return { event, data };
};

export const templateView = (t: Template): Static<typeof Wire.Template> => ({
  id: t.id,
  display_name: t.displayName,
  state: t.state,
  source:
    t.source.kind === 'image' ? { image: t.source.image, registry_secret_id: t.source.registrySecretId }
    : t.source.kind === 'dockerfile' ? { dockerfile: t.source.dockerfile, context_bytes: t.source.contextBytes, build_args: t.source.buildArgs, egress_policy: t.source.egressPolicy }
    : { archive_bytes: t.source.archiveBytes },
  failure: failureView(t.failure),
  config: t.config,
  disk_bytes: t.diskBytes,
  created_at: t.createdAt,
  updated_at: t.updatedAt,
});

export const auditView = (a: Audit): Static<typeof Wire.Audit> => ({
  id: a.id,
  created_at: a.createdAt,
  runtime_id: a.runtimeId,
  category: a.category,
  payload: a.payload,
});

export const listView = <T, V>(page: Page<T>, view: (t: T) => V) => ({
  data: page.items.map(view),
  ...(page.nextPageToken === undefined ? {} : { next_page_token: page.nextPageToken }),
});

export const processView = (p: ProcessState): Static<typeof Wire.Process> => ({
  id: p.id,
  pid: p.pid,
  command: p.command,
  status: p.status,
  exit_code: p.status === 'running' ? null : exitCodeOf(p),
  signal: p.signal,
  pty: p.pty,
  stdin_open: p.stdinOpen,
  started_at: p.startedAt.toISOString(),
  ended_at: p.endedAt === null ? null : p.endedAt.toISOString(),
  stdout: p.stdout,
  stderr: p.stderr,
});

/** A token's record: never its value or its hash. */
export const tokenView = (t: Token): Static<typeof Wire.Token> => ({
  id: t.id,
  tenant: t.tenantId,
  name: t.name,
  scopes: t.scopes,
  created_at: t.createdAt,
  revoked_at: t.revokedAt,
});
