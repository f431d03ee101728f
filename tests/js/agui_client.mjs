// An AG-UI client (@ag-ui/client's HttpAgent, the runtime CopilotKit builds on) following
// a conversation's event stream: `node agui_client.mjs URL WANT [LAST_EVENT_ID [UNTIL]]`. It
// connects with GET (the stream is a conversation's, not a run to start), lets the
// client's own event verification and message reducer apply every event, stops once it
// holds WANT messages (or, given UNTIL, once it sees the CUSTOM event so named), and prints
// the messages it built and the event types it saw.
import { HttpAgent } from "@ag-ui/client";

const [url, want, lastEventId, until] = process.argv.slice(2);

class ConversationAgent extends HttpAgent {
  requestInit() {
    const headers = { Accept: "text/event-stream" };
    if (lastEventId) headers["Last-Event-ID"] = lastEventId;
    return { method: "GET", headers, signal: this.abortController.signal };
  }
}

const agent = new ConversationAgent({ url });
const types = [];
agent.subscribe({
  onEvent: ({ event }) => {
    if (types.length === 0) process.stderr.write("connected\n"); // the test may start now
    types.push(event.type);
    if (until && event.type === "CUSTOM" && event.name === until) agent.abortRun();
  },
  onMessagesChanged: ({ messages }) => {
    if (!until && messages.length >= Number(want)) agent.abortRun();
  },
});
const timer = setTimeout(() => {
  console.error(JSON.stringify({ timeout: true, messages: agent.messages, types }));
  process.exit(3);
}, 20000);
await agent.runAgent();
clearTimeout(timer);
console.log(JSON.stringify({ messages: agent.messages, types }));
