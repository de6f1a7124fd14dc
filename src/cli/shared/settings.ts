/**
 * Where the client commands find the service and their token: VESSEL_URL and VESSEL_TOKEN, else
 * the file `vessel login` writes. The token never comes from the command line, where `ps` and
 * the shell's history would show it.
 */
import { chmodSync, lstatSync, mkdirSync, openSync, closeSync, readFileSync, renameSync, rmSync, writeSync } from 'node:fs';
import { homedir } from 'node:os';
import { dirname, join } from 'node:path';
import { UsageError } from './exit-codes.js';

/** Where `npm start` serves. */
export const DEFAULT_URL = 'http://127.0.0.1:8080';

export interface Settings {
  url: string;
  token: string;
}

export interface SavedSettings {
  url?: string | undefined;
  token?: string | undefined;
}

/** VESSEL_CONFIG, else $XDG_CONFIG_HOME/vessel/config.json, else ~/.config/vessel/config.json. */
export function configPath(env: NodeJS.ProcessEnv = process.env): string {
  if (env.VESSEL_CONFIG) return env.VESSEL_CONFIG;
  const base = env.XDG_CONFIG_HOME || join(env.HOME || homedir(), '.config');
  return join(base, 'vessel', 'config.json');
}

/**
 * The saved settings, or none. A file that others could read is refused rather than used, as
 * ssh does with a private key: its token would already be exposed, and using it says nothing.
 */
export function readConfig(path: string): SavedSettings {
  let stat;
  try {
    stat = lstatSync(path);
  } catch (err) {
    if ((err as NodeJS.ErrnoException).code === 'ENOENT') return {};
    throw err;
  }
  if (!stat.isFile()) throw new UsageError(`${path} is not a regular file`);
  if ((stat.mode & 0o077) !== 0) {
    throw new UsageError(`${path} is readable by others (mode ${(stat.mode & 0o777).toString(8)}); run: chmod 600 ${path}`);
  }
  let parsed: unknown;
  try {
    parsed = JSON.parse(readFileSync(path, 'utf8'));
  } catch {
    throw new UsageError(`${path} is not valid JSON; run vessel login again`);
  }
  const saved = parsed as SavedSettings;
  return { url: typeof saved.url === 'string' ? saved.url : undefined, token: typeof saved.token === 'string' ? saved.token : undefined };
}

/**
 * Writes the file with mode 0600 from its creation on (no moment when it is readable by
 * others), through a temporary file renamed over it so that a crash leaves the old one whole.
 */
export function writeConfig(path: string, settings: Settings): void {
  mkdirSync(dirname(path), { recursive: true, mode: 0o700 });
  const temp = `${path}.${process.pid}.tmp`;
  const fd = openSync(temp, 'wx', 0o600);
  try {
    writeSync(fd, `${JSON.stringify({ url: settings.url, token: settings.token }, null, 2)}\n`);
  } finally {
    closeSync(fd);
  }
  // The umask may have taken bits from 0600 but never adds any; chmod makes it exact.
  chmodSync(temp, 0o600);
  renameSync(temp, path);
}

export function removeConfig(path: string): boolean {
  try {
    rmSync(path);
    return true;
  } catch (err) {
    if ((err as NodeJS.ErrnoException).code === 'ENOENT') return false;
    throw err;
  }
}

/** The URL alone: `vessel login` needs it before there is a token. */
export function resolveUrl(env: NodeJS.ProcessEnv = process.env, saved: SavedSettings = readConfig(configPath(env))): string {
  return (env.VESSEL_URL || saved.url || DEFAULT_URL).replace(/\/+$/, '');
}

/** The environment first, then the file; a missing token is a usage error that says how to give one. */
export function resolveSettings(env: NodeJS.ProcessEnv = process.env): Settings {
  const path = configPath(env);
  // The file is read only when the environment leaves something to find.
  const saved = env.VESSEL_URL && env.VESSEL_TOKEN ? {} : readConfig(path);
  const token = env.VESSEL_TOKEN || saved.token;
  if (!token) throw new UsageError(`no token: set VESSEL_TOKEN, or run vessel login (which writes ${path})`);
  return { url: resolveUrl(env, saved), token };
}
