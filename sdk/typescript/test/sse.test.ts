// parseEvents against event streams cut at every byte: the events are the
// same however the body's chunks fall.
import assert from "node:assert/strict";
import { test } from "node:test";
import { parseEvents, type ServerSentEvent } from "../src/index.js";

/** parse runs parseEvents over text sent in chunks of size bytes. */
async function parse(text: string, size: number): Promise<ServerSentEvent[]> {
  const bytes = new TextEncoder().encode(text);
  const body = new ReadableStream<Uint8Array>({
    start(controller) {
      for (let i = 0; i < bytes.length; i += size) controller.enqueue(bytes.slice(i, i + size));
      controller.close();
    },
  });
  const events: ServerSentEvent[] = [];
  for await (const event of parseEvents(body)) events.push(event);
  return events;
}

test("parseEvents reads ids, names, multi-line data and retry; skips comments and a cut-off event", async () => {
  const stream = ": watching events\n\nid: 7\nevent: run.created\ndata: {\"id\":7}\n\n" +
    "id: 8\r\nevent: action.phase\r\ndata: a\r\ndata:b\r\n\r\n" +
    "retry: 250\rdata: é\r\r" +
    "event: end\ndata: {\"phase\":\"SUCCEEDED\"}\n\n" +
    "id: 9\ndata: cut off";
  const want: ServerSentEvent[] = [
    { id: "7", event: "run.created", data: "{\"id\":7}", retry: undefined },
    { id: "8", event: "action.phase", data: "a\nb", retry: undefined },
    { id: undefined, event: "message", data: "é", retry: 250 },
    { id: undefined, event: "end", data: "{\"phase\":\"SUCCEEDED\"}", retry: undefined },
  ];
  for (const size of [1, 2, 3, 7, 1000]) assert.deepEqual(await parse(stream, size), want, `chunks of ${size} bytes`);
});
