/**
 * Tar streams made entry by entry, hostile ones included: node-tar's Header writes each header
 * exactly as given (`../` paths, device nodes, links anywhere), with a PAX header in front when a
 * field does not fit the classic one. For build contexts and image layers in tests.
 */
import { gzipSync } from 'node:zlib';
import { Header, Pax } from 'tar';

export interface TarEntrySpec {
  path: string;
  type?: 'File' | 'Directory' | 'SymbolicLink' | 'Link' | 'CharacterDevice' | 'BlockDevice' | 'FIFO';
  body?: string | Buffer;
  mode?: number;
  uid?: number;
  gid?: number;
  linkpath?: string;
}

const pad = (n: number): Buffer => Buffer.alloc((512 - (n % 512)) % 512);

export function tarOf(entries: TarEntrySpec[], opts: { gzip?: boolean } = {}): Buffer {
  const blocks: Buffer[] = [];
  for (const e of entries) {
    const body = typeof e.body === 'string' ? Buffer.from(e.body) : (e.body ?? Buffer.alloc(0));
    const type = e.type ?? 'File';
    const fields = { path: e.path, mode: e.mode ?? (type === 'Directory' ? 0o755 : 0o644), uid: e.uid ?? 0, gid: e.gid ?? 0, size: type === 'File' ? body.length : 0, type, linkpath: e.linkpath ?? '', mtime: new Date(1_700_000_000_000) };
    const probe = new Header(fields);
    const header = Buffer.alloc(512);
    if (probe.encode(header, 0)) {
      blocks.push(new Pax({ path: e.path, linkpath: e.linkpath, size: fields.size, mtime: fields.mtime }).encode());
      new Header({ ...fields, path: e.path.slice(-99), linkpath: (e.linkpath ?? '').slice(-99) }).encode(header, 0);
    }
    blocks.push(header, body, pad(body.length));
  }
  blocks.push(Buffer.alloc(1024));
  const tar = Buffer.concat(blocks);
  return opts.gzip === true ? gzipSync(tar) : tar;
}
