// Checkpoint a runtime, then fork a new runtime from it: memory, disk and processes come along.
import { vessel, runtimeName } from './connect.js';

const rt = await vessel.runtimes.get(runtimeName);
await rt.files.write('/root/state.txt', 'before the checkpoint\n');

const checkpoint = await rt.checkpoint({ name: `example-${Date.now()}` });
console.log(`checkpoint ${checkpoint.display_name} is ${checkpoint.state}`);

// fork() waits while the checkpoint is still being captured.
const fork = await vessel.runtimes.fork(checkpoint, { display_name: `fork-${Date.now()}` });
try {
  console.log(`fork ${fork.name} is ${fork.status}:`, await fork.files.readText('/root/state.txt'));
} finally {
  await fork.delete();
  await vessel.checkpoints.delete(checkpoint.id);
}
