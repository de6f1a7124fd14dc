/**
 * Docker's `user[:group]` (USER, COPY --chown) resolved against the build VM's own /etc/passwd
 * and /etc/group, as Docker resolves them against the image's: names to numbers, a user's primary
 * group when no group is given, and numbers taken as they are (a uid without an entry is fine).
 * The files come from the guest: they are parsed line by line, bounded by the caller's read.
 * Used for the build's USER and COPY --chown, and for the user commands run as in a runtime.
 */

export interface ResolvedUser {
  uid: number;
  gid: number;
  /** The user's name when /etc/passwd has it (supplementary groups come from it). */
  name: string | null;
  home: string | null;
  /**
   * The groups /etc/group lists the user's name in, with its own group, as runc's exec gives a
   * named user; none for a bare uid.
   */
  groups: number[];
}

export class UserError extends Error {}

interface Entry {
  name: string;
  id: number;
  gid: number;
  home: string;
}

const ID = /^[0-9]{1,10}$/;
const MAX_ID = 0xfffffffe;

function entries(text: string | null, idField: number): Entry[] {
  if (text === null) return [];
  const out: Entry[] = [];
  for (const line of text.split('\n')) {
    const f = line.split(':');
    if (f.length < 3 || f[0] === '' || !ID.test(f[idField] ?? '')) continue;
    out.push({ name: f[0]!, id: Number(f[idField]), gid: ID.test(f[3] ?? '') ? Number(f[3]) : 0, home: f[5] ?? '' });
  }
  return out;
}

function numeric(word: string): number | null {
  if (!ID.test(word)) return null;
  const n = Number(word);
  if (n > MAX_ID) throw new UserError(`${word} is not a valid id`);
  return n;
}

/** `spec` as USER or --chown gives it; `passwd` and `group` are the guest's files (null: none). */
export function resolveUser(spec: string, passwd: string | null, group: string | null): ResolvedUser {
  const colon = spec.indexOf(':');
  const userWord = colon < 0 ? spec : spec.slice(0, colon);
  const groupWord = colon < 0 ? null : spec.slice(colon + 1);
  if (userWord === '') throw new UserError(`'${spec}' names no user`);
  const users = entries(passwd, 2);
  const byName = users.find((u) => u.name === userWord);
  const uidNumber = numeric(userWord);
  const user = byName ?? (uidNumber === null ? undefined : users.find((u) => u.id === uidNumber));
  if (user === undefined && uidNumber === null) throw new UserError(`unable to find user ${userWord}: no matching entries in the image's /etc/passwd`);
  const uid = user?.id ?? uidNumber!;
  let gid: number;
  if (groupWord === null || groupWord === '') gid = user?.gid ?? 0;
  else {
    const gidNumber = numeric(groupWord);
    const found = entries(group, 2).find((g) => g.name === groupWord);
    if (found === undefined && gidNumber === null) throw new UserError(`unable to find group ${groupWord}: no matching entries in the image's /etc/group`);
    gid = found?.id ?? gidNumber!;
  }
  return { uid, gid, name: user?.name ?? null, home: user === undefined || user.home === '' ? null : user.home, groups: user === undefined ? [] : groupsOf(user.name, gid, group) };
}

/** The distinct gids of the groups that name `name` as a member, `gid` first. */
function groupsOf(name: string, gid: number, group: string | null): number[] {
  const ids = new Set([gid]);
  for (const line of (group ?? '').split('\n')) {
    const f = line.split(':');
    if (f.length >= 4 && ID.test(f[2]!) && f[3]!.split(',').includes(name)) ids.add(Number(f[2]));
  }
  return [...ids];
}

/** Root, however USER says it: commands run as they always do. */
export const isRoot = (spec: string): boolean => spec === '' || spec === 'root' || spec === '0' || spec === 'root:root' || spec === '0:0';
