/** Server-sent events of a fetch response, parsed as they come (one JSON `data:` line each). */
export interface Sse {
  event: string;
  data: any;
  id: string | undefined;
}

export async function* sseEvents(res: Response): AsyncGenerator<Sse> {
  const decoder = new TextDecoder();
  let buffer = '';
  for await (const chunk of res.body as unknown as AsyncIterable<Uint8Array>) {
    buffer += decoder.decode(chunk, { stream: true });
    for (let end = buffer.indexOf('\n\n'); end >= 0; end = buffer.indexOf('\n\n')) {
      const block = buffer.slice(0, end);
      buffer = buffer.slice(end + 2);
      const fields = new Map<string, string>();
      for (const line of block.split('\n')) {
        if (line.startsWith(':')) continue;
        const colon = line.indexOf(': ');
        if (colon > 0) fields.set(line.slice(0, colon), line.slice(colon + 2));
      }
      if (!fields.has('event')) continue;
      yield { event: fields.get('event')!, data: JSON.parse(fields.get('data') ?? 'null'), id: fields.get('id') };
    }
  }
}

/** An output event's bytes, whatever its encoding. */
export const eventBytes = (e: Sse): Buffer => Buffer.from(e.data.data, e.data.encoding === 'base64' ? 'base64' : 'utf8');
