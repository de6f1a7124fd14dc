/** Secret injection rules, always owned by one runtime. */
import { randomUUID } from 'node:crypto';
import { notFound } from './errors.js';
import { normalizeHostPattern } from './host-pattern.js';
import { checkInjectionConfig } from './injection.js';
import { normalizePathPattern } from './path-glob.js';
import type { Store } from './ports.js';
import type { RuntimeService } from './runtimes.js';
import type { SecretService } from './secrets.js';
import type { InjectionConfig, InjectionRule, Page, PageRequest } from './types.js';

export interface RuleCreateInput {
  host: string;
  injection: InjectionConfig;
  path?: string | null;
  secret: string;
}

/** A rule with the names the API shows beside it. */
export interface RuleView {
  rule: InjectionRule;
  secretName: string;
  runtimeName: string;
}

export class RuleService {
  readonly #listeners: Array<(runtimeId: string) => Promise<void>> = [];

  constructor(
    private readonly store: Store,
    private readonly runtimes: RuntimeService,
    private readonly secrets: SecretService,
  ) {}

  /** The egress gateway listens so that a rule applies to the next request once its change is answered. */
  onChange(listener: (runtimeId: string) => Promise<void>): void {
    this.#listeners.push(listener);
  }

  async create(tenantId: string, runtimeRef: string, input: RuleCreateInput): Promise<RuleView> {
    const runtime = await this.runtimes.get(tenantId, runtimeRef);
    const secret = await this.secrets.get(tenantId, input.secret);
    const rule: InjectionRule = {
      id: randomUUID(),
      tenantId,
      runtimeId: runtime.id,
      secretId: secret.id,
      hostPattern: normalizeHostPattern(input.host),
      pathPattern: normalizePathPattern(input.path),
      injection: checkInjectionConfig(input.injection),
      createdAt: new Date().toISOString(),
    };
    await this.store.rules.insert(rule);
    await this.#changed(runtime.id);
    return { rule, secretName: secret.displayName, runtimeName: runtime.displayName };
  }

  async get(tenantId: string, ruleId: string, runtimeRef?: string): Promise<RuleView> {
    const rule = await this.store.rules.find(tenantId, ruleId);
    if (rule === undefined) throw notFound('secret injection rule', ruleId);
    if (runtimeRef !== undefined) {
      const runtime = await this.runtimes.get(tenantId, runtimeRef);
      if (rule.runtimeId !== runtime.id) throw notFound('secret injection rule', ruleId);
    }
    return this.#view(rule);
  }

  async list(tenantId: string, page: PageRequest, runtimeRef?: string): Promise<Page<RuleView>> {
    const runtimeId = runtimeRef === undefined ? undefined : (await this.runtimes.get(tenantId, runtimeRef)).id;
    const rules = await this.store.rules.list(tenantId, page, runtimeId);
    return { items: await Promise.all(rules.items.map((r) => this.#view(r))), nextPageToken: rules.nextPageToken };
  }

  async delete(tenantId: string, ruleId: string, runtimeRef?: string): Promise<void> {
    const { rule } = await this.get(tenantId, ruleId, runtimeRef);
    await this.store.rules.delete(tenantId, rule.id);
    await this.#changed(rule.runtimeId);
  }

  async #view(rule: InjectionRule): Promise<RuleView> {
    const [secret, runtime] = await Promise.all([
      this.store.secrets.find(rule.tenantId, rule.secretId),
      this.store.runtimes.find(rule.tenantId, rule.runtimeId),
    ]);
    return { rule, secretName: secret?.displayName ?? '', runtimeName: runtime?.displayName ?? '' };
  }

  async #changed(runtimeId: string): Promise<void> {
    for (const l of this.#listeners) await l(runtimeId);
  }
}
