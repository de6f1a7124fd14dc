/**
 * The core's TemplateBuilder over image-rootfs.ts: an image from a registry or an uploaded
 * archive into a root disk, in the API's own process and directory (docs/templates.md, "Where the
 * image build runs"), then handed to the VM host, which keeps templates' disks (TemplateDisks).
 * Each build has a directory of its own, named by the template's id; nothing of it is kept once
 * the disk is handed over.
 */
import { closeSync, mkdirSync, openSync, readSync, rmSync, createWriteStream } from 'node:fs';
import { join } from 'node:path';
import type { Readable } from 'node:stream';
import { pipeline } from 'node:stream/promises';
import type { BuildReporter } from '../core/build-log.js';
import { VesselError, invalidArgument } from '../core/errors.js';
import type { BuildSource, BuiltTemplate, DiskChunk, TemplateBuilder, TemplateDisks } from '../core/ports.js';
import { BuildFailure } from '../core/templates.js';
import { BlobStore } from './blob-store.js';
import type { GuestKit } from './guest-kit.js';
import { buildDockerfile, templateConfigOf } from './dockerfile-build.js';
import { BuildCancelled, imageRootfs } from './image-rootfs.js';
import type { ImageSource } from './oci-image.js';
import type { RegistryPolicy } from './registry-policy.js';

/** The root disk of a template unless told otherwise: the default image's size. */
export const DEFAULT_TEMPLATE_DISK_BYTES = 2 * 1024 ** 3;
const BLOCK = 4096;
/** A chunk of the disk sent to the VM host: well inside a link stream's window with its meta. */
const CHUNK_BYTES = 128 * 1024;
const UUID = /^[0-9a-f]{8}-[0-9a-f]{4}-[0-9a-f]{4}-[0-9a-f]{4}-[0-9a-f]{12}$/;

export interface ImageTemplateBuilderOptions {
  /** The builds' directory: the API process's own (DATA_DIR/store/template-builds). */
  dir: string;
  kit: GuestKit;
  registries: RegistryPolicy;
  /** Where finished disks go: the VM host. */
  disks: TemplateDisks;
  /** The root disk's size as the guest sees it; a multiple of 4096. */
  diskBytes?: number;
}

export class ImageTemplateBuilder implements TemplateBuilder {
  readonly #diskBytes: number;

  constructor(private readonly opts: ImageTemplateBuilderOptions) {
    this.#diskBytes = opts.diskBytes ?? DEFAULT_TEMPLATE_DISK_BYTES;
    mkdirSync(opts.dir, { recursive: true, mode: 0o700 });
  }

  #workDir(templateId: string): string {
    // The core makes the ids; a path is made of nothing else.
    if (!UUID.test(templateId)) throw new Error(`not a template id: ${templateId}`);
    return join(this.opts.dir, templateId);
  }

  async receiveArchive(templateId: string, body: Readable, maxBytes: number): Promise<number> {
    const work = this.#workDir(templateId);
    mkdirSync(work, { mode: 0o700 });
    let total = 0;
    const counted = async function* (source: AsyncIterable<Buffer>) {
      for await (const chunk of source) {
        total += chunk.length;
        if (total > maxBytes) throw new VesselError('invalid_argument', `the image archive is larger than the limit of ${maxBytes} bytes`, { httpStatus: 413 });
        yield chunk;
      }
    };
    await pipeline(body, counted, createWriteStream(join(work, 'archive'), { flags: 'wx', mode: 0o600 }));
    if (total === 0) throw invalidArgument('the image archive is empty');
    return total;
  }

  async build(templateId: string, source: BuildSource, report: BuildReporter, signal: AbortSignal): Promise<BuiltTemplate> {
    const work = this.#workDir(templateId);
    mkdirSync(work, { recursive: true, mode: 0o700 });
    if (source.kind === 'dockerfile') {
      try {
        const blobs = new BlobStore(join(work, 'blobs'));
        return await buildDockerfile({ contextFile: join(work, 'archive'), blobs, dockerfile: source.dockerfile, buildArgs: source.buildArgs, vms: source.vms, ready: source.ready, report, signal });
      } finally {
        rmSync(work, { recursive: true, force: true });
      }
    }
    const fetchDir = join(work, 'fetch');
    mkdirSync(fetchDir, { recursive: true, mode: 0o700 });
    let image: ImageSource;
    if (source.kind === 'archive') image = { kind: 'archive', path: join(work, 'archive') };
    else {
      report.step(`check the registry of ${source.image}`);
      const { insecure } = await this.opts.registries.check(source.image);
      image = { kind: 'registry', reference: source.image, insecure, ...(source.credentials === null ? {} : { credentials: source.credentials }) };
    }
    const disk = join(work, 'root.img');
    try {
      const built = await imageRootfs(image, disk, {
        workDir: fetchDir,
        blobs: new BlobStore(join(work, 'blobs')),
        kit: this.opts.kit,
        diskBytes: this.#diskBytes,
        step: (name) => report.step(name),
        signal,
      });
      for (const w of built.warnings) report.output(`warning: ${w}\n`);
      report.output(`${built.ext4.inodes} inodes, ${built.ext4.contentBytes} bytes of files\n`);
      if (signal.aborted) throw new BuildCancelled();
      report.step('hand the disk to the VM host');
      await this.opts.disks.importTemplateDisk(templateId, this.#diskBytes, diskChunks(disk));
      return { config: templateConfigOf(built.image.config), diskBytes: this.#diskBytes };
    } catch (err) {
      if (err instanceof BuildCancelled) throw new BuildFailure(err.message);
      throw err;
    } finally {
      // Whatever happened, the build's files are of no more use: the disk is the VM host's now.
      rmSync(work, { recursive: true, force: true });
    }
  }

  async discard(templateId: string): Promise<void> {
    await this.opts.disks.deleteTemplateDisk(templateId);
    rmSync(this.#workDir(templateId), { recursive: true, force: true });
  }
}

/** A disk file's non-zero blocks, as runs of at most CHUNK_BYTES, in order of offset. */
export async function* diskChunks(file: string): AsyncGenerator<DiskChunk> {
  const fd = openSync(file, 'r');
  try {
    const buf = Buffer.alloc(CHUNK_BYTES * 8);
    let base = 0;
    for (;;) {
      const n = readSync(fd, buf, 0, buf.length, base);
      if (n === 0) return;
      let runStart = -1;
      for (let at = 0; at < n; at += BLOCK) {
        const end = Math.min(at + BLOCK, n);
        const zero = isZero(buf, at, end);
        if (!zero && runStart < 0) runStart = at;
        if (runStart >= 0 && (zero || end - runStart >= CHUNK_BYTES)) {
          const runEnd = zero ? at : end;
          yield { offset: base + runStart, data: Buffer.from(buf.subarray(runStart, runEnd)) };
          runStart = -1;
        }
      }
      if (runStart >= 0) yield { offset: base + runStart, data: Buffer.from(buf.subarray(runStart, n)) };
      base += n;
    }
  } finally {
    closeSync(fd);
  }
}

const ZERO_BLOCK = Buffer.alloc(BLOCK);
const isZero = (buf: Buffer, start: number, end: number): boolean => buf.subarray(start, end).equals(ZERO_BLOCK.subarray(0, end - start));
