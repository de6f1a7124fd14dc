/**
 * An OCI image made into a template's root disk: fetched (skopeo, oci-image.ts), its layers
 * applied onto a FileTree (layer-apply.ts), the Vessel guest kit laid in (guest-kit.ts), and the
 * whole written into an ext4 image of the size asked for (ext4-image.ts). The result boots with
 * the default image's kernel and initrd, and is the bottom of its template's disk chain, as
 * rootfs.img is for the default image.
 */
import { join } from 'node:path';
import type { BlobStore } from './blob-store.js';
import { writeExt4, type Ext4Result } from './ext4-image.js';
import { FileTree, TreeError } from './file-tree.js';
import { addGuestKit, KitError, type GuestKit } from './guest-kit.js';
import { applyLayer, LayerBudget, LayerError, type LayerLimits } from './layer-apply.js';
import { fetchImage, ImageError, openLayer, readLayout, type FetchOptions, type ImageSource, type OciImage } from './oci-image.js';

export interface ImageRootfsOptions {
  /** A directory of the build's own: the OCI layout goes there. */
  workDir: string;
  /** The build's own store: what the finished image does not hold is removed from it. */
  blobs: BlobStore;
  kit: GuestKit;
  /** The root disk's size, as the guest sees it. */
  diskBytes: number;
  limits?: LayerLimits;
  runAs?: FetchOptions['runAs'];
  /** Called as each step begins, for the build's log. */
  step?: (name: string) => void;
  /** Checked between steps: once aborted, the next step does not begin. */
  signal?: AbortSignal;
}

/** What an aborted build throws at its next step. */
export class BuildCancelled extends Error {
  constructor() {
    super('the build was cancelled');
  }
}

export interface ImageRootfs {
  image: OciImage;
  tree: FileTree;
  ext4: Ext4Result;
  /** For the build's log: what was left out of the image. */
  warnings: string[];
}

/** The image's file tree, its layers applied in order. */
export async function imageTree(layoutDir: string, image: OciImage, blobs: BlobStore, limits?: LayerLimits): Promise<{ tree: FileTree; warnings: string[] }> {
  const tree = new FileTree();
  const budget = new LayerBudget(limits);
  for (const [i, layer] of image.layers.entries()) {
    try {
      await applyLayer(tree, blobs, openLayer(layoutDir, layer), `${i + 1} (${layer.digest.slice(7, 19)})`, budget);
    } catch (err) {
      if (err instanceof LayerError || err instanceof TreeError) throw new ImageError(err.message);
      throw err;
    }
  }
  const warnings = budget.devicesDropped === 0 ? [] : [`${budget.devicesDropped} device nodes were left out (the guest's /dev is its own): ${budget.devicePaths.join(', ')}${budget.devicesDropped > budget.devicePaths.length ? ', …' : ''}`];
  return { tree, warnings };
}

export async function imageRootfs(source: ImageSource, ext4File: string, opts: ImageRootfsOptions): Promise<ImageRootfs> {
  const step = (name: string): void => {
    if (opts.signal?.aborted === true) throw new BuildCancelled();
    opts.step?.(name);
  };
  const layoutDir = join(opts.workDir, 'layout');
  step(source.kind === 'registry' ? `pull ${source.reference}` : 'read the image archive');
  await fetchImage(source, layoutDir, { workDir: opts.workDir, runAs: opts.runAs });
  const image = readLayout(layoutDir);
  step(`apply ${image.layers.length} layer${image.layers.length === 1 ? '' : 's'}`);
  const { tree, warnings } = await imageTree(layoutDir, image, opts.blobs, opts.limits);
  step('add the Vessel guest');
  try {
    await addGuestKit(tree, opts.blobs, opts.kit);
  } catch (err) {
    if (err instanceof KitError || err instanceof TreeError) throw new ImageError(`the Vessel guest cannot be added: ${err.message}`);
    throw err;
  }
  opts.blobs.retain(tree.digests());
  step('write the root disk');
  const ext4 = await writeExt4(tree, opts.blobs, ext4File, { sizeBytes: opts.diskBytes });
  return { image, tree, ext4, warnings };
}
