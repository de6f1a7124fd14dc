/**
 * Files and directories of a runtime: one file's bytes either way, listings, stat, mkdir -p,
 * removal, and whole directories as tar archives (docs/api.md, "Files" and "Directories").
 * Archives are raw tar streams everywhere; on Node a local directory can be given instead, packed
 * and unpacked by client/node/directories.ts, which is loaded only then.
 */
import type { FileInfo, FileStat, FileWritten } from './api-types.js';
import { rawBody, type BodySource } from './body.js';
import type { CallOptions, Transport } from './transport.js';

/** What client/node/directories.ts offers; declared here so that nothing here imports Node. */
export interface LocalDirectories {
  /** The directory's contents as a tar stream, entries relative to it; rejects if it is not a directory. */
  pack(localDir: string): Promise<AsyncIterable<Uint8Array>>;
  /** Unpacks a tar stream into the directory, which is made if missing. */
  extract(archive: ReadableStream<Uint8Array>, localDir: string, signal: AbortSignal | undefined): Promise<void>;
}

/** In a variable so that a bundler building for a browser leaves it alone; resolved next to this module. */
const LOCAL_DIRECTORIES = './node/directories.js';

async function localDirectories(): Promise<LocalDirectories> {
  const node = (globalThis as { process?: { versions?: { node?: string } } }).process?.versions?.node;
  if (node === undefined) {
    throw new Error('local directories are for Node; in a browser, send and take tar streams with uploadArchive() and downloadArchive()');
  }
  return ((await import(/* webpackIgnore: true */ /* @vite-ignore */ LOCAL_DIRECTORIES)) as { localDirectories: LocalDirectories }).localDirectories;
}

const emptyStream = () => new ReadableStream<Uint8Array>({ start: (controller) => controller.close() });

export class Files {
  constructor(
    private readonly t: Transport,
    private readonly runtimeId: string,
  ) {}

  /** A file's bytes as they come from the guest. */
  async read(path: string, options?: CallOptions): Promise<ReadableStream<Uint8Array>> {
    const answer = await this.t.send('idempotent', options, (signal) =>
      this.t.api.GET('/v1/runtimes/{runtime_id}/files', { params: this.#params(path), parseAs: 'stream', signal }),
    );
    // openapi-fetch hands over no stream for an empty body.
    return (answer.data as ReadableStream<Uint8Array> | undefined) ?? emptyStream();
  }

  async readBytes(path: string, options?: CallOptions): Promise<Uint8Array> {
    return new Uint8Array(await new Response(await this.read(path, options)).arrayBuffer());
  }

  async readText(path: string, options?: CallOptions): Promise<string> {
    return new Response(await this.read(path, options)).text();
  }

  /** Writes a file (missing parents are made). A stream is sent as it is read. */
  write(path: string, data: BodySource, options?: CallOptions): Promise<FileWritten> {
    const raw = rawBody(data, 'application/octet-stream', 'idempotent');
    return this.t.call(raw.safety, options, (signal) => this.t.api.PUT('/v1/runtimes/{runtime_id}/files', { params: this.#params(path), ...raw.init, signal }));
  }

  /** A directory's entries without . and .., sorted by name; symbolic links are not followed. */
  list(path: string, options?: CallOptions): Promise<FileInfo[]> {
    return this.t.call('idempotent', options, (signal) => this.t.api.GET('/v1/runtimes/{runtime_id}/files/list', { params: this.#params(path), signal }));
  }

  /** Describes a path; `follow_symlinks: false` describes a link itself. */
  stat(path: string, options: CallOptions & { follow_symlinks?: boolean | undefined } = {}): Promise<FileStat> {
    const params = this.#params(path, options.follow_symlinks === undefined ? {} : { follow_symlinks: options.follow_symlinks });
    return this.t.call('idempotent', options, (signal) => this.t.api.GET('/v1/runtimes/{runtime_id}/files/stat', { params, signal }));
  }

  /** mkdir -p: an existing directory is fine, so this POST is safe to repeat. */
  async mkdir(path: string, options?: CallOptions): Promise<void> {
    await this.t.call('idempotent', options, (signal) => this.t.api.POST('/v1/runtimes/{runtime_id}/files/mkdir', { params: this.#params(path), signal }));
  }

  /** Removes a file, a link or an empty directory; `recursive` a whole tree. */
  async remove(path: string, options: CallOptions & { recursive?: boolean | undefined } = {}): Promise<void> {
    const params = this.#params(path, options.recursive === undefined ? {} : { recursive: options.recursive });
    await this.t.call('idempotent', options, (signal) => this.t.api.DELETE('/v1/runtimes/{runtime_id}/files', { params, signal }));
  }

  /** Extracts a tar archive into a directory of the runtime (made if missing). */
  uploadArchive(remoteDir: string, archive: BodySource, options?: CallOptions): Promise<FileWritten> {
    // Extracting the same archive again leaves the same files.
    const raw = rawBody(archive, 'application/x-tar', 'idempotent');
    return this.t.call(raw.safety, options, (signal) => this.t.api.PUT('/v1/runtimes/{runtime_id}/files/archive', { params: this.#params(remoteDir), ...raw.init, signal }));
  }

  /**
   * A directory of the runtime as a tar stream (entries ./…). A failure in the guest midway
   * breaks the stream with an error rather than ending it short.
   */
  async downloadArchive(remoteDir: string, options?: CallOptions): Promise<ReadableStream<Uint8Array>> {
    const answer = await this.t.send('idempotent', options, (signal) =>
      this.t.api.GET('/v1/runtimes/{runtime_id}/files/archive', { params: this.#params(remoteDir), parseAs: 'stream', signal }),
    );
    return (answer.data as ReadableStream<Uint8Array> | undefined) ?? emptyStream();
  }

  /** Node: copies a local directory's contents into a directory of the runtime. */
  async upload(localDir: string, remoteDir: string, options?: CallOptions): Promise<FileWritten> {
    return this.uploadArchive(remoteDir, await (await localDirectories()).pack(localDir), options);
  }

  /** Node: copies a directory of the runtime's contents into a local directory. */
  async download(remoteDir: string, localDir: string, options?: CallOptions): Promise<void> {
    const local = await localDirectories();
    await local.extract(await this.downloadArchive(remoteDir, options), localDir, options?.signal);
  }

  #params<Q extends object>(path: string, extra?: Q) {
    return { path: { runtime_id: this.runtimeId }, query: { path, ...extra } as { path: string } & Q };
  }
}
