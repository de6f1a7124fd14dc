// Errors are VesselErrors with the service's code; any call can be cancelled with a signal.
import { VesselError } from 'vessel/client';
import { vessel, runtimeName } from './connect.js';

try {
  await vessel.runtimes.get('no-such-runtime');
} catch (err) {
  if (!(err instanceof VesselError)) throw err;
  console.log(err.code, err.status, err.message, `(request ${err.requestId})`);
}

const rt = await vessel.runtimes.get(runtimeName);
const controller = new AbortController();
const stream = await rt.execStream('sleep 600', { signal: controller.signal });
controller.abort(); // the stream ends and the service kills the command
try {
  await stream.wait();
} catch (err) {
  console.log('cancelled:', (err as Error).name);
}
