/**
 * Named secrets, sealed at rest. The plaintext leaves this module only for a gateway: this
 * process's own (reveal), or a fleet's VM host's, through an API node (revealForNode).
 */
import { randomUUID } from 'node:crypto';
import { VesselError, failedPrecondition, internal, invalidArgument, notFound } from './errors.js';
import { checkDisplayName } from './names.js';
import type { RevealedSecret, Store } from './ports.js';
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
    /** Null in a process that holds no master key: an enrolled VM host, which has secrets unsealed by an API node. */
    private readonly box: SecretBox | null,
  ) {}

  #box(): SecretBox {
    if (this.box === null) throw internal('this process holds no master key: secrets are made and opened by API nodes');
    return this.box;
  }

  async create(tenantId: string, input: SecretCreateInput): Promise<Secret> {
    const name = checkDisplayName(input.name, 'name');
    const bytes = Buffer.byteLength(input.value, 'utf8');
    // The messages name the rule broken, never the value.
    if (bytes < 1 || bytes > MAX_SECRET_BYTES) throw invalidArgument(`value must be 1 to ${MAX_SECRET_BYTES} bytes`);
    if (/[\r\n\0]/.test(input.value)) throw invalidArgument('value must not contain CR, LF or NUL');
    const id = randomUUID();
    const secret: Secret = { id, tenantId, displayName: name, cacheTtlSecs: input.cache_ttl_secs ?? 0, createdAt: new Date().toISOString() };
    await this.store.secrets.insert({ ...secret, sealedValue: this.#box().seal(input.value, id) });
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

  /** The plaintext of the tenant's secret `secretId` (an id, never a name), opened with the master key; null when it is gone. */
  async reveal(tenantId: string, secretId: string): Promise<RevealedSecret | null> {
    const box = this.#box();
    const sealed = await this.store.secrets.findSealed(tenantId, secretId);
    return sealed === undefined ? null : { value: box.open(sealed.sealedValue, sealed.id), cacheTtlSecs: sealed.cacheTtlSecs };
  }

  /**
   * The plaintext for a fleet's VM host `node` (docs/scaling.md, "Secrets on VM hosts"): only while
   * a rule of a runtime the store places on that host names the secret, so a host can have opened
   * no secret but those its own runtimes inject. Asked before anything of the secret is read: the
   * refusal is the same whether or not the secret exists.
   */
  async revealForNode(node: string, tenantId: string, secretId: string): Promise<RevealedSecret | null> {
    if (!(await this.store.rules.namesSecretOnNode(tenantId, secretId, node))) {
      throw new VesselError('permission_denied', `no injection rule of a runtime on VM host '${node}' names secret '${secretId}' of tenant '${tenantId}'`);
    }
    return this.reveal(tenantId, secretId);
  }
}
