/**
 * Secret injection rules: a runtime's own (create, list, get, delete) and every rule of the
 * tenant (list, delete by id).
 */
import type { RuleCreateRequest, SecretInjectionRule } from './api-types.js';
import { Paged, pageQuery, type ListOptions } from './paging.js';
import type { CallOptions, Transport } from './transport.js';

export class RuntimeRules {
  constructor(
    private readonly t: Transport,
    private readonly runtimeId: string,
  ) {}

  /** Injects a secret into matching outbound requests of this runtime. The value is never returned. */
  create(body: RuleCreateRequest, options?: CallOptions): Promise<SecretInjectionRule> {
    const path = { runtime_id: this.runtimeId };
    return this.t.call('not-idempotent', options, (signal) => this.t.api.POST('/v1/runtimes/{runtime_id}/secret-injection-rules', { params: { path }, body, signal }));
  }

  list(options: ListOptions = {}): Paged<SecretInjectionRule> {
    const path = { runtime_id: this.runtimeId };
    return new Paged((pageToken) =>
      this.t.body('idempotent', options, (signal) =>
        this.t.api.GET('/v1/runtimes/{runtime_id}/secret-injection-rules', { params: { path, query: pageQuery(options, pageToken) }, signal }),
      ),
    );
  }

  get(ruleId: string, options?: CallOptions): Promise<SecretInjectionRule> {
    const path = { runtime_id: this.runtimeId, rule_id: ruleId };
    return this.t.call('idempotent', options, (signal) => this.t.api.GET('/v1/runtimes/{runtime_id}/secret-injection-rules/{rule_id}', { params: { path }, signal }));
  }

  async delete(ruleId: string, options?: CallOptions): Promise<void> {
    const path = { runtime_id: this.runtimeId, rule_id: ruleId };
    await this.t.call('idempotent', options, (signal) => this.t.api.DELETE('/v1/runtimes/{runtime_id}/secret-injection-rules/{rule_id}', { params: { path }, signal }));
  }
}

export class AllRules {
  constructor(private readonly t: Transport) {}

  list(options: ListOptions = {}): Paged<SecretInjectionRule> {
    return new Paged((pageToken) =>
      this.t.body('idempotent', options, (signal) => this.t.api.GET('/v1/secret-injection-rules', { params: { query: pageQuery(options, pageToken) }, signal })),
    );
  }

  async delete(ruleId: string, options?: CallOptions): Promise<void> {
    await this.t.call('idempotent', options, (signal) => this.t.api.DELETE('/v1/secret-injection-rules/{rule_id}', { params: { path: { rule_id: ruleId } }, signal }));
  }
}
