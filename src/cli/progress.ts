/** The build progress display: a bar on a terminal, plain lines elsewhere (CI logs). */
import cliProgress from 'cli-progress';
import type { BuildProgress } from '../vm/guest-image.js';

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
