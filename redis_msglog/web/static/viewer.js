// The msglog operator viewer: plain DOM, no build step, no external resources.
// Message content is hostile model output: it only ever reaches the page through
// textContent or attribute values we build (never innerHTML).
"use strict";

const $ = (id) => document.getElementById(id);
const SHA256 = /^[0-9a-f]{64}$/;
const BASE64 = /^[A-Za-z0-9+/]*={0,2}$/;
const MEDIA_TYPE = /^[a-z]+\/[A-Za-z0-9.+-]+$/;
const PAGE = 100; // conversations per page of the listing
const LIST_EVERY_MS = Number(document.documentElement.dataset.listEveryMs || 10000); // refresh

// A commit time (ISO 8601, UTC, to the microsecond) as the reader's local time; the
// exact value stays in the tooltip.
function when(iso) {
  const date = new Date(iso);
  if (!iso || Number.isNaN(date.getTime())) return { text: "", title: "" };
  const today = new Date().toDateString() === date.toDateString();
  const text = today
    ? date.toLocaleTimeString()
    : date.toLocaleString(undefined, { dateStyle: "medium", timeStyle: "medium" });
  return { text, title: iso };
}

function stamp(seq, iso) {
  const node = el("span", "stamp");
  const time = when(iso);
  node.append(el("span", "seq", "#" + seq), el("time", null, time.text));
  node.lastChild.dateTime = iso || "";
  node.lastChild.title = time.title;
  return node;
}

// The open conversation's totals beside its title (GET .../usage), fetched on open and
// again after a message that carries usage.
function showTotals() {
  const conversation = current && current.id;
  if (!conversation) return;
  fetch(conversationPath(conversation) + "/usage", { headers: { Accept: "application/json" } })
    .then((response) => (response.ok ? response.json() : null))
    .then((body) => {
      if (!body || !current || current.id !== conversation) return;
      const usage = body.usage || {};
      const note = usageNote({ inputTokens: usage.input_tokens, outputTokens: usage.output_tokens,
        cost: usage.cost, currency: usage.currency });
      $("totals").replaceChildren(...(note ? ["total: ", note] : []));
    })
    .catch(() => {}); // the totals are an extra: the conversation shows without them
}

function usageNote(usage) {
  if (!usage || typeof usage !== "object") return null;
  const bits = [];
  if (usage.inputTokens) bits.push(usage.inputTokens + " in");
  if (usage.outputTokens) bits.push(usage.outputTokens + " out");
  if (typeof usage.cost === "number" && typeof usage.currency === "string") {
    bits.push(usage.cost + " " + usage.currency);
  }
  return bits.length ? el("span", "usage", bits.join(" · ")) : null;
}

let current = null; // {id, source, entries: [], lastSeq}
let scheduled = false;

function el(tag, className, text) {
  const node = document.createElement(tag);
  if (className) node.className = className;
  if (text !== undefined && text !== null) node.textContent = String(text);
  return node;
}

function label(name) {
  return el("span", "label", name);
}

function conversationPath(id) {
  return "conversations/" + encodeURIComponent(id);
}

// --- the view, folded from the entries as redis_msglog.edits.LogView does -----------

function fold(entries) {
  let rows = []; // {entry, retracted}
  let absorb = 0;
  let placed = 0;
  const removed = new Set();
  for (const entry of entries) {
    if (entry.kind === "message") {
      if (absorb > 0) {
        rows.splice(placed, 0, { entry, retracted: false });
        placed += 1;
        absorb -= 1;
      } else {
        rows.push({ entry, retracted: false });
      }
      continue;
    }
    const edit = entry.data.edit || {};
    if (edit.op === "retract") {
      const gone = new Set(edit.seqs || []);
      for (const row of rows) {
        if (gone.has(row.entry.seq)) {
          row.retracted = true;
          removed.add(row.entry.seq);
        }
      }
    } else if (edit.op === "compact" || edit.op === "fork") {
      const through = edit.through ?? edit.through_seq ?? null;
      let cut = rows.length;
      if (through === 0) cut = 0;
      else if (through !== null) cut = rows.findIndex((r) => r.entry.seq === through) + 1;
      for (const row of rows.slice(0, cut)) removed.add(row.entry.seq);
      rows = rows.slice(cut);
      absorb = edit.count || 0;
      placed = 0;
    } // archive and attrs leave the rows as they are
  }
  return { visible: rows.filter((r) => !r.retracted).map((r) => r.entry), removed };
}

// --- parts ---------------------------------------------------------------------------

function mediaSource(part) {
  if (typeof part.blob === "string" && SHA256.test(part.blob)) {
    return conversationPath(current.id) + "/blobs/" + part.blob;
  }
  if (typeof part.data === "string" && BASE64.test(part.data)) {
    const type = MEDIA_TYPE.test(part.media_type || "") ? part.media_type : "application/octet-stream";
    return "data:" + type + ";base64," + part.data;
  }
  return null; // a URL or a provider file id: shown as text, never fetched (offline page)
}

function mediaNote(part) {
  const bits = [part.media_type, part.filename, part.url, part.file_id, part.blob && "blob " + part.blob.slice(0, 12)];
  return bits.filter(Boolean).join(" · ");
}

function collapsed(name, body) {
  const details = el("details", "part");
  const summary = el("summary");
  summary.append(label(name));
  details.append(summary, body);
  return details;
}

function renderMedia(part, kind) {
  const node = el("div", "part");
  node.append(label(kind), el("span", "meta", mediaNote(part)));
  const src = mediaSource(part);
  if (src && kind === "image") {
    const img = el("img");
    img.alt = "image";
    img.src = src;
    node.append(img);
  } else if (src && kind === "audio") {
    const audio = el("audio");
    audio.controls = true;
    audio.src = src;
    node.append(audio);
  } else if (src) {
    const link = el("a", null, "open");
    link.href = src;
    link.download = part.filename || "file";
    node.append(" ", link);
  }
  return node;
}

function renderPart(part) {
  if (part === null || typeof part !== "object") return renderText("text", String(part));
  switch (part.type) {
    case "text":
      return renderText("text", part.text);
    case "refusal":
      return renderText("refusal", part.refusal);
    case "image":
    case "audio":
    case "file":
      return renderMedia(part, part.type);
    case "thinking":
      return collapsed("thinking", el("pre", null, part.thinking));
    case "redacted_thinking":
      return collapsed("redacted thinking", el("pre", "meta", (part.data || "").length + " opaque characters"));
    case "reasoning": {
      const body = el("div");
      for (const line of part.summary || []) body.append(el("pre", null, line));
      for (const line of part.content || []) body.append(el("pre", "meta", line));
      if (part.encrypted_content) body.append(el("pre", "meta", "(encrypted content)"));
      return collapsed("reasoning", body);
    }
    default:
      return renderText(String(part.type || "part"), JSON.stringify(part));
  }
}

function renderText(name, text) {
  const node = el("div", "part");
  node.append(label(name), document.createTextNode(text ?? ""));
  return node;
}

function renderMessage(entry) {
  const message = entry.data.message || {};
  const li = el("li", "row message");
  const head = el("div", "meta");
  head.append(el("span", "role", message.role), stamp(entry.seq, entry.data.at));
  if (message.redacted) {
    li.classList.add("redacted");
    head.append(label("redacted"));
  }
  if (message.interrupted) {  // its writer died mid-answer: what was written, kept
    li.classList.add("interrupted");
    head.append(label("interrupted"));
  }
  const cost = usageNote(message.usage);
  if (cost) head.append(cost);
  li.append(head);
  const toolCallId = message.toolCallId ?? message.tool_call_id;
  if (message.role === "tool" || toolCallId) {
    li.append(renderText("tool result", "call " + (toolCallId || "?")));
  }
  if (typeof message.content === "string") li.append(renderText("text", message.content));
  else for (const part of message.content || []) li.append(renderPart(part));
  for (const call of message.toolCalls ?? message.tool_calls ?? []) {
    const args = call.arguments ?? JSON.stringify(call.args ?? null);
    li.append(renderText("tool call", (call.name || "?") + " (" + (call.id || "") + ") " + args));
  }
  return li;
}

function renderEdit(entry) {
  const edit = entry.data.edit || {};
  const li = el("li", "row edit");
  const what = { ...edit };
  delete what.op;
  const head = el("div", "meta");
  head.append(stamp(entry.seq, entry.data.at));
  li.append(head, renderText("edit: " + edit.op, JSON.stringify(what)));
  return li;
}

// --- the page ------------------------------------------------------------------------

function render() {
  scheduled = false;
  if (!current) return;
  const physical = $("physical").checked;
  const { visible, removed } = fold(current.entries);
  const shown = physical ? current.entries : visible;
  const list = $("rows");
  const rows = shown.map((entry) => {
    const li = entry.kind === "message" ? renderMessage(entry) : renderEdit(entry);
    li.dataset.seq = String(entry.seq);
    if (removed.has(entry.seq)) li.classList.add("gone");
    return li;
  });
  for (const [id, draft] of current.drafts) rows.push(renderDraft(id, draft));
  list.replaceChildren(...rows);
  list.dataset.lastSeq = String(current.lastSeq);
}

function schedule() {
  if (!scheduled) {
    scheduled = true;
    requestAnimationFrame(render);
  }
}

// An event's id is a resume id: the seq, then each open draft's position after a dot
// ("12.<draft>:7"); the seq is what orders the committed entries.
function seqOf(id) {
  return Number(String(id).split(".")[0]);
}

function receive(kind, event) {
  const seq = seqOf(event.lastEventId);
  // Exactly once even if a reconnect replays: a seq at or below the last one is old.
  if (!current || !Number.isSafeInteger(seq) || seq <= current.lastSeq) return;
  const data = JSON.parse(event.data);
  current.entries.push({ kind, seq, data });
  current.lastSeq = seq;
  if (data.message && data.message.draft) current.drafts.delete(data.message.draft);
  touchListed(seq, data.at);
  if (data.message && data.message.usage) scheduleTotals();
  if (kind === "edit") deleted(data.edit || {});
  schedule();
}

// The edits that delete from Redis change what was received, as a reload would show it:
// a trim takes the entries through its seq away (even from the physical view), a
// redaction replaces the row's content where it stands.
function deleted(edit) {
  if (edit.op === "trim" && Number.isSafeInteger(edit.through)) {
    current.entries = current.entries.filter((entry) => entry.seq > edit.through);
  } else if (edit.op === "redact") {
    for (const seq of edit.seqs || []) redact(seq);
  }
}

function redact(seq) {
  const entry = current.entries.find((e) => e.seq === seq && e.kind === "message");
  if (!entry) return;
  const old = entry.data.message || {};
  // At once, the marker redact() leaves; then the stored row (a replacement, if any).
  entry.data.message = { role: old.role, content: "[redacted]", redacted: true };
  if (old.role === "tool" && old.tool_call_id) entry.data.message.tool_call_id = old.tool_call_id;
  const conversation = current.id;
  const url = conversationPath(conversation) + "/messages?view=physical&limit=1&after=" + (seq - 1);
  fetch(url, { headers: { Accept: "application/json" } })
    .then((response) => (response.ok ? response.json() : null))
    .then((page) => {
      const row = page && page.messages && page.messages[0];
      if (current && current.id === conversation && row && row.seq === seq && row.message) {
        entry.data.message = row.message;
        schedule();
      }
    })
    .catch(() => {}); // the marker stays: the content is gone either way
}

// A message being written (a draft): shown typing below the rows, each delta once (by
// its position), gone at its end: its committed message takes its place.
function receiveDraft(kind, event) {
  if (!current) return;
  const data = JSON.parse(event.data);
  const drafts = current.drafts;
  if (kind === "draft-start" && !drafts.has(data.draft)) {
    drafts.set(data.draft, { role: data.role, pos: 0, text: "", reasoning: "", calls: new Map() });
  } else if (kind === "draft-delta") {
    const draft = drafts.get(data.draft);
    if (!draft || data.pos <= draft.pos) return;
    draft.pos = data.pos;
    if (data.kind === "text") draft.text += data.text;
    else if (data.kind === "reasoning") draft.reasoning += data.text;
    else {
      const call = draft.calls.get(data.tool_call_id) || { name: data.tool_name || "?", args: "" };
      call.args += data.text;
      draft.calls.set(data.tool_call_id, call);
    }
  } else if (kind === "draft-end") {
    drafts.delete(data.draft);
  }
  schedule();
}

function renderDraft(id, draft) {
  const li = el("li", "row message draft");
  li.dataset.draft = id;
  const head = el("div", "meta");
  head.append(el("span", "role", draft.role), label("typing"));
  li.append(head);
  if (draft.reasoning) li.append(collapsed("thinking", el("pre", null, draft.reasoning)));
  li.append(renderText("text", draft.text));
  for (const [callId, call] of draft.calls) {
    li.append(renderText("tool call", call.name + " (" + callId + ") " + call.args));
  }
  return li;
}

let totalsDue = null;
function scheduleTotals() {  // at most one fetch a second while messages stream in
  if (totalsDue === null) totalsDue = setTimeout(() => { totalsDue = null; showTotals(); }, 1000);
}

function setStatus(text, live) {
  const status = $("status");
  status.textContent = text;
  status.classList.toggle("live", live);
}

function open(id) {
  if (current) current.source.close();
  // after=0: every entry from the first; the browser resumes with Last-Event-ID itself.
  const source = new EventSource(conversationPath(id) + "/events?after=0");
  current = { id, source, entries: [], lastSeq: 0, drafts: new Map() };
  $("title").textContent = id;
  $("totals").replaceChildren();
  showTotals();
  $("rows").replaceChildren();
  $("rows").dataset.lastSeq = "0";
  for (const li of $("conversations").children) li.classList.toggle("current", li.dataset.id === id);
  source.addEventListener("open", () => setStatus("live", true));
  source.addEventListener("error", () => setStatus("reconnecting", false));
  source.addEventListener("message", (event) => receive("message", event));
  source.addEventListener("edit", (event) => receive("edit", event));
  for (const kind of ["draft-start", "draft-delta", "draft-end"]) {
    source.addEventListener(kind, (event) => receiveDraft(kind, event));
  }
  source.addEventListener("overflow", () => setStatus("catching up", false));
  if (location.hash !== "#" + encodeURIComponent(id)) location.hash = encodeURIComponent(id);
}

// The listing, a page at a time ("more" asks for the next one, next_cursor), shown
// newest activity first and refreshed by itself: the first page every LIST_EVERY_MS,
// merged into what is shown (a conversation seen on a later page keeps its place).
let nextCursor = null;
const listed = new Map(); // id -> {conversation, count, last_at}

function showListing() {
  const items = [...listed.values()]
    .sort((a, b) => (b.last_at || "").localeCompare(a.last_at || "") || a.conversation.localeCompare(b.conversation))
    .map((c) => {
      const li = el("li", null, c.conversation);
      li.dataset.id = c.conversation;
      const small = el("small", null, c.count + (c.count === 1 ? " entry · " : " entries · "));
      const time = when(c.last_at);
      small.append(el("time", null, time.text));
      small.lastChild.title = time.title;
      li.append(el("br"), small);
      li.addEventListener("click", () => open(c.conversation));
      if (current && current.id === c.conversation) li.classList.add("current");
      return li;
    });
  $("conversations").replaceChildren(...items);
}

async function listConversations(cursor) {
  try {
    const query = "conversations?limit=" + PAGE + (cursor ? "&cursor=" + encodeURIComponent(cursor) : "");
    const response = await fetch(query, { headers: { Accept: "application/json" } });
    const body = await response.json();
    if (!response.ok) throw new Error(body.message || response.statusText);
    if (cursor || nextCursor === null) {
      nextCursor = body.next_cursor ?? null;
      $("more").hidden = nextCursor === null;
    }
    for (const c of body.conversations || []) listed.set(c.conversation, c);
    showListing();
  } catch (error) {
    $("conversations").replaceChildren(el("li", "meta", "cannot list: " + error.message));
  }
}

// The open conversation's line follows its events (its count and last commit).
function touchListed(seq, at) {
  const line = current && listed.get(current.id);
  if (line && seq > line.count) {
    listed.set(current.id, { ...line, count: seq, last_at: at || line.last_at });
    showListing();
  }
}

$("physical").addEventListener("change", schedule);
$("refresh").addEventListener("click", () => {
  listed.clear(); // from scratch: an erased conversation leaves the list
  nextCursor = null;
  listConversations(null);
});
$("more").addEventListener("click", () => listConversations(nextCursor));
listConversations(null);
setInterval(() => {
  if (document.visibilityState === "visible") listConversations(null);
}, LIST_EVERY_MS);
try {
  if (location.hash.length > 1) open(decodeURIComponent(location.hash.slice(1)));
} catch (error) {
  setStatus("bad address: " + error.message, false); // a malformed %-escape
}
