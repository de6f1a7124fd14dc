// Output as it is produced: callbacks, or an async iterator over the events.
import { vessel, runtimeName } from './connect.js';

const rt = await vessel.runtimes.get(runtimeName);

// Callbacks, and wait() for the exit.
const build = await rt.execStream('for i in 1 2 3; do echo "step $i"; done; echo "warning" >&2; exit 3', {
  onStdout: (text) => process.stdout.write(`[out] ${text}`),
  onStderr: (text) => process.stdout.write(`[err] ${text}`),
});
const { exit_code, duration_ms } = await build.wait();
console.log(`exit ${exit_code} after ${duration_ms} ms`);

// The same as events; binary output comes as bytes (chunk.bytes), text as text.
for await (const event of await rt.execStream({ command: 'ls', args: ['-1', '/'] })) {
  if (event.type === 'start') console.log(`started as process ${event.process.id}`);
  if (event.type === 'stdout') console.log(`${event.chunk.text.split('\n').length - 1} lines at offset ${event.chunk.offset}`);
  if (event.type === 'exit') console.log(`ls exited ${event.exit_code}`);
}
