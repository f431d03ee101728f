#!lua
-- draft_open.lua: open a draft (docs/drafts.md): its state in DRAFTS, a start entry on
-- the FEED. Idempotent: the same id and token again returns what the first call did.
--
-- Arguments, by name: redis_msglog/_core/drafts/scripts.py names them (OPEN_KEY_NAMES,
-- OPEN_ARGV_NAMES), the binding block below gives each a local of that name.
--
-- KEYS[1]   SEQ: the seq counter ("erased": the tombstone of an erasure)
-- KEYS[2]   OWNER: the owner record (a scoped log's drafts open only in its scope)
-- KEYS[3]   DRAFTS: the drafts hash
-- KEYS[4]   FEED: the drafts feed stream
-- ARGV[1]   id: the draft's id (32 hex digits)
-- ARGV[2]   token: its writer's secret
-- ARGV[3]   role: the role of the message it will become
-- ARGV[4]   name: its name ("": none)
-- ARGV[5]   lease_ms: how long a write or heartbeat keeps it alive
-- ARGV[6]   on_interrupt: "commit" or "discard"
-- ARGV[7]   scope: the log's scope, parts joined by "/" ("": none)
-- ARGV[8]   max_drafts: how many drafts the conversation may hold
-- ARGV[9]   grace_ms: how long an ended draft is kept
-- ARGV[10]  feed_max: about how many entries the feed keeps
-- ARGV[11]  ttl_ms: the log's ttl (0: none)
--
-- Returns the start entry's feed ID. Refuses, writing nothing: MSGLOG_ERASED,
-- MSGLOG_SCOPE <recorded>, MSGLOG_DRAFTS (max_drafts drafts open or ended with deltas
-- within the grace, or ten times as many states), MSGLOG_DRAFTID (the id is taken, with another token).

-- == Binding block: every KEYS and ARGV position, bound once to its name ==
local id = ARGV[1]
local token = ARGV[2]
local role = ARGV[3]
local name = ARGV[4]
local lease_ms = ARGV[5]
local on_interrupt = ARGV[6]
local scope = ARGV[7]
local max_drafts = ARGV[8]
local grace_ms = ARGV[9]
local feed_max = ARGV[10]
local ttl_ms = ARGV[11]
local SEQ = KEYS[1]
local OWNER = KEYS[2]
local DRAFTS = KEYS[3]
local FEED = KEYS[4]
-- == End of the binding block ==

-- @include draft_lib.lua

if redis.call('GET', SEQ) == 'erased' then
  return redis.error_reply('MSGLOG_ERASED ' .. SEQ .. ': the conversation was erased')
end
if scope ~= '' then
  local recorded = redis.call('HGET', OWNER, 'scope')
  if recorded and recorded ~= scope then
    return redis.error_reply('MSGLOG_SCOPE ' .. recorded)
  end
end
local existing = draft_state(DRAFTS, id)
if existing then
  if existing.err then return existing end
  if existing.token == token then
    return existing.feed
  end
  return redis.error_reply('MSGLOG_DRAFTID draft ' .. id .. ' exists')
end
local now = draft_now()
-- Forget the drafts whose grace has passed; count the rest. Held: those open, and those
-- ended with deltas still kept (what costs memory); an ended one without deltas is a
-- state only, bounded by the second count (ten times as many).
local all = redis.call('HGETALL', DRAFTS)
local held, states = 0, 0
for i = 1, #all, 2 do
  local ok, state = pcall(cjson.decode, all[i + 1])
  local ended = ok and type(state) == 'table' and state.status == 'ended'
  if ended and now - (tonumber(state.ended) or 0) > tonumber(grace_ms) then
    redis.call('HDEL', DRAFTS, all[i])
  else
    states = states + 1
    if not ended or (tonumber(state.pos) or 1) > 0 then
      held = held + 1
    end
  end
end
if held >= tonumber(max_drafts) or states >= 10 * tonumber(max_drafts) then
  return redis.error_reply('MSGLOG_DRAFTS ' .. held .. ' drafts held')
end
local fields = {'event', 'start', 'draft', id, 'role', role}
if name ~= '' then
  fields[#fields + 1], fields[#fields + 2] = 'name', name
end
local feed_id = redis.call('XADD', FEED, 'MAXLEN', '~', feed_max, '*', unpack(fields))
local state = {
  role = role, token = token, lease = tonumber(lease_ms), expires = now + tonumber(lease_ms),
  on_interrupt = on_interrupt, pos = 0, bytes = 0, status = 'open', started = now,
  feed = feed_id,
}
if name ~= '' then state.name = name end
redis.call('HSET', DRAFTS, id, cjson.encode(state))
if tonumber(ttl_ms) > 0 then
  redis.call('PEXPIRE', DRAFTS, ttl_ms)
  redis.call('PEXPIRE', FEED, ttl_ms)
end
return feed_id
