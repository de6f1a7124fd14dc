/**
 * Checkpoints in object storage (docs/scaling.md, "Object storage"): each file a checkpoint's
 * description names (its disk layers, device state and RAM, as the frames a move sends) is
 * stored as content-addressed chunks (chunk-store.ts), and the description with the files'
 * chunk lists as one small object per checkpoint, `checkpoints/<id>.json`. The SHA-256 of that
 * object is what the store records: a restore reads it back only if it still has that digest,
 * then every chunk by its own, and the importing host checks each file against the digest its
 * capture recorded, exactly as for a move between hosts.
 */
import { createHash } from 'node:crypto';
import type { CheckpointArchive, CheckpointDescription, RemoteCheckpoint } from '../core/ports.js';
import { ChunkStore, ObjectStoreError, type ObjectStoreSettings, type StoredFile } from './chunk-store.js';

const FORMAT = 'vessel-checkpoint-v1';
/** A description names a chain of layers and their chunks: a chain of thousands of 4 MiB chunks stays far below this. */
const MAX_RECORD_BYTES = 16 * 1024 * 1024;
const FILE_NAME = /^(state|ram|[0-9a-f-]{36})$/;
const DIGEST = /^[0-9a-f]{64}$/;

interface ArchiveRecord {
  format: typeof FORMAT;
  checkpointId: string;
  description: CheckpointDescription;
  files: Record<string, StoredFile>;
}

const recordKey = (checkpointId: string): string => `checkpoints/${checkpointId}.json`;

/** What is wrong with a record read back, or null: it is read as hostile, field by field. */
function recordProblem(value: unknown, checkpointId: string): string | null {
  if (typeof value !== 'object' || value === null) return 'it is not an object';
  const r = value as Partial<ArchiveRecord>;
  if (r.format !== FORMAT) return `its format is not ${FORMAT}`;
  if (r.checkpointId !== checkpointId) return 'it names another checkpoint';
  const d = r.description as Partial<CheckpointDescription> | undefined;
  if (typeof d?.image !== 'string' || !Array.isArray(d.files) || !d.files.every((f) => typeof f === 'string' && FILE_NAME.test(f))) return 'its description is malformed';
  if (typeof r.files !== 'object' || r.files === null) return 'it lists no files';
  for (const name of d.files) {
    const f = (r.files as Record<string, Partial<StoredFile> | undefined>)[name];
    if (!Object.hasOwn(r.files, name) || f === undefined) return `its file '${name}' is not listed`;
    if (!Number.isSafeInteger(f.bytes) || f.bytes! < 0 || typeof f.sha256 !== 'string' || !DIGEST.test(f.sha256)) return `its file '${name}' is malformed`;
    if (!Array.isArray(f.chunks) || !f.chunks.every((c) => typeof c === 'string' && DIGEST.test(c))) return `its file '${name}' lists malformed chunks`;
  }
  return null;
}

export class ObjectCheckpointArchive implements CheckpointArchive {
  readonly chunks: ChunkStore;

  constructor(settings: ObjectStoreSettings) {
    this.chunks = new ChunkStore(settings);
  }

  async upload(checkpointId: string, source: RemoteCheckpoint): Promise<string> {
    const files: Record<string, StoredFile> = {};
    // One file at a time: memory stays one file's chunks in flight, whatever the chain's length.
    for (const name of source.description.files) {
      const { bytes, sha256, chunks } = await this.chunks.putFile(await source.open(name));
      files[name] = { bytes, sha256, chunks };
    }
    const { manifest, image, files: names } = source.description;
    const record: ArchiveRecord = { format: FORMAT, checkpointId, description: { manifest, image, files: names }, files };
    const body = Buffer.from(JSON.stringify(record));
    // Last: a record names only chunks already stored.
    await this.chunks.putSmall(recordKey(checkpointId), body);
    return createHash('sha256').update(body).digest('hex');
  }

  async open(checkpointId: string, digest: string): Promise<RemoteCheckpoint> {
    const body = await this.chunks.getSmall(recordKey(checkpointId), MAX_RECORD_BYTES);
    if (body === null) throw new ObjectStoreError('missing', `checkpoint ${checkpointId} is not in bucket '${this.chunks.bucket}'`);
    if (createHash('sha256').update(body).digest('hex') !== digest) throw new ObjectStoreError('corrupt', `checkpoint ${checkpointId}'s record in bucket '${this.chunks.bucket}' is not the one stored`);
    let record: unknown;
    try {
      record = JSON.parse(body.toString('utf8'));
    } catch {
      record = null;
    }
    const problem = recordProblem(record, checkpointId);
    if (problem !== null) throw new ObjectStoreError('corrupt', `checkpoint ${checkpointId}'s record in bucket '${this.chunks.bucket}' cannot be read: ${problem}`);
    const { description, files } = record as ArchiveRecord;
    return {
      description,
      open: async (file) => {
        if (!description.files.includes(file)) throw new ObjectStoreError('missing', `checkpoint ${checkpointId} has no stored file '${file.slice(0, 80)}'`);
        return this.chunks.openFile(files[file]!);
      },
    };
  }

  async forget(checkpointId: string): Promise<void> {
    await this.chunks.deleteKey(recordKey(checkpointId));
  }

  close(): void {
    this.chunks.close();
  }
}
