// A terminal over a WebSocket: type into it, resize it, and see the shell exit.
import { vessel, runtimeName } from './connect.js';

const rt = await vessel.runtimes.get(runtimeName);
const term = await rt.terminal({ rows: 24, cols: 80 });

let screen = '';
const decoder = new TextDecoder();
/** Resolves once the terminal has printed something that matches. */
const waitFor = (pattern: RegExp) =>
  new Promise<string>((resolve) => {
    const check = () => {
      const match = pattern.exec(screen);
      if (match === null) return;
      screen = screen.slice(match.index + match[0].length);
      stop();
      resolve(match[0]);
    };
    const stop = term.onData((bytes) => {
      screen += decoder.decode(bytes, { stream: true });
      check();
    });
    check();
  });

term.write('stty size\r');
console.log('size:', await waitFor(/24 80/));
term.resize(40, 120);
term.write('stty size\r');
console.log('resized:', await waitFor(/40 120/));

term.onExit(({ exit_code }) => console.log('shell exited', exit_code));
term.write('exit 3\r');
await term.wait();
