// A terminal over a WebSocket: type into it, resize it, and see the shell exit.
import { vessel, runtimeName } from './connect.js';

const rt = await vessel.runtimes.get(runtimeName);
const term = await rt.terminal({ rows: 24, cols: 80 });

// What the terminal shows, and one wait at a time for text to appear in it.
let screen = '';
let waiting: { pattern: RegExp; resolve: (text: string) => void } | undefined;
const look = () => {
  const match = waiting?.pattern.exec(screen);
  if (waiting === undefined || match === null || match === undefined) return;
  screen = screen.slice(match.index + match[0].length);
  waiting.resolve(match[0]);
  waiting = undefined;
};
const decoder = new TextDecoder();
term.onData((bytes) => {
  screen += decoder.decode(bytes, { stream: true });
  look();
});
const waitFor = (pattern: RegExp) =>
  new Promise<string>((resolve) => {
    waiting = { pattern, resolve };
    look();
  });

term.write('stty size\r');
console.log('size:', await waitFor(/24 80/));

// A resize reaches the program in the terminal as SIGWINCH. This one waits for it, then prints
// the new size. ($((1+1)) keeps the echo of what was typed from matching what it prints.)
term.write(`sh -c 'trap "stty size; exit" WINCH; echo ready-$((1+1)); while :; do sleep 1 & wait $!; done'\r`);
await waitFor(/ready-2/);
term.resize(40, 120);
console.log('resized:', await waitFor(/40 120/));

term.onExit(({ exit_code }) => console.log('shell exited', exit_code));
term.write('exit 3\r');
await term.wait();
