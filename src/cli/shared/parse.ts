/**
 * Parsers for option values. They throw commander's InvalidArgumentError, so a bad value is
 * reported like any other usage error (status 2) and names the option.
 */
import { InvalidArgumentError } from 'commander';

export function wholeNumber(raw: string): number {
  if (!/^\d{1,15}$/.test(raw)) throw new InvalidArgumentError(`expected a whole number, got '${raw}'`);
  return Number(raw);
}

export function positiveNumber(raw: string): number {
  const n = wholeNumber(raw);
  if (n === 0) throw new InvalidArgumentError('expected a number of at least 1');
  return n;
}

/** For options given more than once: each value is added to the list. */
export const collect = (value: string, previous: string[] | undefined): string[] => [...(previous ?? []), value];

/** `KEY=VALUE`, for --env. */
export function keyValue(value: string, previous: Record<string, string> | undefined): Record<string, string> {
  const eq = value.indexOf('=');
  if (eq <= 0) throw new InvalidArgumentError(`expected KEY=VALUE, got '${value}'`);
  return { ...previous, [value.slice(0, eq)]: value.slice(eq + 1) };
}

export interface IngressSpec {
  protocol: 'http' | 'https';
  runtime_port: number;
}

/** `PORT` or `PORT/http` or `PORT/https`. */
export function ingressSpec(value: string, previous: IngressSpec[] | undefined): IngressSpec[] {
  const match = /^(\d{1,5})(?:\/(http|https))?$/.exec(value);
  const port = Number(match?.[1]);
  if (match === null || port < 1 || port > 65535) throw new InvalidArgumentError(`expected PORT or PORT/http or PORT/https (port 1 to 65535), got '${value}'`);
  return [...(previous ?? []), { protocol: (match[2] ?? 'http') as IngressSpec['protocol'], runtime_port: port }];
}

const UNIT_SECS = { s: 1, m: 60, h: 3600, d: 86400 } as const;

/** `90`, `90s`, `15m`, `2h` or `7d`, in seconds. */
export function duration(raw: string): number {
  const match = /^(\d{1,9})([smhd]?)$/.exec(raw);
  if (match === null) throw new InvalidArgumentError(`expected a duration such as 90, 90s, 15m, 2h or 7d, got '${raw}'`);
  return Number(match[1]) * UNIT_SECS[(match[2] || 's') as keyof typeof UNIT_SECS];
}

/**
 * A duration, or one of the words given (`never`, `default`): commander takes a parser's null for
 * "no value", so the words are kept as they are and mapped by the command.
 */
export const durationOr =
  <W extends string>(...words: W[]) =>
  (raw: string): number | W =>
    (words as string[]).includes(raw) ? (raw as W) : duration(raw);
