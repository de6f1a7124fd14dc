// Create a runtime, run a command in it, delete it.
import { vessel } from './connect.js';

const rt = await vessel.runtimes.create({
  display_name: `quickstart-${Date.now()}`,
  resources: { vcpus: 1, limits: { memory_mib: 512 } },
});
try {
  console.log(`${rt.name} is ${rt.status}`);
  const result = await rt.exec('echo "hello from $(hostname)"');
  console.log(result.exit_code, result.stdout.trim());
} finally {
  await rt.delete();
}
