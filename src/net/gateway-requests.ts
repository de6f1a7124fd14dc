/**
 * What the gateway's listeners may ask of the service, checked here before the core hears it. The
 * listeners' process parses what guests send, so it is treated as one that may have been taken
 * over: it gets a secret only for a rule of a runtime it serves, records audits only for the
 * runtimes it serves and as their own tenant's, and every field is of its type and size.
 */
import type { GatewayHooks } from '../core/ports.js';
import type { EgressAuditDetails, EgressAuditKind } from '../core/types.js';
import type { Attachment } from './gateway-listeners.js';

export type ListenerMethod = 'revealSecret' | 'audit' | 'activity' | 'ingressTarget' | 'dnsOverride';

export interface ListenerRequestContext {
  attached: ReadonlyMap<string, Attachment>;
  hooks: GatewayHooks;
  dnsOverride: ((name: string) => string[] | undefined) | undefined;
}

const AUDIT_KINDS: ReadonlySet<string> = new Set<EgressAuditKind>(['tcp_connection', 'http_request', 'icmp_drop']);
/** An id, a tenant or a host name as the listeners send them: short, and text. */
const MAX_NAME_CHARS = 256;
/** An audit's detail, serialized: its text fields are cut to MAX_AUDIT_FIELD_CHARS already (core/egress.ts). */
const MAX_AUDIT_DETAIL_CHARS = 64 * 1024;

class RefusedRequest extends Error {}

const name = (value: unknown, what: string): string => {
  if (typeof value !== 'string' || value.length === 0 || value.length > MAX_NAME_CHARS) throw new RefusedRequest(`${what} must be a short string`);
  return value;
};

const record = (value: unknown): Record<string, unknown> => {
  if (typeof value !== 'object' || value === null || Array.isArray(value)) throw new RefusedRequest('the arguments must be an object');
  return value as Record<string, unknown>;
};

function servedRuntime(ctx: ListenerRequestContext, runtimeId: unknown): Attachment {
  const attachment = ctx.attached.get(name(runtimeId, 'runtimeId'));
  if (attachment === undefined) throw new RefusedRequest('the gateway serves no such runtime');
  return attachment;
}

/** The most audits one `audits` note may carry (the listeners send what one event-loop turn made). */
export const MAX_AUDIT_BATCH = 256;

/**
 * A batch of audits from the listeners: each one checked as an `audit` call is, and recorded when
 * it passes; the others are dropped. Returns how many were refused.
 */
export function checkedAuditBatch(raw: unknown, ctx: ListenerRequestContext): number {
  if (!Array.isArray(raw) || raw.length > MAX_AUDIT_BATCH) throw new RefusedRequest(`audits come as an array of at most ${MAX_AUDIT_BATCH}`);
  let refused = 0;
  for (const audit of raw) {
    try {
      checkedListenerCall('audit', audit, ctx);
    } catch {
      refused++;
    }
  }
  return refused;
}

/** Answers one call of the listeners, or throws (the listeners see the error's message) when it is not theirs to make. */
export function checkedListenerCall(method: ListenerMethod, raw: unknown, ctx: ListenerRequestContext): unknown {
  const args = record(raw);
  switch (method) {
    case 'revealSecret': {
      const tenantId = name(args.tenantId, 'tenantId');
      const secretId = name(args.secretId, 'secretId');
      const used = [...ctx.attached.values()].some(({ subject }) => subject.tenantId === tenantId && subject.rules.some((rule) => rule.secretId === secretId));
      if (!used) throw new RefusedRequest('no rule of a runtime the gateway serves uses that secret');
      return ctx.hooks.revealSecret(tenantId, secretId);
    }
    case 'audit': {
      const { subject } = servedRuntime(ctx, args.runtimeId);
      if (args.tenantId !== subject.tenantId) throw new RefusedRequest("an audit is recorded as its runtime's own tenant's");
      if (typeof args.kind !== 'string' || !AUDIT_KINDS.has(args.kind)) throw new RefusedRequest('no such kind of audit');
      const detail = record(args.detail);
      if (JSON.stringify(detail).length > MAX_AUDIT_DETAIL_CHARS) throw new RefusedRequest('the audit is too large');
      ctx.hooks.audit(subject.runtimeId, subject.tenantId, args.kind as EgressAuditKind, detail as unknown as EgressAuditDetails[EgressAuditKind]);
      return null;
    }
    case 'activity':
      ctx.hooks.activity(servedRuntime(ctx, args.runtimeId).subject.runtimeId);
      return null;
    case 'ingressTarget': {
      const port = args.port;
      if (typeof port !== 'number' || !Number.isInteger(port) || port < 1 || port > 65_535) throw new RefusedRequest('port must be a TCP port');
      return ctx.hooks.ingressTarget(name(args.runtimeId, 'runtimeId'), port);
    }
    case 'dnsOverride':
      return ctx.dnsOverride?.(name(args.name, 'name')) ?? null;
  }
}
