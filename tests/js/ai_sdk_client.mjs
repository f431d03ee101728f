// The AI SDK's own client side (the `ai` package) resuming an answer in progress, as
// useChat does after a reload: `node ai_sdk_client.mjs URL CUT`. DefaultChatTransport's
// reconnectToStream (useChat's resume) GETs the stream, the SDK's parser validates every
// chunk, readUIMessageStream builds the message. The first connection is dropped after
// CUT message updates (a reload mid-answer); a second one reads the answer to its end.
// Prints the partial message, the final one, and whether a connection found no answer.
import { DefaultChatTransport, readUIMessageStream } from "ai";

const [url, cut] = process.argv.slice(2);
const transport = new DefaultChatTransport({
  api: url,
  prepareReconnectToStreamRequest: () => ({ api: url }),
});

async function read(limit) {
  const controller = new AbortController();
  const stream = await transport.reconnectToStream({ chatId: "chat", abortSignal: controller.signal });
  if (stream === null) return null; // 204: no answer in progress
  let last = null;
  let updates = 0;
  try {
    for await (const message of readUIMessageStream({ stream })) {
      last = structuredClone(message);
      updates += 1;
      if (limit && updates >= limit) {
        controller.abort();
        break;
      }
    }
  } catch (error) {
    if (!limit) throw error;
  }
  return last;
}

const timer = setTimeout(() => {
  console.error("timeout");
  process.exit(3);
}, 30000);
const partial = await read(Number(cut));
const final = await read(0);
clearTimeout(timer);
console.log(JSON.stringify({ partial, final }));
