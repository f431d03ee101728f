// The contender of benchmarks/draft_stream.py: Vercel's resumable-stream (its documented
// setup: one node-redis publisher and one subscriber per process) behind a plain Node
// HTTP server, serving each client as Server-Sent Events, as a route of a Next.js app
// would. `node resumable_stream_server.mjs REDIS_URL` prints `port N`, then serves:
//   POST /start?id=ID&tokens=T&rate=R  a producer streams T tokens ("<i> ") at R a second
//                                      (makeStream), drained here as the route would
//   GET  /stream?id=ID                 resumeExistingStream(ID) as SSE, one `data` line
//                                      (a JSON string) per chunk; 204 when none
//   GET  /times?id=ID                  when each token was enqueued (ms since the epoch)
import http from "node:http";
import { createClient } from "redis";
import { createResumableStreamContext } from "resumable-stream";

const [url] = process.argv.slice(2);
const publisher = createClient({ url });
const subscriber = createClient({ url });
await Promise.all([publisher.connect(), subscriber.connect()]);
const context = createResumableStreamContext({ waitUntil: null, publisher, subscriber });
const enqueued = new Map(); // stream id -> the time each token was enqueued
const now = () => performance.timeOrigin + performance.now();

function paced(id, tokens, rate) {
  const times = [];
  enqueued.set(id, times);
  let i = 0;
  const started = now();
  return new ReadableStream({
    async pull(controller) {
      if (i >= tokens) {
        controller.close();
        return;
      }
      const due = started + (i * 1000) / rate;
      const wait = due - now();
      if (wait > 0) await new Promise((resolve) => setTimeout(resolve, wait));
      times.push(now());
      controller.enqueue(`${i} `);
      i += 1;
    },
  });
}

async function drain(stream) {
  const reader = stream.getReader();
  while (!(await reader.read()).done);
}

const server = http.createServer(async (request, response) => {
  const query = new URL(request.url, "http://bench").searchParams;
  const id = query.get("id");
  if (request.method === "POST" && request.url.startsWith("/start")) {
    const tokens = Number(query.get("tokens"));
    const rate = Number(query.get("rate"));
    const stream = await context.createNewResumableStream(id, () => paced(id, tokens, rate));
    drain(stream);
    response.end("started");
  } else if (request.url.startsWith("/stream")) {
    const stream = await context.resumeExistingStream(id);
    if (!stream) {
      response.writeHead(204).end();
      return;
    }
    response.writeHead(200, { "Content-Type": "text/event-stream", "Cache-Control": "no-cache" });
    for await (const chunk of stream) response.write(`data: ${JSON.stringify(chunk)}\n\n`);
    response.end();
  } else if (request.url.startsWith("/times")) {
    response.end(JSON.stringify(enqueued.get(id) || []));
  } else {
    response.writeHead(404).end();
  }
});
server.listen({ port: 0, host: "127.0.0.1", backlog: 4096 }, () => {
  console.log(`port ${server.address().port}`);
});
