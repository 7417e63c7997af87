// A server-sent events parser, as the WHATWG HTML standard's "event stream
// interpretation" reads a text/event-stream body.

/** One dispatched server-sent event. */
export interface ServerSentEvent {
  /** The `id:` field of the event, or undefined when it had none. */
  id: string | undefined;
  /** The `event:` field, "message" when absent. */
  event: string;
  /** The `data:` lines joined by "\n". */
  data: string;
  /** The `retry:` field in milliseconds, when the event set one. */
  retry: number | undefined;
}

/**
 * parseEvents yields the events of an event stream body as they complete.
 * Lines end with CRLF, LF or CR; comments (lines starting with ":") and
 * unknown fields are ignored; an event without data is not dispatched
 * unless it sets retry. An event cut off by the end of the body is dropped,
 * as the standard says. A read error of the body is thrown.
 */
export async function* parseEvents(body: ReadableStream<Uint8Array>): AsyncGenerator<ServerSentEvent> {
  const reader = body.pipeThrough(new TextDecoderStream()).getReader();
  let buffer = "";
  let id: string | undefined;
  let event = "";
  let data: string[] = [];
  let retry: number | undefined;
  try {
    for (;;) {
      const { value, done } = await reader.read();
      if (done) return;
      buffer += value;
      for (;;) {
        const end = buffer.search(/\r\n|\r|\n/);
        // A CR last in the buffer may be the first half of a CRLF.
        if (end < 0 || (end === buffer.length - 1 && buffer[end] === "\r")) break;
        const line = buffer.slice(0, end);
        buffer = buffer.slice(end + (buffer.startsWith("\r\n", end) ? 2 : 1));
        if (line === "") {
          if (data.length > 0 || retry !== undefined) {
            yield { id, event: event || "message", data: data.join("\n"), retry };
          }
          id = undefined;
          event = "";
          data = [];
          retry = undefined;
          continue;
        }
        if (line.startsWith(":")) continue;
        const colon = line.indexOf(":");
        const field = colon < 0 ? line : line.slice(0, colon);
        let text = colon < 0 ? "" : line.slice(colon + 1);
        if (text.startsWith(" ")) text = text.slice(1);
        if (field === "data") data.push(text);
        else if (field === "event") event = text;
        else if (field === "id" && !text.includes("\0")) id = text;
        else if (field === "retry" && /^\d+$/.test(text)) retry = Number(text);
      }
    }
  } finally {
    await reader.cancel().catch(() => {});
  }
}
