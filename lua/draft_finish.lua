#!lua
-- draft_finish.lua: end a claimed draft once its message is in the log (seq), or without
-- one (seq 0, outcome: the log refused the message). Idempotent: an ended draft is left
-- as it is; every claimant of it writes the same message under the same idempotency
-- key, so any of them may finish it.
--
-- KEYS[1]   DRAFTS: the drafts hash
-- KEYS[2]   FEED: the drafts feed stream
-- KEYS[3]   STREAM: the draft's deltas
-- ARGV[1]   id: the draft's id
-- ARGV[2]   seq: its message's seq (0: none)
-- ARGV[3]   outcome: "" (the claimed one), or why it ends without its message
-- ARGV[4]   grace_ms: how long an ended draft is kept
-- ARGV[5]   feed_max: about how many entries the feed keeps
-- ARGV[6]   ttl_ms: the log's ttl (0: none)
--
-- Returns {outcome, seq} as ended (by this call or before); {"gone", 0}: no such draft.
-- Refuses: MSGLOG_DRAFTSTATE (the draft is open: nobody claimed it).

-- == Binding block: every KEYS and ARGV position, bound once to its name ==
local id = ARGV[1]
local seq = ARGV[2]
local outcome = ARGV[3]
local grace_ms = ARGV[4]
local feed_max = ARGV[5]
local ttl_ms = ARGV[6]
local DRAFTS = KEYS[1]
local FEED = KEYS[2]
local STREAM = KEYS[3]
-- == End of the binding block ==

-- @include draft_lib.lua

local state = draft_state(DRAFTS, id)
if not state then
  return {'gone', 0}
end
if state.err then return state end
if state.status == 'ended' then
  return {state.outcome, state.seq or 0}
end
if state.status ~= 'claimed' then
  return redis.error_reply('MSGLOG_DRAFTSTATE draft ' .. id .. ' is ' .. state.status)
end
if outcome == '' then outcome = state.outcome end
draft_end(DRAFTS, FEED, STREAM, id, state, outcome, tonumber(seq), draft_now(), grace_ms,
  feed_max, tonumber(ttl_ms))
return {outcome, tonumber(seq)}
