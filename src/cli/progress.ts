/** Progress displays: the image build's (a bar on a terminal, plain lines elsewhere, such as CI logs) and file transfers'. */
import cliProgress from 'cli-progress';
import type { BuildProgress } from '../vm/guest-image.js';
import { formatBytes } from './shared/output.js';

export function progressDisplay(stream: NodeJS.WriteStream = process.stderr): BuildProgress {
  if (!stream.isTTY) {
    let last = -1;
    let started = Date.now();
    return {
      step(title, index, total) {
        started = Date.now();
        last = -1;
        stream.write(`[image ${index}/${total}] ${title}\n`);
      },
      fraction(f) {
        const tenth = Math.floor(f * 10);
        if (tenth > last) {
          last = tenth;
          if (tenth > 0) stream.write(`  ${tenth * 10}% (${((Date.now() - started) / 1000).toFixed(0)} s)\n`);
        }
      },
      finish: (message) => void stream.write(`${message}\n`),
    };
  }
  const bar = new cliProgress.SingleBar(
    { format: '{step} [{bar}] {percentage}% | {title}', stream, hideCursor: true, clearOnComplete: false },
    cliProgress.Presets.shades_classic,
  );
  let running = false;
  return {
    step(title, index, total) {
      if (running) bar.update(100);
      if (!running) bar.start(100, 0, { step: `${index}/${total}`, title });
      running = true;
      bar.update(0, { step: `${index}/${total}`, title });
    },
    fraction: (f) => bar.update(Math.round(f * 100)),
    finish(message) {
      if (running) bar.stop();
      running = false;
      stream.write(`${message}\n`);
    },
  };
}

/** Bytes a transfer moves, reported as they pass. */
export interface TransferProgress {
  add(bytes: number): void;
  finish(): void;
}

/** Below this a transfer is over before a bar could say anything. */
const MIN_BAR_BYTES = 1024 * 1024;

export const NO_PROGRESS: TransferProgress = { add() {}, finish() {} };

/**
 * A bar for a file transfer on a terminal (`total` known: a percentage; unknown: the bytes so
 * far), nothing elsewhere: a script reading stderr gets errors only.
 */
export function transferProgress(label: string, total: number | undefined, stream: NodeJS.WriteStream = process.stderr): TransferProgress {
  if (!stream.isTTY || (total !== undefined && total < MIN_BAR_BYTES)) return NO_PROGRESS;
  const started = Date.now();
  const format = total === undefined ? '{label} {done} | {rate}' : '{label} [{bar}] {percentage}% | {done} of {size} | {rate}';
  const bar = new cliProgress.SingleBar({ format, stream, hideCursor: true, clearOnComplete: false }, cliProgress.Presets.shades_classic);
  const payload = (done: number) => ({
    label,
    done: formatBytes(done),
    size: formatBytes(total ?? 0),
    rate: `${formatBytes(Math.round((done * 1000) / Math.max(1, Date.now() - started)))}/s`,
  });
  let done = 0;
  // A total that was an estimate (a directory's archive) must not push the bar past its end.
  const shown = () => (total === undefined ? 0 : Math.min(done, total));
  bar.start(total ?? 0, 0, payload(0));
  return {
    add(bytes) {
      done += bytes;
      bar.update(shown(), payload(done));
    },
    finish() {
      if (total !== undefined) done = Math.max(done, total);
      bar.update(shown(), payload(done));
      bar.stop();
    },
  };
}

/** Passes `source` through, telling `progress` of each chunk. */
export async function* counted(source: AsyncIterable<Uint8Array>, progress: TransferProgress): AsyncGenerator<Uint8Array, void, undefined> {
  for await (const chunk of source) {
    progress.add(chunk.length);
    yield chunk;
  }
}
