/**
 * Uploads of this VM host's ready checkpoints to object storage (docs/scaling.md, "Object
 * storage"), so that one outlives its host. In the background, one checkpoint at a time (an
 * upload holds a few chunks in memory and shares the host's network with its guests). The store
 * is the queue: a checkpoint is pending while its row is ready and has no archive digest, so a
 * restart, or the retry after a failure, takes up whatever was left, and chunks already sent are
 * not sent again. System templates are not uploaded: each host makes its own.
 */
import type { CheckpointArchive, CheckpointFiles, Store } from './ports.js';
import type { Logger } from './runtimes.js';

/** After a failed upload (the bucket unreachable), the pending list is read again this much later. */
export const UPLOAD_RETRY_MS = 60_000;

export class CheckpointUploads {
  #running: Promise<void> | null = null;
  /** Another pass is wanted once the current one ends: a checkpoint became ready meanwhile. */
  #again = false;
  #retry: NodeJS.Timeout | null = null;
  #closed = false;

  constructor(
    private readonly store: Store,
    private readonly files: CheckpointFiles,
    private readonly archive: CheckpointArchive,
    private readonly log: Logger,
    private readonly node: string | null,
    private readonly retryMs = UPLOAD_RETRY_MS,
  ) {}

  /** Uploads every pending checkpoint of this host: after a start, and when one becomes ready. */
  kick(): void {
    if (this.#closed) return;
    if (this.#running !== null) {
      this.#again = true;
      return;
    }
    this.#running = this.#pass().finally(() => {
      this.#running = null;
      if (this.#again) {
        this.#again = false;
        this.kick();
      }
    });
  }

  async #pass(): Promise<void> {
    let failed = false;
    try {
      for (const id of await this.store.checkpoints.listUnarchived(this.node)) {
        if (this.#closed) return;
        try {
          await this.#upload(id);
        } catch (err) {
          failed = true;
          this.log.warn({ checkpointId: id, err: (err as Error).message }, 'checkpoint upload to object storage failed; retrying later');
        }
      }
    } catch (err) {
      failed = true;
      this.log.warn({ err: (err as Error).message }, 'could not list the checkpoints to upload; retrying later');
    }
    if (failed && !this.#closed && this.#retry === null) {
      this.#retry = setTimeout(() => {
        this.#retry = null;
        this.kick();
      }, this.retryMs);
      this.#retry.unref();
    }
  }

  async #upload(checkpointId: string): Promise<void> {
    const description = await this.files.describeCheckpoint(checkpointId);
    const digest = await this.archive.upload(checkpointId, { description, open: (file) => this.files.readCheckpointFile(checkpointId, file) });
    if (await this.store.checkpoints.setArchived(checkpointId, digest)) {
      this.log.info({ checkpointId }, 'checkpoint stored in object storage');
    } else {
      // Deleted while it was uploaded: what the record named goes with it.
      await this.archive.forget(checkpointId);
    }
  }

  /** The pass running now, for tests and shutdown. */
  settled = (): Promise<void> => this.#running ?? Promise.resolve();

  close(): void {
    this.#closed = true;
    if (this.#retry !== null) clearTimeout(this.#retry);
  }
}
