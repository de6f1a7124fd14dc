/**
 * envd's `filesystem.Filesystem` service over the core's files and directories: Stat, ListDir
 * (with depth), MakeDir, Move and Remove. Paths are envd's: absolute, or relative to the home of
 * the user commands run as. docs/e2b.md says what differs from envd.
 */
import { posix } from 'node:path';
import { Code, ConnectError, type HandlerContext, type ServiceImpl } from '@connectrpc/connect';
import type { MessageInitShape } from '@bufbuild/protobuf';
import { timestampFromDate } from '@bufbuild/protobuf/wkt';
import type { Core } from '../core/core.js';
import { VesselError, invalidArgument } from '../core/errors.js';
import type { GuestFileInfo, GuestFileStat } from '../core/types.js';
import { connectErrorOf } from './answers.js';
import { FileType, Filesystem, type EntryInfoSchema } from './gen/filesystem/filesystem_pb.js';
import type { EnvdCaller } from './process.js';

/** Where a relative path is resolved: the home of the user commands run as (root, for now). */
export const HOME = '/root';
/** A listing with depth stops at this many entries: its answer is one message, held whole. */
export const MAX_LISTED_ENTRIES = 10_000;
/** How deep a listing may go (envd takes any depth; each level is a guest call per directory). */
const MAX_LIST_DEPTH = 32;
/** What of a failed `mv`'s stderr reaches the caller. */
const MAX_MOVE_ERROR_CHARS = 512;

type Entry = MessageInitShape<typeof EntryInfoSchema>;

/** An envd path: absolute, or relative to the home of the user commands run as. */
export function guestPathOf(path: string | undefined): string {
  if (path === undefined || path === '') throw invalidArgument('a path is required');
  return posix.isAbsolute(path) ? path : posix.join(HOME, path);
}

export function filesystemService(core: Core, callerOf: (ctx: HandlerContext) => EnvdCaller): ServiceImpl<typeof Filesystem> {
  const files = core.files;
  /** The RPC's work, its failures in Connect's codes. */
  const serve = async <T>(ctx: HandlerContext, work: (tenantId: string, runtimeId: string) => Promise<T>): Promise<T> => {
    const { tenantId, runtimeId } = callerOf(ctx);
    try {
      return await work(tenantId, runtimeId);
    } catch (err) {
      throw connectErrorOf(err);
    }
  };
  const stat = (tenantId: string, runtimeId: string, path: string) => files.statPath(tenantId, runtimeId, path, false);
  const exists = (tenantId: string, runtimeId: string, path: string) =>
    stat(tenantId, runtimeId, path).then(
      () => true,
      (err: unknown) => {
        if (err instanceof VesselError && err.code === 'not_found') return false;
        throw err;
      },
    );

  return {
    stat: (req, ctx) => serve(ctx, async (t, r) => ({ entry: entryOf(await stat(t, r, guestPathOf(req.path))) })),

    listDir: (req, ctx) =>
      serve(ctx, async (t, r) => {
        const depth = req.depth === 0 ? 1 : req.depth;
        if (depth > MAX_LIST_DEPTH) throw invalidArgument(`depth is at most ${MAX_LIST_DEPTH}`);
        const entries: Entry[] = [];
        // Breadth first, each directory listed once; symbolic links are listed, not followed.
        let level = [guestPathOf(req.path)];
        for (let d = 1; d <= depth && level.length > 0; d++) {
          const next: string[] = [];
          for (const dir of level) {
            for (const info of await files.listDir(t, r, dir)) {
              if (entries.length >= MAX_LISTED_ENTRIES) throw new ConnectError(`the listing has more than ${MAX_LISTED_ENTRIES} entries: list with a smaller depth`, Code.ResourceExhausted);
              entries.push(entryOf(info));
              if (info.type === 'directory') next.push(info.path);
            }
          }
          level = next;
        }
        return { entries };
      }),

    makeDir: (req, ctx) =>
      serve(ctx, async (t, r) => {
        const path = guestPathOf(req.path);
        // envd answers an existing path AlreadyExists (the SDK's makeDir is then false); the
        // agent's mkdir -p would take it. Between the two calls another may make it: it is then taken.
        if (await exists(t, r, path)) throw new ConnectError(`'${path.slice(0, 200)}' already exists`, Code.AlreadyExists);
        await files.makeDir(t, r, path);
        return { entry: entryOf(await stat(t, r, path)) };
      }),

    move: (req, ctx) =>
      serve(ctx, async (t, r) => {
        const source = guestPathOf(req.source);
        const destination = guestPathOf(req.destination);
        await stat(t, r, source);
        // As envd does, the destination's directory is made; the rename itself is the guest's mv
        // (the agent has no rename of its own), run with fixed arguments, never through a shell.
        await files.makeDir(t, r, posix.dirname(destination));
        const mv = await core.processes.exec(t, r, { command: 'mv', args: ['-T', '--', source, destination], cwd: null, env: {}, user: null, stdin: null, maxOutputBytes: 4096, timeoutSecs: 60 });
        if (mv.exit_code !== 0) throw new VesselError('failed_precondition', `could not move '${source.slice(0, 200)}': ${mv.stderr.trim().slice(0, MAX_MOVE_ERROR_CHARS)}`);
        return { entry: entryOf(await stat(t, r, destination)) };
      }),

    remove: (req, ctx) =>
      serve(ctx, async (t, r) => {
        await files.removePath(t, r, guestPathOf(req.path), true);
        return {};
      }),
  };
}

const TYPES: Partial<Record<GuestFileInfo['type'], FileType>> = { file: FileType.FILE, directory: FileType.DIRECTORY, symlink: FileType.SYMLINK };
/** Go's os.FileMode type bits, which envd's `mode` carries above the permission bits. */
const GO_MODE_DIR = 2 ** 31;
const GO_MODE_SYMLINK = 2 ** 27;

/** An entry as envd describes it; owner and group are known from a stat only (a listing has none). */
function entryOf(info: GuestFileInfo | GuestFileStat): Entry {
  const perm = info.mode & 0o777;
  const typeBits = info.type === 'directory' ? GO_MODE_DIR : info.type === 'symlink' ? GO_MODE_SYMLINK : 0;
  const modified = new Date(info.modified_at);
  return {
    name: info.name,
    type: TYPES[info.type] ?? FileType.UNSPECIFIED,
    path: info.path,
    size: BigInt(info.size_bytes),
    mode: (typeBits + perm) >>> 0,
    permissions: permissionsOf(info.type, perm),
    owner: 'uid' in info ? userName(info.uid) : '',
    group: 'gid' in info ? userName(info.gid) : '',
    modifiedTime: Number.isNaN(modified.getTime()) ? undefined : timestampFromDate(modified),
  };
}

/** Go's FileMode.String(), as envd answers it: `drwxr-xr-x`, `-rw-r--r--`, `Lrwxrwxrwx`. */
function permissionsOf(type: GuestFileInfo['type'], perm: number): string {
  const lead = type === 'directory' ? 'd' : type === 'symlink' ? 'L' : '-';
  let bits = '';
  for (let i = 8; i >= 0; i--) bits += perm & (1 << i) ? 'rwx'[(8 - i) % 3] : '-';
  return lead + bits;
}

/** The guest's user names are not known to the service: root by name, anyone else by number. */
const userName = (id: number): string => (id === 0 ? 'root' : String(id));
