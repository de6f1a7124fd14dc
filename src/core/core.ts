/** The core's one public entry: the services, wired over the ports they need. */
import { AuditService } from './audits.js';
import { CheckpointService } from './checkpoints.js';
import type { Store, VmDriver } from './ports.js';
import { RuleService } from './rules.js';
import { RuntimeService, type Logger } from './runtimes.js';
import type { SecretBox } from './secret-box.js';
import { SecretService } from './secrets.js';
import { TokenService } from './tokens.js';
import type { Runtime } from './types.js';

export interface CorePorts {
  store: Store;
  driver: VmDriver;
  secretBox: SecretBox;
  log: Logger;
}

export class Core {
  readonly tokens: TokenService;
  readonly runtimes: RuntimeService;
  readonly secrets: SecretService;
  readonly rules: RuleService;
  readonly checkpoints: CheckpointService;
  readonly audits: AuditService;
  readonly #policyListeners: Array<(rt: Runtime) => void> = [];

  constructor(private readonly ports: CorePorts) {
    const { store, driver, secretBox, log } = ports;
    this.tokens = new TokenService(store);
    this.runtimes = new RuntimeService(store, driver, log);
    this.secrets = new SecretService(store, secretBox);
    this.rules = new RuleService(store, this.runtimes, this.secrets);
    this.checkpoints = new CheckpointService(store, this.runtimes, driver, log);
    this.audits = new AuditService(store);
    this.runtimes.observe({ policyChanged: (rt) => this.#policyListeners.forEach((l) => l(rt)) });
    this.runtimes.useSystemCheckpoints((r) => this.checkpoints.systemFor(r));
  }

  /** The egress gateway subscribes here so a PATCHed policy applies to the next connection. */
  onPolicyChange(listener: (rt: Runtime) => void): void {
    this.#policyListeners.push(listener);
  }

  /** Brings the store in line with reality after a (possibly unclean) restart. */
  async reconcile(): Promise<{ adopted: number; crashed: number }> {
    const result = await this.runtimes.reconcile();
    await this.checkpoints.reconcile();
    return result;
  }

  async close(): Promise<void> {
    this.runtimes.stopIdleSuspension();
    await this.checkpoints.settled();
    await this.ports.driver.close();
    this.ports.store.close();
  }
}
