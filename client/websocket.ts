/**
 * Opening a WebSocket to the service wherever the SDK runs. Browsers and Node 22+ have a global
 * WebSocket; Node 20 has none, so there the `ws` package is loaded, only then. Both are used
 * through the browser's interface. The token travels in a subprotocol, as a browser must send
 * it (docs/processes.md, "Authentication"), never in the URL where logs would keep it.
 */
import { bytesToBase64Url } from './encoding.js';
import { VesselError, codeOfStatus } from './errors.js';

/** The browser's WebSocket constructor; the `ws` package's class has the same shape. */
export type WebSocketClass = new (url: string, protocols?: string | string[]) => WebSocket;

/** The subprotocol the service selects; a browser fails an upgrade answered with none. */
const PROTOCOL = 'vessel.v1';
const BEARER_PREFIX = 'vessel.bearer.';

/** In a variable so that a bundler building for a browser leaves it alone. */
const WS_PACKAGE = 'ws';

async function webSocketClass(given: WebSocketClass | undefined): Promise<WebSocketClass> {
  if (given !== undefined) return given;
  const global = (globalThis as { WebSocket?: WebSocketClass }).WebSocket;
  if (global !== undefined) return global;
  const ws = (await import(/* webpackIgnore: true */ /* @vite-ignore */ WS_PACKAGE)) as { WebSocket: WebSocketClass };
  return ws.WebSocket;
}

/** The error a refused upgrade stands for: `ws` says the status in its message, a browser says nothing. */
function upgradeError(event: Event): VesselError {
  const message = (event as Event & { message?: string }).message ?? '';
  const status = Number(/Unexpected server response: (\d{3})/.exec(message)?.[1] ?? 0);
  const code = status === 0 ? 'unavailable' : codeOfStatus(status);
  return new VesselError(code, `the WebSocket could not be opened${message === '' ? '' : `: ${message}`}`, { status });
}

/**
 * A socket to `url` (http or https, made ws or wss), with binary messages as ArrayBuffers. It is
 * still connecting: listen to it before awaiting whenOpen(), or its first messages are missed.
 */
export async function createWebSocket(url: string, token: string, given: WebSocketClass | undefined): Promise<WebSocket> {
  const Class = await webSocketClass(given);
  const bearer = BEARER_PREFIX + bytesToBase64Url(new TextEncoder().encode(token));
  const socket = new Class(url.replace(/^http/, 'ws'), [PROTOCOL, bearer]);
  socket.binaryType = 'arraybuffer';
  return socket;
}

/** Resolves once the socket is open; rejects with a VesselError if the upgrade fails, or the signal's reason. */
export function whenOpen(socket: WebSocket, signal: AbortSignal | undefined): Promise<void> {
  return new Promise<void>((resolve, reject) => {
    const settle = (error?: Error) => {
      socket.removeEventListener('open', onOpen);
      socket.removeEventListener('error', onError);
      socket.removeEventListener('close', onClose);
      signal?.removeEventListener('abort', onAbort);
      if (error === undefined) resolve();
      else reject(error);
    };
    const onOpen = () => settle();
    let failure: VesselError | undefined;
    const onError = (event: Event) => (failure = upgradeError(event));
    // A failed upgrade is an error, then a close: the close is where it is final.
    const onClose = () => settle(failure ?? new VesselError('unavailable', 'the WebSocket closed before it opened', { status: 0 }));
    const onAbort = () => {
      socket.close();
      // An AbortError, unless the caller aborted with a reason of its own.
      settle(signal!.reason as Error);
    };
    if (signal?.aborted === true) return onAbort();
    socket.addEventListener('open', onOpen);
    socket.addEventListener('error', onError);
    socket.addEventListener('close', onClose);
    signal?.addEventListener('abort', onAbort, { once: true });
  });
}
