/**
 * OCI images made in a test: layers as tar streams (test/support/tar-stream.ts), a config and a
 * manifest, written as an OCI image layout (index.json, oci-layout, blobs/sha256/…) that skopeo
 * reads as `oci:<dir>:image`. And a registry on loopback (Debian's docker-registry, the CNCF
 * distribution server) to push such images to, as a user's registry would serve them.
 */
import { spawn, type ChildProcess } from 'node:child_process';
import { createHash } from 'node:crypto';
import { mkdirSync, writeFileSync } from 'node:fs';
import { join } from 'node:path';
import { gunzipSync } from 'node:zlib';
import { eventually } from './agent-harness.js';
import { freePort } from './service.js';

const sha = (b: Buffer): string => `sha256:${createHash('sha256').update(b).digest('hex')}`;

export interface LayoutImage {
  /** Each layer's tar stream, gzipped or not. */
  layers: Buffer[];
  config?: { Env?: string[]; Cmd?: string[]; Entrypoint?: string[]; WorkingDir?: string; User?: string; Labels?: Record<string, string> };
}

/** Writes the layout and returns its manifest's digest. */
export function writeOciLayout(dir: string, image: LayoutImage): string {
  const blobs = join(dir, 'blobs', 'sha256');
  mkdirSync(blobs, { recursive: true });
  const put = (b: Buffer): { digest: string; size: number } => {
    const digest = sha(b);
    writeFileSync(join(blobs, digest.slice(7)), b);
    return { digest, size: b.length };
  };
  const layers = image.layers.map((l) => ({ mediaType: l[0] === 0x1f && l[1] === 0x8b ? 'application/vnd.oci.image.layer.v1.tar+gzip' : 'application/vnd.oci.image.layer.v1.tar', ...put(l) }));
  const config = put(Buffer.from(JSON.stringify({
    architecture: 'amd64',
    os: 'linux',
    config: image.config ?? {},
    // diff_ids are of the uncompressed tars; skopeo checks them when it reads a docker-archive.
    rootfs: { type: 'layers', diff_ids: image.layers.map((l) => sha(l[0] === 0x1f && l[1] === 0x8b ? gunzipSync(l) : l)) },
  })));
  const manifest = Buffer.from(JSON.stringify({ schemaVersion: 2, mediaType: 'application/vnd.oci.image.manifest.v1+json', config: { mediaType: 'application/vnd.oci.image.config.v1+json', ...config }, layers }));
  const m = put(manifest);
  writeFileSync(join(dir, 'oci-layout'), JSON.stringify({ imageLayoutVersion: '1.0.0' }));
  writeFileSync(join(dir, 'index.json'), JSON.stringify({ schemaVersion: 2, manifests: [{ mediaType: 'application/vnd.oci.image.manifest.v1+json', ...m, annotations: { 'org.opencontainers.image.ref.name': 'image' } }] }));
  return m.digest;
}

export class LocalRegistry {
  private constructor(
    readonly host: string,
    private readonly child: ChildProcess,
  ) {}

  /** docker-registry serving plain HTTP on 127.0.0.1, its storage in `dir`. */
  static async start(dir: string): Promise<LocalRegistry> {
    const port = await freePort();
    const config = join(dir, 'registry.yml');
    mkdirSync(join(dir, 'storage'), { recursive: true });
    writeFileSync(config, `version: 0.1\nlog:\n  level: error\nstorage:\n  filesystem:\n    rootdirectory: ${join(dir, 'storage')}\nhttp:\n  addr: 127.0.0.1:${port}\n`);
    const child = spawn('docker-registry', ['serve', config], { stdio: 'ignore' });
    const host = `127.0.0.1:${port}`;
    const registry = new LocalRegistry(host, child);
    try {
      await eventually(async () => ((await fetch(`http://${host}/v2/`).catch(() => null))?.ok === true ? true : undefined), 20_000, 'docker-registry to answer');
    } catch (err) {
      registry.stop();
      throw err;
    }
    return registry;
  }

  stop(): void {
    this.child.kill('SIGKILL');
  }
}
