/**
 * A TemplateBuilder for core and API tests: no skopeo, no disk. What it builds is told by the
 * image reference: `…/fail-<code>` fails its second step with that exit code; anything else
 * builds. A test can hold builds at their second step (`hold()`) to see them `building`.
 */
import type { Readable } from 'node:stream';
import { VesselError } from '../../src/core/errors.js';
import type { BuildReporter } from '../../src/core/build-log.js';
import type { BuildSource, BuiltTemplate, TemplateBuilder } from '../../src/core/ports.js';
import { BuildFailure } from '../../src/core/templates.js';

export const FAKE_DISK_BYTES = 1024 ** 3;

export class FakeTemplateBuilder implements TemplateBuilder {
  /** Uploaded archives by template id, as taken. */
  readonly archives = new Map<string, Buffer>();
  /** The sources builds were given (credentials included: the tests check they arrive, and only here). */
  readonly sources: Array<{ templateId: string; source: BuildSource }> = [];
  readonly discarded: string[] = [];
  #gate: Promise<void> | null = null;
  #reached = 0;
  #reachWaiters: Array<{ count: number; resolve: () => void }> = [];

  /** Builds wait at their second step until the returned function is called. */
  hold(): () => void {
    let open!: () => void;
    this.#gate = new Promise<void>((resolve) => (open = resolve));
    return () => {
      this.#gate = null;
      open();
    };
  }

  /** Resolves once `count` builds in all have reached their second step. */
  reached(count = 1): Promise<void> {
    if (this.#reached >= count) return Promise.resolve();
    return new Promise((resolve) => this.#reachWaiters.push({ count, resolve }));
  }

  async receiveArchive(templateId: string, body: Readable, maxBytes: number): Promise<number> {
    const chunks: Buffer[] = [];
    let total = 0;
    for await (const chunk of body) {
      total += (chunk as Buffer).length;
      if (total > maxBytes) {
        body.destroy();
        throw new VesselError('invalid_argument', `the image archive is larger than the limit of ${maxBytes} bytes`, { httpStatus: 413 });
      }
      chunks.push(chunk as Buffer);
    }
    if (total === 0) throw new VesselError('invalid_argument', 'the image archive is empty');
    this.archives.set(templateId, Buffer.concat(chunks));
    return total;
  }

  async build(templateId: string, source: BuildSource, report: BuildReporter, signal: AbortSignal): Promise<BuiltTemplate> {
    this.sources.push({ templateId, source });
    report.step(source.kind === 'image' ? `pull ${source.image}` : 'read the image archive');
    report.output('copying blobs\n');
    report.step('apply the layers');
    this.#reached++;
    this.#reachWaiters = this.#reachWaiters.filter((w) => (w.count <= this.#reached ? (w.resolve(), false) : true));
    const gate = this.#gate;
    if (gate !== null) {
      await Promise.race([gate, new Promise((resolve) => signal.addEventListener('abort', resolve, { once: true }))]);
    }
    if (signal.aborted) throw new BuildFailure('the build was cancelled');
    const failing = source.kind === 'image' ? /\/fail-(\d+)$/.exec(source.image) : null;
    if (failing !== null) {
      report.output('layer 2: refused\n');
      throw new BuildFailure('the layers could not be applied', Number(failing[1]));
    }
    report.step('write the root disk');
    return { config: { env: { PATH: '/usr/bin:/bin' }, workdir: '/', user: 'app', entrypoint: null, cmd: ['sh'] }, diskBytes: FAKE_DISK_BYTES };
  }

  async discard(templateId: string): Promise<void> {
    this.discarded.push(templateId);
    this.archives.delete(templateId);
  }
}
