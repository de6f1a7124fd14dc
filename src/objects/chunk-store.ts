/**
 * Files as immutable, content-addressed chunks in an S3 bucket (docs/scaling.md, "Object
 * storage"). A file is cut into chunks of CHUNK_BYTES; each is stored once under the SHA-256 of
 * its bytes (`chunks/<digest>`), so a chunk two files share (a template layer every checkpoint
 * of a tenant stands on, the frames of a RAM file's empty pages) crosses the network and takes
 * space once. A file is then its list of chunk digests, its length and the digest of all its
 * bytes: what `openFile` checks on the way back, chunk by chunk, before it passes on a byte.
 *
 * Memory is bounded by the chunk size: an upload holds at most UPLOADS_IN_FLIGHT chunks and the
 * one it is filling, a download the chunk it checks and the one it fetches next. An upload is
 * idempotent: a chunk already in the bucket (an earlier upload cut short, another file's) is not
 * sent again. Chunks are never overwritten, so a reader never sees one change under it.
 */
import { createHash } from 'node:crypto';
import { Readable } from 'node:stream';
import { VesselError } from '../core/errors.js';
import { CreateBucketCommand, DeleteObjectCommand, GetObjectCommand, HeadBucketCommand, HeadObjectCommand, PutObjectCommand, S3Client, S3ServiceException } from '@aws-sdk/client-s3';

/** 4 MiB: large enough that per-request costs vanish, small enough to hold a few in memory. */
export const CHUNK_BYTES = 4 * 1024 * 1024;
const UPLOADS_IN_FLIGHT = 3;
const DIGEST = /^[0-9a-f]{64}$/;

export interface ObjectStoreSettings {
  /** The S3 endpoint, `http(s)://host[:port]`; addressed path-style (`/<bucket>/<key>`), which every S3-compatible server takes. */
  endpoint: string;
  bucket: string;
  region: string;
  /** Explicit keys; null leaves them to the AWS SDK's default chain (AWS_* variables, web identity, instance roles). */
  credentials: { accessKeyId: string; secretAccessKey: string } | null;
}

/** A file as stored: its length, the SHA-256 of its bytes, and its chunks' digests in order. */
export interface StoredFile {
  bytes: number;
  sha256: string;
  chunks: string[];
}

/**
 * What the bucket holds is not what was stored: a chunk is missing, or its bytes differ from its
 * digest. A precondition failure: no retry brings the bytes back.
 */
export class ObjectStoreError extends VesselError {
  constructor(
    readonly kind: 'missing' | 'corrupt',
    message: string,
  ) {
    super('failed_precondition', message);
  }
}

const chunkKey = (digest: string): string => `chunks/${digest}`;

const isNotFound = (err: unknown): boolean =>
  err instanceof S3ServiceException && (err.name === 'NotFound' || err.name === 'NoSuchKey' || err.$metadata.httpStatusCode === 404);

export class ChunkStore {
  readonly #s3: S3Client;
  readonly bucket: string;

  constructor(settings: ObjectStoreSettings) {
    this.bucket = settings.bucket;
    this.#s3 = new S3Client({
      endpoint: settings.endpoint,
      region: settings.region,
      forcePathStyle: true,
      ...(settings.credentials === null ? {} : { credentials: settings.credentials }),
      // Checksums only where S3 requires them: the SDK's default (CRC32 on every request) is not
      // understood by every S3-compatible server, and each chunk is checked by its digest anyway.
      requestChecksumCalculation: 'WHEN_REQUIRED',
      responseChecksumValidation: 'WHEN_REQUIRED',
      requestHandler: { connectionTimeout: 10_000, requestTimeout: 120_000 },
      maxAttempts: 4,
    });
  }

  /** Makes the bucket when it does not exist (a fresh server; an operator's bucket is left as it is). */
  async ensureBucket(): Promise<void> {
    try {
      await this.#s3.send(new HeadBucketCommand({ Bucket: this.bucket }));
    } catch (err) {
      if (!isNotFound(err)) throw err;
      await this.#s3.send(new CreateBucketCommand({ Bucket: this.bucket }));
    }
  }

  /** Stores a stream's bytes as chunks, sending only those the bucket lacks. */
  async putFile(source: AsyncIterable<Buffer>): Promise<StoredFile & { sent: number }> {
    const whole = createHash('sha256');
    const chunks: string[] = [];
    const inFlight = new Set<Promise<void>>();
    // The first upload that failed; set from its callback, so read through an object.
    const failed: { error?: Error } = {};
    let bytes = 0;
    let sent = 0;
    let filling: Buffer[] = [];
    let filled = 0;
    const flush = async (): Promise<void> => {
      const chunk = Buffer.concat(filling, filled);
      filling = [];
      filled = 0;
      const digest = createHash('sha256').update(chunk).digest('hex');
      chunks.push(digest);
      const upload = this.#putChunk(digest, chunk).then(
        (wasSent) => {
          if (wasSent) sent++;
        },
        (err: unknown) => {
          failed.error ??= err instanceof Error ? err : new Error(String(err));
        },
      );
      const tracked = upload.finally(() => inFlight.delete(tracked));
      inFlight.add(tracked);
      if (inFlight.size >= UPLOADS_IN_FLIGHT) await Promise.race(inFlight);
      if (failed.error !== undefined) throw failed.error;
    };
    for await (const piece of source) {
      whole.update(piece);
      bytes += piece.length;
      let offset = 0;
      while (offset < piece.length) {
        const take = Math.min(piece.length - offset, CHUNK_BYTES - filled);
        filling.push(piece.subarray(offset, offset + take));
        filled += take;
        offset += take;
        if (filled === CHUNK_BYTES) await flush();
      }
    }
    if (filled > 0) await flush();
    await Promise.all(inFlight);
    if (failed.error !== undefined) throw failed.error;
    return { bytes, sha256: whole.digest('hex'), chunks, sent };
  }

  /** True when the chunk was sent, false when the bucket had it already. */
  async #putChunk(digest: string, chunk: Buffer): Promise<boolean> {
    try {
      await this.#s3.send(new HeadObjectCommand({ Bucket: this.bucket, Key: chunkKey(digest) }));
      return false;
    } catch (err) {
      if (!isNotFound(err)) throw err;
    }
    await this.#s3.send(new PutObjectCommand({ Bucket: this.bucket, Key: chunkKey(digest), Body: chunk, ContentLength: chunk.length }));
    return true;
  }

  /**
   * A stored file's bytes, each chunk checked against its digest before any of it is passed on,
   * and the whole against the file's length and digest at the end. A chunk that is gone or
   * differs fails the stream with an ObjectStoreError.
   */
  openFile(file: StoredFile): Readable {
    const getChunk = (digest: string, left: number): Promise<Buffer> => this.#getChunk(digest, left);
    return Readable.from(
      (async function* () {
        const whole = createHash('sha256');
        let bytes = 0;
        let next = file.chunks.length > 0 ? getChunk(file.chunks[0]!, file.bytes) : null;
        for (let i = 0; next !== null; i++) {
          const chunk = await next;
          // One chunk ahead: the next request runs while this one is consumed.
          next = i + 1 < file.chunks.length ? getChunk(file.chunks[i + 1]!, file.bytes - bytes - chunk.length) : null;
          next?.catch(() => undefined);
          whole.update(chunk);
          bytes += chunk.length;
          yield chunk;
        }
        if (bytes !== file.bytes || whole.digest('hex') !== file.sha256) throw new ObjectStoreError('corrupt', `a stored file's chunks make ${bytes} bytes that differ from the ${file.bytes} recorded`);
      })(),
      { objectMode: false },
    );
  }

  /** One chunk, read whole (at most CHUNK_BYTES, and no more than `left` of its file) and checked. */
  async #getChunk(digest: string, left: number): Promise<Buffer> {
    if (!DIGEST.test(digest)) throw new ObjectStoreError('corrupt', `'${digest.slice(0, 80)}' is not a chunk's digest`);
    const bound = Math.min(CHUNK_BYTES, Math.max(left, 0));
    let body: AsyncIterable<Uint8Array>;
    try {
      const answer = await this.#s3.send(new GetObjectCommand({ Bucket: this.bucket, Key: chunkKey(digest) }));
      body = answer.Body as AsyncIterable<Uint8Array>;
    } catch (err) {
      if (isNotFound(err)) throw new ObjectStoreError('missing', `chunk ${digest} is not in bucket '${this.bucket}'`);
      throw err;
    }
    const parts: Buffer[] = [];
    let length = 0;
    for await (const part of body) {
      length += part.length;
      if (length > bound) {
        (body as Partial<Readable>).destroy?.();
        throw new ObjectStoreError('corrupt', `chunk ${digest} in bucket '${this.bucket}' is longer than a chunk of its file can be`);
      }
      parts.push(Buffer.from(part.buffer, part.byteOffset, part.length));
    }
    const chunk = Buffer.concat(parts, length);
    if (createHash('sha256').update(chunk).digest('hex') !== digest) throw new ObjectStoreError('corrupt', `chunk ${digest} in bucket '${this.bucket}' differs from its digest`);
    return chunk;
  }

  /** A small object read whole, at most `maxBytes`; null when absent. */
  async getSmall(key: string, maxBytes: number): Promise<Buffer | null> {
    let body: AsyncIterable<Uint8Array>;
    try {
      body = (await this.#s3.send(new GetObjectCommand({ Bucket: this.bucket, Key: key }))).Body as AsyncIterable<Uint8Array>;
    } catch (err) {
      if (isNotFound(err)) return null;
      throw err;
    }
    const parts: Buffer[] = [];
    let length = 0;
    for await (const part of body) {
      length += part.length;
      if (length > maxBytes) {
        (body as Partial<Readable>).destroy?.();
        throw new ObjectStoreError('corrupt', `object '${key}' in bucket '${this.bucket}' is larger than ${maxBytes} bytes`);
      }
      parts.push(Buffer.from(part.buffer, part.byteOffset, part.length));
    }
    return Buffer.concat(parts, length);
  }

  async putSmall(key: string, body: Buffer): Promise<void> {
    await this.#s3.send(new PutObjectCommand({ Bucket: this.bucket, Key: key, Body: body, ContentLength: body.length }));
  }

  async deleteKey(key: string): Promise<void> {
    await this.#s3.send(new DeleteObjectCommand({ Bucket: this.bucket, Key: key }));
  }

  /** Whether a chunk is in the bucket (tests, and a check before a restore). */
  async hasChunk(digest: string): Promise<boolean> {
    try {
      await this.#s3.send(new HeadObjectCommand({ Bucket: this.bucket, Key: chunkKey(digest) }));
      return true;
    } catch (err) {
      if (isNotFound(err)) return false;
      throw err;
    }
  }

  close(): void {
    this.#s3.destroy();
  }
}
