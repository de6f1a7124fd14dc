/**
 * Host names and allowlist patterns. One syntax serves the egress allowlist and the host side of
 * injection rules: an exact name, `*.domain` (any depth below domain, never domain itself), or `*`.
 */
import { domainToASCII } from 'node:url';
import { isIP } from 'node:net';
import { invalidArgument } from './errors.js';

const LABEL = /^(?!-)[a-z0-9-]{1,63}(?<!-)$/;

/** Lowercase, no trailing dot, IDNA to punycode. Returns null for something that is not a host name. */
export function normalizeHostName(raw: string): string | null {
  let host = raw.trim();
  if (host.endsWith('.')) host = host.slice(0, -1);
  if (host === '' || host.length > 253) return null;
  if (isIP(host) !== 0) return null;
  const ascii = domainToASCII(host);
  if (ascii === '' || ascii.length > 253) return null;
  const labels = ascii.split('.');
  if (!labels.every((l) => LABEL.test(l))) return null;
  // An all-numeric last label is an IP in disguise (decimal or hex forms), never a name.
  if (/^(0x[0-9a-f]*|[0-9]+)$/.test(labels[labels.length - 1]!)) return null;
  return ascii;
}

/** Validates and normalizes one pattern; throws invalid_argument naming the bad pattern. */
export function normalizeHostPattern(raw: string): string {
  if (raw === '*') return raw;
  const wildcard = raw.startsWith('*.');
  const name = normalizeHostName(wildcard ? raw.slice(2) : raw);
  if (name === null) throw invalidArgument(`'${raw}' is not a host name or wildcard pattern`);
  return wildcard ? `*.${name}` : name;
}

/** `host` must already be normalized. */
export function hostMatches(pattern: string, host: string): boolean {
  if (pattern === '*') return true;
  if (pattern.startsWith('*.')) return host.endsWith(pattern.slice(1));
  return pattern === host;
}

export const hostAllowed = (patterns: readonly string[], host: string): boolean =>
  patterns.some((p) => hostMatches(p, host));
