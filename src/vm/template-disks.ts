/**
 * Templates' root disks on the VM host: DATA_DIR/templates/<templateId>/root.img, written here
 * from the chunks the API's process streams (docs/templates.md, "Where the image build runs").
 *
 * The bytes are the API's (the ext4 it built from an image, which is a client's): nothing here
 * reads them. The file is made by this process under a name of its own (O_EXCL, O_NOFOLLOW,
 * 0600), only written at the offsets the chunks give, each checked to come after the one before
 * and inside the size; it is never mounted, and QEMU opens it as raw only (vm-launcher.ts), so
 * what it holds means something only to the guest's kernel, which is untrusted already.
 */
import { closeSync, constants, existsSync, fsyncSync, ftruncateSync, mkdirSync, openSync, rmSync, statSync, writeSync } from 'node:fs';
import { join } from 'node:path';
import { failedPrecondition, invalidArgument } from '../core/errors.js';
import type { DiskChunk } from '../core/ports.js';
import { fsyncDir } from '../platform/durable-files.js';

/** The largest template disk a VM host takes: what a root disk may be, as the guest sees it. */
export const MAX_TEMPLATE_DISK_BYTES = 64 * 1024 ** 3;
export const TEMPLATE_DISK_BLOCK = 4096;
const UUID = /^[0-9a-f]{8}-[0-9a-f]{4}-[0-9a-f]{4}-[0-9a-f]{4}-[0-9a-f]{12}$/;

export class TemplateDiskFiles {
  readonly dir: string;

  constructor(
    dataDir: string,
    /** What still stands on a template's disk (runtimes, checkpoints), for a refused delete; null when nothing does. */
    private readonly standingOn: (templateId: string) => string | null,
  ) {
    this.dir = join(dataDir, 'templates');
    mkdirSync(this.dir, { recursive: true, mode: 0o700 });
  }

  /** The template's disk; only ever a path made of a checked id. */
  diskFile(templateId: string): string {
    if (!UUID.test(templateId)) throw invalidArgument(`'${templateId}' is not a template id`);
    return join(this.dir, templateId, 'root.img');
  }

  has(templateId: string): boolean {
    return existsSync(this.diskFile(templateId));
  }

  sizeOf(templateId: string): number {
    return statSync(this.diskFile(templateId)).size;
  }

  /**
   * Writes the disk from its chunks. Refused, with nothing left behind: a size that is not a
   * whole number of blocks or is past MAX_TEMPLATE_DISK_BYTES, a template that has a disk
   * already, a chunk whose offset is not a whole number, comes before the end of the one
   * before, or whose bytes go past the size, and an empty chunk.
   */
  async importDisk(templateId: string, sizeBytes: number, chunks: AsyncIterable<DiskChunk>): Promise<void> {
    const file = this.diskFile(templateId);
    if (!Number.isSafeInteger(sizeBytes) || sizeBytes <= 0 || sizeBytes % TEMPLATE_DISK_BLOCK !== 0 || sizeBytes > MAX_TEMPLATE_DISK_BYTES) {
      throw invalidArgument(`a template disk is a whole number of ${TEMPLATE_DISK_BLOCK}-byte blocks, at most ${MAX_TEMPLATE_DISK_BYTES} bytes; not ${sizeBytes}`);
    }
    const dir = join(this.dir, templateId);
    try {
      mkdirSync(dir, { mode: 0o700 });
    } catch (err) {
      if ((err as NodeJS.ErrnoException).code === 'EEXIST') throw failedPrecondition(`template ${templateId} has a disk on this host already`);
      throw err;
    }
    let fd: number | null = null;
    try {
      fd = openSync(file, constants.O_WRONLY | constants.O_CREAT | constants.O_EXCL | constants.O_NOFOLLOW, 0o600);
      ftruncateSync(fd, sizeBytes);
      let next = 0;
      for await (const chunk of chunks) {
        const { offset, data } = chunk as { offset: unknown; data: Buffer };
        if (typeof offset !== 'number' || !Number.isSafeInteger(offset) || offset < next) {
          throw invalidArgument(`a template disk's chunk at offset ${String(offset)} is out of order (the next is at ${next} or after)`);
        }
        if (data.length === 0 || offset + data.length > sizeBytes) throw invalidArgument(`a template disk's chunk of ${data.length} bytes at offset ${offset} is not inside its ${sizeBytes} bytes`);
        for (let done = 0; done < data.length; ) done += writeSync(fd, data, done, data.length - done, offset + done);
        next = offset + data.length;
      }
      fsyncSync(fd);
      closeSync(fd);
      fd = null;
      fsyncDir(dir);
      fsyncDir(this.dir);
    } catch (err) {
      if (fd !== null) closeSync(fd);
      rmSync(dir, { recursive: true, force: true });
      throw err;
    }
  }

  deleteDisk(templateId: string): void {
    const file = this.diskFile(templateId);
    const standing = this.standingOn(templateId);
    if (standing !== null) throw failedPrecondition(`the template's disk is still in use by ${standing}; delete those first`);
    if (existsSync(file) || existsSync(join(this.dir, templateId))) rmSync(join(this.dir, templateId), { recursive: true, force: true });
  }
}
