/** Bearer tokens: opaque random strings of which only the SHA-256 is stored. */
import { createHash, randomBytes, randomUUID } from 'node:crypto';
import { invalidArgument } from './errors.js';
import { checkDisplayName } from './names.js';
import type { Store } from './ports.js';
import { SCOPES, type Principal, type Scope, type Token } from './types.js';

export const ADMIN_TOKEN_ID = '00000000-0000-4000-8000-000000000001';
export const DEFAULT_TENANT = 'default';

export const hashToken = (token: string): string => createHash('sha256').update(token).digest('hex');
export const generateTokenValue = (): string => `vsl_${randomBytes(32).toString('base64url')}`;

export function parseScopes(list: string): Scope[] {
  const scopes = list.split(',').map((s) => s.trim()).filter(Boolean);
  for (const s of scopes) {
    if (!(SCOPES as readonly string[]).includes(s)) throw invalidArgument(`unknown scope '${s}'; known scopes: ${SCOPES.join(', ')}`);
  }
  if (scopes.length === 0) throw invalidArgument('at least one scope is required');
  return [...new Set(scopes)] as Scope[];
}

export const hasScope = (p: Principal, scope: Scope): boolean => p.scopes.has('admin') || p.scopes.has(scope);

/**
 * How long an authenticated token is trusted without asking the store again. A revocation made
 * through this process applies at once; one made by another process (the CLI) within this time.
 */
export const TOKEN_CACHE_MS = 2000;

export class TokenService {
  /**
   * Keyed by the token as presented, so that a hit costs no hash: the value already passes
   * through memory with every request, and only its hash is ever stored.
   */
  readonly #cache = new Map<string, { principal: Principal; until: number }>();

  constructor(private readonly store: Store) {}

  /** Returns the token value once; it cannot be recovered later. */
  async create(tenantId: string, scopes: Scope[], name = 'token'): Promise<{ token: string; record: Token }> {
    checkDisplayName(tenantId, 'tenant');
    const token = generateTokenValue();
    const record: Token = {
      id: randomUUID(),
      tenantId,
      name,
      hash: hashToken(token),
      scopes,
      createdAt: new Date().toISOString(),
      revokedAt: null,
    };
    await this.store.tokens.insert(record);
    return { token, record };
  }

  /** The bootstrap admin token has a fixed id so that changing VESSEL_ADMIN_TOKEN replaces it. */
  async installAdmin(token: string): Promise<void> {
    await this.store.tokens.put({
      id: ADMIN_TOKEN_ID,
      tenantId: DEFAULT_TENANT,
      name: 'bootstrap-admin',
      hash: hashToken(token),
      scopes: ['admin'],
      createdAt: new Date().toISOString(),
      revokedAt: null,
    });
  }

  list = (): Promise<Token[]> => this.store.tokens.list();

  async revoke(id: string): Promise<boolean> {
    for (const [token, entry] of this.#cache) if (entry.principal.tokenId === id) this.#cache.delete(token);
    return this.store.tokens.revoke(id, new Date().toISOString());
  }

  /** The principal of a token authenticated within TOKEN_CACHE_MS, without a store read; else undefined. */
  cachedPrincipal(token: string): Principal | undefined {
    const cached = this.#cache.get(token);
    return cached !== undefined && cached.until > Date.now() ? cached.principal : undefined;
  }

  async authenticate(token: string): Promise<Principal | null> {
    const now = Date.now();
    const cached = this.#cache.get(token);
    if (cached !== undefined && cached.until > now) return cached.principal;
    const record = await this.store.tokens.findByHash(hashToken(token));
    if (record === undefined || record.revokedAt !== null) {
      this.#cache.delete(token);
      return null;
    }
    const principal: Principal = { tokenId: record.id, tenantId: record.tenantId, scopes: new Set(record.scopes) };
    if (this.#cache.size > 10_000) this.#cache.clear();
    this.#cache.set(token, { principal, until: now + TOKEN_CACHE_MS });
    return principal;
  }
}
