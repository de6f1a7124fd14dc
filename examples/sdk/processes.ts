// A background process: its output read, then read again from where the reader left off.
import { vessel, runtimeName } from './connect.js';

const rt = await vessel.runtimes.get(runtimeName);

// It reads lines from stdin and echoes them; it runs on without any client attached.
const proc = await rt.processes.start({ command: 'while read line; do echo "got $line"; done', stdin: true });
await rt.processes.stdin(proc.id, 'one\ntwo\n');

// Follow its output until both lines are back, then let go of it: the process runs on.
const first = await rt.processes.output(proc.id);
let seen = '';
for await (const event of first) {
  if (event.type === 'stdout') seen += event.chunk.text;
  if (seen.includes('got two\n')) break;
}
console.log(JSON.stringify(seen), 'read up to', first.position);

// More input and the end of it; then the rest, from that position: no gap, no repeat.
await rt.processes.stdin(proc.id, 'three\n', { eof: true });
const rest = await rt.processes.output(proc.id, { since: first.position, onStdout: (text) => process.stdout.write(text) });
const end = await rest.wait();
if (end.type === 'exit') console.log('exit', end.process.exit_code);

await rt.processes.forget(proc.id);
