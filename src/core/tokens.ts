/** Bearer tokens: opaque random strings of which only the SHA-256 is stored. */
import { createHash, randomBytes, randomUUID, timingSafeEqual } from 'node:crypto';
import { VesselError, failedPrecondition, invalidArgument } from './errors.js';
import { checkDisplayName, isUuid } from './names.js';
import type { Store, TokenFilter } from './ports.js';
import { SCOPES, type Page, type Principal, type Scope, type Token } from './types.js';

export const ADMIN_TOKEN_ID = '00000000-0000-4000-8000-000000000001';
export const DEFAULT_TENANT = 'default';

export const hashToken = (token: string): string => createHash('sha256').update(token).digest('hex');
export const generateTokenValue = (): string => `vsl_${randomBytes(32).toString('base64url')}`;

/**
 * What generateTokenValue makes, and has made since the first release: `vsl_` and 32 bytes in
 * base64url, 43 characters whose last holds the final 4 bits and two zero bits (so it is one of 16).
 */
const TOKEN_SHAPE = /^vsl_[A-Za-z0-9_-]{42}[AEIMQUYcgkosw048]$/;

export const parseScopes = (list: string): Scope[] => checkScopes(list.split(',').map((s) => s.trim()).filter(Boolean));

/** Known scopes, at least one, each once. */
export function checkScopes(scopes: readonly string[]): Scope[] {
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
  /** Counts revocations made through this process, so that a lookup can tell one overlapped it. */
  #revocations = 0;
  /** The SHA-256 of the bootstrap admin token installed here, which need not have our shape. */
  #adminDigest: Buffer | undefined;

  constructor(private readonly store: Store) {}

  /** Returns the token value once; it cannot be recovered later. */
  async create(tenantId: string, scopes: readonly string[], name = 'token'): Promise<{ token: string; record: Token }> {
    checkDisplayName(tenantId, 'tenant');
    checkDisplayName(name, 'name');
    const token = generateTokenValue();
    const record: Token = {
      id: randomUUID(),
      tenantId,
      name,
      hash: hashToken(token),
      scopes: checkScopes(scopes),
      createdAt: new Date().toISOString(),
      revokedAt: null,
    };
    await this.store.tokens.insert(record);
    return { token, record };
  }

  /** The bootstrap admin token has a fixed id so that changing VESSEL_ADMIN_TOKEN replaces it. */
  async installAdmin(token: string): Promise<void> {
    this.#adminDigest = createHash('sha256').update(token).digest();
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

  page = (filter: TokenFilter): Promise<Page<Token>> => this.store.tokens.page(filter);

  /** By id only: names are labels, not unique. Anything but a known UUID is not found. */
  async get(id: string): Promise<Token> {
    const token = isUuid(id) ? await this.store.tokens.findById(id.toLowerCase()) : undefined;
    // The id is not echoed: a token's value pasted where its id goes must not come back in an error.
    if (token === undefined) throw new VesselError('not_found', 'no token has this id');
    return token;
  }

  /**
   * Revocation through the API, by `caller`. The bootstrap admin token is refused: the service
   * installs it again at every start, so revoking it would last until the next one; and a token
   * cannot revoke itself, so that an admin working remotely cannot lock itself out by mistake.
   * Revoking a revoked token changes nothing (DELETE is idempotent). Returns the record.
   */
  async revokeAs(caller: Principal, id: string): Promise<Token> {
    const token = await this.get(id);
    if (token.id === ADMIN_TOKEN_ID) {
      throw failedPrecondition('the bootstrap admin token cannot be revoked through the API: it is VESSEL_ADMIN_TOKEN or DATA_DIR/admin-token, installed again at every start; replace it there');
    }
    if (token.id === caller.tokenId) throw failedPrecondition('a token cannot revoke itself: revoke it with another admin token');
    if (token.revokedAt !== null) return token;
    await this.revoke(token.id);
    return this.get(token.id);
  }

  /** Takes effect in this process once it resolves; in another (the CLI's) within TOKEN_CACHE_MS. */
  async revoke(id: string): Promise<boolean> {
    const revoked = await this.store.tokens.revoke(id, new Date().toISOString());
    this.#revocations++;
    for (const [token, entry] of this.#cache) if (entry.principal.tokenId === id) this.#cache.delete(token);
    return revoked;
  }

  /** The principal of a token authenticated within TOKEN_CACHE_MS, without a store read; else undefined. */
  cachedPrincipal(token: string): Principal | undefined {
    const cached = this.#cache.get(token);
    return cached !== undefined && cached.until > Date.now() ? cached.principal : undefined;
  }

  /**
   * Whether `token` could be one of ours by its shape alone: what generateTokenValue makes, or the
   * bootstrap admin token installed by this process (VESSEL_ADMIN_TOKEN may be any string; it is
   * compared by digest, in constant time). Anything else is not worth a store read.
   */
  couldBeToken(token: string): boolean {
    if (TOKEN_SHAPE.test(token)) return true;
    const admin = this.#adminDigest;
    return admin !== undefined && timingSafeEqual(createHash('sha256').update(token).digest(), admin);
  }

  async authenticate(token: string): Promise<Principal | null> {
    const now = Date.now();
    const cached = this.#cache.get(token);
    if (cached !== undefined && cached.until > now) return cached.principal;
    if (!this.couldBeToken(token)) return null;
    const revocations = this.#revocations;
    const record = await this.store.tokens.findByHash(hashToken(token));
    // A revocation that ran while the store was read may have revoked this very token: the
    // record is stale, and caching it would admit the token for another TOKEN_CACHE_MS.
    if (revocations !== this.#revocations) return this.authenticate(token);
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
