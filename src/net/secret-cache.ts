/**
 * Decrypted secret values for injection, kept no longer than each secret's cache_ttl_secs
 * (0: fetched from the store for every request). Values live only here, in memory.
 */
export type RevealSecret = (tenantId: string, secretId: string) => Promise<{ value: string; cacheTtlSecs: number } | null>;

export class SecretCache {
  readonly #values = new Map<string, { value: string; expires: number }>();

  constructor(private readonly reveal: RevealSecret) {}

  async get(tenantId: string, secretId: string): Promise<string | null> {
    const hit = this.#values.get(secretId);
    if (hit !== undefined && hit.expires > Date.now()) return hit.value;
    this.#values.delete(secretId);
    const found = await this.reveal(tenantId, secretId);
    if (found === null) return null;
    if (found.cacheTtlSecs > 0) this.#values.set(secretId, { value: found.value, expires: Date.now() + found.cacheTtlSecs * 1000 });
    return found.value;
  }

  clear(): void {
    this.#values.clear();
  }
}
