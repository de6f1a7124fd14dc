/** Named secrets, sealed at rest. The plaintext leaves this module only through reveal(), for the gateway. */
import { randomUUID } from 'node:crypto';
import { failedPrecondition, invalidArgument, notFound } from './errors.js';
import { checkDisplayName } from './names.js';
import type { Store } from './ports.js';
import type { SecretBox } from './secret-box.js';
import type { Page, PageRequest, Secret } from './types.js';

export const MAX_SECRET_BYTES = 64 * 1024;

export interface SecretCreateInput {
  name: string;
  value: string;
  cache_ttl_secs?: number;
}

export class SecretService {
  constructor(
    private readonly store: Store,
    private readonly box: SecretBox,
  ) {}

  async create(tenantId: string, input: SecretCreateInput): Promise<Secret> {
    const name = checkDisplayName(input.name, 'name');
    const bytes = Buffer.byteLength(input.value, 'utf8');
    // The messages name the rule broken, never the value.
    if (bytes < 1 || bytes > MAX_SECRET_BYTES) throw invalidArgument(`value must be 1 to ${MAX_SECRET_BYTES} bytes`);
    if (/[\r\n\0]/.test(input.value)) throw invalidArgument('value must not contain CR, LF or NUL');
    const id = randomUUID();
    const secret: Secret = {
      id,
      tenantId,
      displayName: name,
      cacheTtlSecs: input.cache_ttl_secs ?? 0,
      sealedValue: this.box.seal(input.value, id),
      createdAt: new Date().toISOString(),
    };
    await this.store.secrets.insert(secret);
    return secret;
  }

  async get(tenantId: string, ref: string): Promise<Secret> {
    const s = await this.store.secrets.find(tenantId, ref);
    if (s === undefined) throw notFound('secret', ref);
    return s;
  }

  list = (tenantId: string, page: PageRequest): Promise<Page<Secret>> => this.store.secrets.list(tenantId, page);

  async delete(tenantId: string, ref: string): Promise<void> {
    const s = await this.get(tenantId, ref);
    const users = await this.store.rules.countForSecret(s.id);
    if (users > 0) throw failedPrecondition(`secret '${s.displayName}' is used by ${users} injection rule(s); delete them first`);
    await this.store.secrets.delete(tenantId, s.id);
  }

  reveal = (secret: Secret): string => this.box.open(secret.sealedValue, secret.id);
}
