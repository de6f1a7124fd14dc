/**
 * What users set on a runtime beyond its machine: labels, lifecycle settings, and the list
 * filters that select runtimes by them (docs/api.md, "Labels", "Lifecycle settings" and
 * "Listing runtimes"). Everything here is checked input, refused with invalid_argument.
 */
import { invalidArgument } from './errors.js';
import { DEFAULT_LIFECYCLE, RUNTIME_STATUSES, type LifecycleSettings, type RuntimeFilter, type RuntimeStatus } from './types.js';

export const MAX_LABELS = 64;
export const MAX_LABEL_KEY_CHARS = 63;
export const MAX_LABEL_VALUE_CHARS = 255;
/** Kubernetes' name charset, with `/` for prefixes such as `team/app`: alphanumeric at both ends. */
export const LABEL_KEY_PATTERN = '^[A-Za-z0-9]([A-Za-z0-9._/-]{0,61}[A-Za-z0-9])?$';
const LABEL_KEY = new RegExp(LABEL_KEY_PATTERN);
/** Control characters would corrupt the tables and logs labels are shown in. */
const CONTROL = /[\u0000-\u001f\u007f]/;

/** A runtime's environment (at create): bounded, as it is stored with the runtime and read by every exec. */
export const MAX_ENV_VARS = 128;
export const MAX_ENV_BYTES = 64 * 1024;
export const ENV_NAME_PATTERN = '^[A-Za-z_][A-Za-z0-9_]{0,255}$';
const ENV_NAME = new RegExp(ENV_NAME_PATTERN);

/** An environment as given: names a shell can use, no NUL, bounded in count and size; a fresh object with its keys sorted. */
export function checkEnv(env: Record<string, string>): Record<string, string> {
  const names = Object.keys(env);
  if (names.length > MAX_ENV_VARS) throw invalidArgument(`env has ${names.length} variables; at most ${MAX_ENV_VARS} are allowed`);
  let bytes = 0;
  const checked: Record<string, string> = {};
  for (const name of names.sort()) {
    if (!ENV_NAME.test(name)) throw invalidArgument(`env name '${name.slice(0, 80)}' is not a variable name: a letter or _, then letters, digits or _`);
    const value = env[name]!;
    if (value.includes('\0')) throw invalidArgument(`env variable '${name}' has a NUL in its value`);
    bytes += Buffer.byteLength(name) + Buffer.byteLength(value);
    if (bytes > MAX_ENV_BYTES) throw invalidArgument(`env has more than ${MAX_ENV_BYTES} bytes of names and values`);
    checked[name] = value;
  }
  return checked;
}

/** Seconds a lifecycle timer may be set to: up to a year; a timer never fires earlier than asked. */
export const MAX_LIFECYCLE_SECS = 365 * 24 * 3600;
/** How many label selectors and statuses one list may give. */
export const MAX_LABEL_SELECTORS = 16;

export function checkLabelKey(key: string, where: string): string {
  if (!LABEL_KEY.test(key)) {
    throw invalidArgument(`${where} '${key.slice(0, 80)}' is not a label key: 1 to ${MAX_LABEL_KEY_CHARS} of A-Z a-z 0-9 . _ / -, starting and ending with a letter or digit`);
  }
  return key;
}

function checkLabelValue(key: string, value: string): string {
  if (value.length > MAX_LABEL_VALUE_CHARS) throw invalidArgument(`label '${key}' has a value longer than ${MAX_LABEL_VALUE_CHARS} characters`);
  if (CONTROL.test(value)) throw invalidArgument(`label '${key}' has a control character in its value`);
  return value;
}

/** A label map as given: bounded in count, key and value; returned as a fresh object with its keys sorted. */
export function checkLabels(labels: Record<string, string>): Record<string, string> {
  const keys = Object.keys(labels);
  if (keys.length > MAX_LABELS) throw invalidArgument(`labels has ${keys.length} keys; at most ${MAX_LABELS} are allowed`);
  const checked: Record<string, string> = {};
  for (const key of keys.sort()) checked[checkLabelKey(key, 'labels key')] = checkLabelValue(key, labels[key]!);
  return checked;
}

/** The API's shape of lifecycle settings; each field given replaces the one in force. */
export interface LifecycleInput {
  idle_timeout_secs?: number | null;
  on_idle?: 'suspend' | 'stop';
  auto_delete_secs?: number | null;
}

function checkSecs(field: string, value: number | null): number | null {
  if (value !== null && !(Number.isSafeInteger(value) && value >= 0 && value <= MAX_LIFECYCLE_SECS)) {
    throw invalidArgument(`lifecycle.${field} must be null or a whole number of seconds from 0 to ${MAX_LIFECYCLE_SECS}`);
  }
  return value;
}

/** `current` with the fields of `input` that are present (a create starts from the defaults). */
export function mergeLifecycle(current: LifecycleSettings, input: LifecycleInput | undefined): LifecycleSettings {
  if (input === undefined) return { ...current };
  return {
    idleTimeoutSecs: input.idle_timeout_secs === undefined ? current.idleTimeoutSecs : checkSecs('idle_timeout_secs', input.idle_timeout_secs),
    onIdle: input.on_idle ?? current.onIdle,
    autoDeleteSecs: input.auto_delete_secs === undefined ? current.autoDeleteSecs : checkSecs('auto_delete_secs', input.auto_delete_secs),
  };
}

export const initialLifecycle = (input: LifecycleInput | undefined): LifecycleSettings => mergeLifecycle(DEFAULT_LIFECYCLE, input);

/**
 * The list filter from the query: `label` selectors `key=value` (that value) or `key` (present),
 * and statuses, each given repeated or as a comma list.
 */
export function parseRuntimeFilter(query: { label?: string[] | undefined; status?: string[] | undefined }): RuntimeFilter {
  const selectors = query.label ?? [];
  if (selectors.length > MAX_LABEL_SELECTORS) throw invalidArgument(`at most ${MAX_LABEL_SELECTORS} label selectors may be given`);
  const labels = selectors.map((selector): [string, string | null] => {
    const eq = selector.indexOf('=');
    if (eq === -1) return [checkLabelKey(selector, 'label selector key'), null];
    const key = checkLabelKey(selector.slice(0, eq), 'label selector key');
    return [key, checkLabelValue(key, selector.slice(eq + 1))];
  });
  const statuses = new Set<RuntimeStatus>();
  for (const item of (query.status ?? []).flatMap((s) => s.split(','))) {
    if (!(RUNTIME_STATUSES as readonly string[]).includes(item)) throw invalidArgument(`status '${item.slice(0, 40)}' is not one of ${RUNTIME_STATUSES.join(', ')}`);
    statuses.add(item as RuntimeStatus);
  }
  return { labels, statuses: [...statuses] };
}
