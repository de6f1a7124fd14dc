/**
 * OCI images, from a registry or an uploaded archive, as a FileTree.
 *
 * skopeo does the transport: registries (HTTPS with the system's trust or a CA directory,
 * credentials through an auth file, never on its command line), `docker save` archives and OCI
 * archives, all copied into an OCI layout, where every blob sits under its digest. skopeo is the
 * tool made for this (containers/image, what Podman and Buildah use); it verifies what it pulls,
 * and it unpacks nothing. It may run as an unprivileged user (`runAs`).
 *
 * We then read the layout: index, manifest (linux/amd64 out of a list), config, and each layer,
 * checking every blob against its digest and size as it streams, and apply the layers in order
 * onto a FileTree (layer-apply.ts). No layer is ever unpacked onto the host's file system.
 */
import { spawn } from 'node:child_process';
import { createHash } from 'node:crypto';
import { chownSync, closeSync, constants, createReadStream, fstatSync, openSync, readFileSync, readSync, rmSync, writeFileSync } from 'node:fs';
import { join } from 'node:path';
import { pipeline, Transform, type Readable, type TransformCallback } from 'node:stream';
import { VesselError } from '../core/errors.js';
import { IMAGE_REFERENCE, MAX_IMAGE_REFERENCE_CHARS } from '../core/names.js';
import { labelsOf, type ImageConfig } from './dockerfile.js';

/** index.json, manifests and configs are small; a larger one is not an image we want. */
const MAX_JSON_BYTES = 4 * 1024 * 1024;
/** skopeo's output kept for an error message. */
const MAX_TOOL_OUTPUT = 16 * 1024;

export class ImageError extends VesselError {
  constructor(message: string) {
    super('invalid_argument', `image: ${message}`);
  }
}

export type ImageSource =
  | {
      kind: 'registry';
      /** `registry.example.com/team/app:tag`, `debian:12` or `…@sha256:…`, as docker pull takes it. */
      reference: string;
      /** Plain HTTP or unverified TLS: only for a registry on this host (tests, a local mirror). */
      insecure?: boolean;
      /** A directory of CA certificates (*.crt) to trust for this registry. */
      certDir?: string;
      credentials?: { username: string; password: string };
    }
  /** A `docker save` archive or an OCI archive (`skopeo copy … oci-archive:`), uncompressed or not. */
  | { kind: 'archive'; path: string };

export interface FetchOptions {
  /** Runs skopeo as this user; `layoutDir` and `workDir` must be theirs. */
  runAs?: { uid: number; gid: number };
  /** For the auth file (mode 0600); deleted after. */
  workDir: string;
}


/** Copies the image into an OCI layout at `layoutDir` (tag `image`). */
export async function fetchImage(source: ImageSource, layoutDir: string, opts: FetchOptions): Promise<void> {
  const dest = `oci:${layoutDir}:image`;
  const common = ['--override-os', 'linux', '--override-arch', 'amd64', '--insecure-policy', 'copy', '--quiet'];
  if (source.kind === 'registry') {
    if (!IMAGE_REFERENCE.test(source.reference) || source.reference.length > MAX_IMAGE_REFERENCE_CHARS) throw new ImageError(`'${source.reference}' is not an image reference`);
    const args = [...common, `--src-tls-verify=${source.insecure === true ? 'false' : 'true'}`];
    if (source.certDir !== undefined) args.push('--src-cert-dir', source.certDir);
    let authFile: string | null = null;
    if (source.credentials !== undefined) {
      authFile = join(opts.workDir, 'auth.json');
      const registry = source.reference.split('/')[0]!;
      const auth = Buffer.from(`${source.credentials.username}:${source.credentials.password}`).toString('base64');
      writeFileSync(authFile, JSON.stringify({ auths: { [registry]: { auth } } }), { mode: 0o600, flag: 'wx' });
      if (opts.runAs !== undefined) chownSync(authFile, opts.runAs.uid, opts.runAs.gid);
      args.push('--src-authfile', authFile);
    } else args.push('--src-no-creds');
    try {
      await skopeo([...args, `docker://${source.reference}`, dest], opts);
    } finally {
      if (authFile !== null) rmSync(authFile, { force: true });
    }
    return;
  }
  // A `docker save` archive has manifest.json, an OCI archive index.json (Docker 25 writes both).
  const errors: string[] = [];
  for (const transport of ['docker-archive', 'oci-archive']) {
    try {
      await skopeo([...common, `${transport}:${source.path}`, dest], opts);
      return;
    } catch (err) {
      errors.push(`${transport}: ${(err as Error).message}`);
    }
  }
  throw new ImageError(`the archive is neither a docker save archive nor an OCI archive (${errors.join('; ')})`);
}

function skopeo(args: string[], opts: FetchOptions): Promise<void> {
  return new Promise((resolve, reject) => {
    const child = spawn('skopeo', args, {
      stdio: ['ignore', 'pipe', 'pipe'],
      // Nothing of ours: no proxy settings, no registries.conf of root's home.
      // TMPDIR: an OCI archive is unpacked there, in the build's own directory rather than /var/tmp.
      env: { PATH: '/usr/sbin:/usr/bin:/sbin:/bin', HOME: opts.workDir, XDG_RUNTIME_DIR: opts.workDir, TMPDIR: opts.workDir },
      ...(opts.runAs === undefined ? {} : { uid: opts.runAs.uid, gid: opts.runAs.gid }),
    });
    let output = '';
    const keep = (chunk: Buffer) => {
      output = (output + chunk.toString()).slice(-MAX_TOOL_OUTPUT);
    };
    child.stdout.on('data', keep);
    child.stderr.on('data', keep);
    child.on('error', (err) => reject(new VesselError('unavailable', `skopeo cannot run: ${err.message}`)));
    child.on('close', (code) => {
      if (code === 0) resolve();
      else reject(new ImageError(output.trim().split('\n').slice(-3).join(' ') || `skopeo exited with ${code}`));
    });
  });
}

// ————— reading the layout —————

export interface LayerRef {
  digest: string;
  mediaType: string;
  size: number;
}

export interface OciImage {
  manifestDigest: string;
  config: ImageConfig;
  layers: LayerRef[];
}

const INDEX_TYPES = new Set(['application/vnd.oci.image.index.v1+json', 'application/vnd.docker.distribution.manifest.list.v2+json']);
const MANIFEST_TYPES = new Set(['application/vnd.oci.image.manifest.v1+json', 'application/vnd.docker.distribution.manifest.v2+json']);
const GZIP_LAYERS = new Set([
  'application/vnd.oci.image.layer.v1.tar+gzip',
  'application/vnd.oci.image.layer.nondistributable.v1.tar+gzip',
  'application/vnd.docker.image.rootfs.diff.tar.gzip',
  'application/vnd.docker.image.rootfs.foreign.diff.tar.gzip',
]);
const PLAIN_LAYERS = new Set(['application/vnd.oci.image.layer.v1.tar', 'application/vnd.oci.image.layer.nondistributable.v1.tar']);

const DIGEST = /^sha256:[0-9a-f]{64}$/;

interface Descriptor {
  mediaType: string;
  digest: string;
  size: number;
  platform?: { os?: string; architecture?: string };
}

function descriptor(raw: unknown, what: string): Descriptor {
  const d = raw as Partial<Descriptor> | null;
  if (typeof d !== 'object' || d === null || typeof d.digest !== 'string' || !DIGEST.test(d.digest) || typeof d.size !== 'number' || !Number.isSafeInteger(d.size) || d.size < 0) {
    throw new ImageError(`${what} is not a valid descriptor (sha256 digest and size)`);
  }
  return { mediaType: typeof d.mediaType === 'string' ? d.mediaType : '', digest: d.digest, size: d.size, platform: d.platform };
}

/**
 * A blob of the layout, opened without following a link (the layout was written by skopeo,
 * perhaps as another user) and checked to be a regular file of the size its descriptor says.
 */
function openBlob(layoutDir: string, d: Descriptor): number {
  const fd = openSync(join(layoutDir, 'blobs', 'sha256', d.digest.slice(7)), constants.O_RDONLY | constants.O_NOFOLLOW);
  const st = fstatSync(fd);
  if (!st.isFile() || st.size !== d.size) {
    closeSync(fd);
    throw new ImageError(`blob ${d.digest} is not the ${d.size}-byte file its descriptor says`);
  }
  return fd;
}

function readJsonBlob(layoutDir: string, d: Descriptor): unknown {
  if (d.size > MAX_JSON_BYTES) throw new ImageError(`${d.digest} is larger than ${MAX_JSON_BYTES} bytes`);
  const fd = openBlob(layoutDir, d);
  try {
    const buf = Buffer.alloc(d.size);
    let off = 0;
    while (off < d.size) {
      const n = readSync(fd, buf, off, d.size - off, off);
      if (n === 0) break;
      off += n;
    }
    if (`sha256:${createHash('sha256').update(buf).digest('hex')}` !== d.digest) throw new ImageError(`blob ${d.digest} does not match its digest`);
    return JSON.parse(buf.toString('utf8'));
  } catch (err) {
    if (err instanceof SyntaxError) throw new ImageError(`blob ${d.digest} is not JSON`);
    throw err;
  } finally {
    closeSync(fd);
  }
}

/** The image the layout's index names: through a manifest list to linux/amd64, then its config. */
export function readLayout(layoutDir: string): OciImage {
  const indexFd = openSync(join(layoutDir, 'index.json'), constants.O_RDONLY | constants.O_NOFOLLOW);
  let index: { manifests?: unknown[] };
  try {
    if (!fstatSync(indexFd).isFile() || fstatSync(indexFd).size > MAX_JSON_BYTES) throw new ImageError('index.json is not a file of at most 4 MiB');
    index = JSON.parse(readFileSync(indexFd, 'utf8')) as { manifests?: unknown[] };
  } catch (err) {
    if (err instanceof SyntaxError) throw new ImageError('index.json is not JSON');
    throw err;
  } finally {
    closeSync(indexFd);
  }
  let d = descriptor(index.manifests?.[0], 'the layout index');
  for (let depth = 0; INDEX_TYPES.has(d.mediaType); depth++) {
    if (depth > 2) throw new ImageError('manifest lists nest too deeply');
    const list = readJsonBlob(layoutDir, d) as { manifests?: unknown[] };
    const entries = (list.manifests ?? []).map((m, i) => descriptor(m, `manifest ${i} of the list`));
    d = entries.find((m) => m.platform?.os === 'linux' && m.platform.architecture === 'amd64') ?? (() => {
      throw new ImageError('the image has no linux/amd64 variant');
    })();
  }
  if (!MANIFEST_TYPES.has(d.mediaType)) throw new ImageError(`unsupported manifest type ${d.mediaType || '(none)'}`);
  const manifest = readJsonBlob(layoutDir, d) as { config?: unknown; layers?: unknown[] };
  const configDesc = descriptor(manifest.config, 'the manifest config');
  const layers = (manifest.layers ?? []).map((l, i) => descriptor(l, `layer ${i}`));
  for (const l of layers) {
    if (!GZIP_LAYERS.has(l.mediaType) && !PLAIN_LAYERS.has(l.mediaType)) {
      throw new ImageError(`layer ${l.digest} is ${l.mediaType}: only tar and tar+gzip layers are supported${l.mediaType.includes('zstd') ? ' (zstd needs Node 22)' : ''}`);
    }
  }
  const raw = readJsonBlob(layoutDir, configDesc) as { os?: string; architecture?: string; config?: RawConfig };
  if (raw.os !== 'linux' || raw.architecture !== 'amd64') throw new ImageError(`the image is ${raw.os ?? '?'}/${raw.architecture ?? '?'}; guests are linux/amd64`);
  return { manifestDigest: d.digest, config: imageConfigOf(raw.config ?? {}), layers: layers.map(({ digest, mediaType, size }) => ({ digest, mediaType, size })) };
}

interface RawConfig {
  Env?: unknown;
  WorkingDir?: unknown;
  User?: unknown;
  Cmd?: unknown;
  Entrypoint?: unknown;
  Labels?: unknown;
  ExposedPorts?: unknown;
}

const strings = (v: unknown): string[] | null => (Array.isArray(v) && v.every((s) => typeof s === 'string') ? v : null);

/** The OCI config's run settings, as a Dockerfile's build starts from them. */
export function imageConfigOf(c: RawConfig): ImageConfig {
  const env: [string, string][] = [];
  for (const kv of strings(c.Env) ?? []) {
    const eq = kv.indexOf('=');
    if (eq > 0) env.push([kv.slice(0, eq), kv.slice(eq + 1)]);
  }
  const labels = typeof c.Labels === 'object' && c.Labels !== null ? Object.entries(c.Labels).filter((e): e is [string, string] => typeof e[1] === 'string') : [];
  return {
    env,
    workdir: typeof c.WorkingDir === 'string' && c.WorkingDir.startsWith('/') ? c.WorkingDir : '/',
    user: typeof c.User === 'string' ? c.User : '',
    cmd: strings(c.Cmd),
    entrypoint: strings(c.Entrypoint),
    labels: labelsOf(labels),
    exposedPorts: typeof c.ExposedPorts === 'object' && c.ExposedPorts !== null ? Object.keys(c.ExposedPorts) : [],
  };
}

/** A layer's bytes as they stream, checked against its digest at the end (the caller's error then). */
export function openLayer(layoutDir: string, layer: LayerRef): Readable {
  const fd = openBlob(layoutDir, { ...layer });
  const hash = createHash('sha256');
  const check = new Transform({
    transform(chunk: Buffer, _enc, cb: TransformCallback) {
      hash.update(chunk);
      cb(null, chunk);
    },
    flush(cb: TransformCallback) {
      const got = `sha256:${hash.digest('hex')}`;
      cb(got === layer.digest ? null : new ImageError(`layer ${layer.digest} does not match its digest (${got})`));
    },
  });
  // pipeline: a read error reaches the reader as the stream's error, and ends both.
  pipeline(createReadStream('', { fd }), check, () => undefined);
  return check;
}
