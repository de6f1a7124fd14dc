/** The SDK's entry point: one client of one service, with a token. */
import { Audits } from './audits.js';
import { Checkpoints } from './checkpoints.js';
import { AllRules } from './rules.js';
import { Runtimes } from './runtimes.js';
import { Secrets } from './secrets.js';
import { Tokens } from './tokens.js';
import { Transport, type VesselOptions } from './transport.js';

export class Vessel {
  readonly runtimes: Runtimes;
  readonly checkpoints: Checkpoints;
  readonly secrets: Secrets;
  /** Every secret injection rule of the tenant; a runtime's own are `runtime.rules`. */
  readonly rules: AllRules;
  readonly audits: Audits;
  /** Every tenant's tokens: needs a token with the admin scope. */
  readonly tokens: Tokens;

  constructor(options: VesselOptions) {
    const transport = new Transport(options);
    this.checkpoints = new Checkpoints(transport);
    this.runtimes = new Runtimes(transport, this.checkpoints);
    this.secrets = new Secrets(transport);
    this.rules = new AllRules(transport);
    this.audits = new Audits(transport);
    this.tokens = new Tokens(transport);
  }
}
