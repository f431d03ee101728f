#!lua
-- draft_write.lua: add deltas to an open draft and renew its lease (no deltas: a
-- heartbeat). Idempotent by position: a re-sent call whose deltas are in returns the
-- same position, writing nothing.
--
-- KEYS[1]   DRAFTS: the drafts hash
-- KEYS[2]   STREAM: the draft's deltas
-- ARGV[1]   id: the draft's id
-- ARGV[2]   token: its writer's secret
-- ARGV[3]   at: the position the deltas follow
-- ARGV[4]   max_bytes: the cap on the draft's deltas, in bytes
-- ARGV[5]   retention_ms: how long the deltas outlive the last write
-- ARGV[6..] the tail: the deltas (JSON objects), one entry each
--
-- Returns the new position. Refuses, writing nothing: MSGLOG_DRAFTGONE (no such draft),
-- MSGLOG_DRAFTOWNER (another token), MSGLOG_DRAFTENDED <status> (claimed or ended:
-- ended by someone who found its lease lapsed), MSGLOG_DRAFTPOS <pos> (the draft is at
-- another position), MSGLOG_DRAFTBIG <bytes> (over max_bytes).

-- == Binding block: every KEYS and ARGV position, bound once to its name ==
local id = ARGV[1]
local token = ARGV[2]
local at = ARGV[3]
local max_bytes = ARGV[4]
local retention_ms = ARGV[5]
local DRAFTS = KEYS[1]
local STREAM = KEYS[2]
local NAMED = 5 -- ARGV positions before the tail
-- == End of the binding block ==

-- @include draft_lib.lua

local state = draft_state(DRAFTS, id)
if not state then
  return redis.error_reply('MSGLOG_DRAFTGONE draft ' .. id .. ' is not open')
end
if state.err then return state end
if state.token ~= token then
  return redis.error_reply('MSGLOG_DRAFTOWNER draft ' .. id .. ' has another writer')
end
if state.status ~= 'open' then
  return redis.error_reply('MSGLOG_DRAFTENDED ' .. (state.outcome or state.status))
end
local n = #ARGV - NAMED
at = tonumber(at)
if state.pos ~= at then
  if state.pos == at + n then
    return state.pos  -- a re-sent call: its deltas are in
  end
  return redis.error_reply('MSGLOG_DRAFTPOS ' .. state.pos)
end
local bytes = state.bytes
for i = NAMED + 1, #ARGV do
  bytes = bytes + #ARGV[i]
end
if bytes > tonumber(max_bytes) then
  return redis.error_reply('MSGLOG_DRAFTBIG ' .. state.bytes)
end
for i = NAMED + 1, #ARGV do
  state.pos = state.pos + 1
  redis.call('XADD', STREAM, '0-' .. state.pos, 'd', ARGV[i])
end
state.bytes = bytes
state.expires = draft_now() + state.lease
redis.call('HSET', DRAFTS, id, cjson.encode(state))
if n > 0 then
  redis.call('PEXPIRE', STREAM, retention_ms)
end
return state.pos
