/**
 * Server-sent events read from a fetch response body, parsed by eventsource-parser. fetch has no
 * EventSource's limits on methods and headers: exec streams are POSTs with a bearer token.
 */
import { createParser, type EventSourceMessage } from 'eventsource-parser';
import { VesselError } from './errors.js';

export type { EventSourceMessage };

/**
 * The most characters one event may take while it arrives. The service's largest events carry
 * one output chunk of the guest agent (64 KiB, as base64 about 88 Ki characters); a stream that
 * goes past this without ending an event is broken or hostile, and would otherwise grow without
 * bound here.
 */
const MAX_EVENT_CHARS = 4 * 1024 * 1024;

/** Each event as it is complete. Leaving the loop early cancels the body, which ends the request. */
export async function* serverEvents(body: ReadableStream<Uint8Array>): AsyncGenerator<EventSourceMessage, void, undefined> {
  const ready: EventSourceMessage[] = [];
  let overflow = false;
  const parser = createParser({
    maxBufferSize: MAX_EVENT_CHARS,
    onEvent: (event) => ready.push(event),
    onError: (error) => (overflow ||= error.type === 'max-buffer-size-exceeded'),
  });
  const decoder = new TextDecoder();
  const reader = body.getReader();
  try {
    for (;;) {
      const { done, value } = await reader.read();
      if (done) return;
      parser.feed(decoder.decode(value, { stream: true }));
      if (overflow) throw new VesselError('internal', `an event from the service ran past ${MAX_EVENT_CHARS} characters`, { status: 0 });
      yield* ready.splice(0);
    }
  } finally {
    await reader.cancel().catch(() => undefined);
  }
}
