/**
 * The gateway's own name resolution: VESSEL_DNS_OVERRIDES first (a file of `name ip` lines, read
 * again when it changes; the service reads it, since the gateway's process may not), then the host's resolvers. Answers are cached for their TTL, within
 * bounds, so a guest cannot make the gateway query upstream at will.
 */
import { readFileSync } from 'node:fs';
import { Resolver } from 'node:dns/promises';
import { isIP } from 'node:net';
import { normalizeHostName } from '../core/host-pattern.js';

export interface Resolution {
  addresses: string[];
  ttlSecs: number;
}

const MIN_TTL = 5;
const MAX_TTL = 300;
const NEGATIVE_TTL = 5;
const OVERRIDE_TTL = 5;

/** The addresses the overrides give a name, or undefined when they do not name it. */
export type OverrideLookup = (name: string) => string[] | undefined | Promise<string[] | undefined>;

export class NameResolver {
  readonly #resolver = new Resolver({ timeout: 3000, tries: 2 });
  readonly #cache = new Map<string, { value: Resolution; expires: number }>();

  constructor(private readonly overrides: OverrideLookup | undefined) {}

  /** IPv4 addresses of a normalized name; an empty list when it does not resolve. */
  async resolve(name: string): Promise<Resolution> {
    const override = await this.overrides?.(name);
    if (override !== undefined) return { addresses: override, ttlSecs: OVERRIDE_TTL };
    const cached = this.#cache.get(name);
    if (cached !== undefined && cached.expires > Date.now()) return cached.value;
    let value: Resolution;
    try {
      const records = await this.#resolver.resolve4(name, { ttl: true });
      const ttl = Math.min(MAX_TTL, Math.max(MIN_TTL, Math.min(...records.map((r) => r.ttl))));
      value = { addresses: records.map((r) => r.address), ttlSecs: ttl };
    } catch {
      value = { addresses: [], ttlSecs: NEGATIVE_TTL };
    }
    this.#cache.set(name, { value, expires: Date.now() + value.ttlSecs * 1000 });
    if (this.#cache.size > 10_000) this.#cache.delete(this.#cache.keys().next().value!);
    return value;
  }
}

/**
 * The overrides file, read at every lookup. A stamp of its time and size cannot tell two writes
 * apart within one tick of the file system's clock when they leave the same size, and a lookup
 * kept stale that way falls through to real DNS; the file is small and set only in tests and
 * development, so reading it each time costs nothing that matters. Writers replace it whole
 * (write a temporary file, rename it over): a read never sees half of one.
 */
export class OverridesFile {
  constructor(private readonly overridesFile: string) {}

  readonly lookup = (name: string): string[] | undefined => {
    let text: string;
    try {
      text = readFileSync(this.overridesFile, 'utf8');
    } catch {
      return undefined;
    }
    return parseOverrides(text).get(name);
  };
}

/** The lookup of an overrides file, or none. */
export const overridesFromFile = (file: string | undefined): OverrideLookup | undefined => (file === undefined ? undefined : new OverridesFile(file).lookup);

export function parseOverrides(text: string): Map<string, string[]> {
  const map = new Map<string, string[]>();
  for (const line of text.split('\n')) {
    const [rawName, ip] = line.replace(/#.*/, '').trim().split(/\s+/);
    if (rawName === undefined || ip === undefined || isIP(ip) !== 4) continue;
    const name = normalizeHostName(rawName);
    if (name === null) continue;
    map.set(name, [...(map.get(name) ?? []), ip]);
  }
  return map;
}
