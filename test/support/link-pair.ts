/** Two ends of an in-memory duplex, as a socket pair would give: what one writes the other reads. */
import { Duplex, PassThrough } from 'node:stream';

export function duplexPair(): [Duplex, Duplex] {
  const aToB = new PassThrough();
  const bToA = new PassThrough();
  const end = (readable: PassThrough, writable: PassThrough) =>
    new Duplex({
      read() {},
      write(chunk, _enc, done) {
        writable.write(chunk, done);
      },
      destroy(err, done) {
        writable.destroy();
        readable.destroy();
        done(err);
      },
    });
  const a = end(bToA, aToB);
  const b = end(aToB, bToA);
  aToB.on('data', (c) => b.push(c));
  bToA.on('data', (c) => a.push(c));
  aToB.on('close', () => b.destroy());
  bToA.on('close', () => a.destroy());
  return [a, b];
}
