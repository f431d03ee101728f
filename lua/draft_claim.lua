#!lua
-- draft_claim.lua: decide how a draft ends, exactly once, whoever asks first.
--
-- The writer (its token) ends it with intent "commit" (committed), "abort" (aborted) or
-- "interrupt" (its code failed: interrupted, keeping what was written as a message when
-- on_interrupt is "commit" and there are deltas, else with none). Anyone else (token "") ends it only
-- once its lease has lapsed: interrupted. An outcome with a message to write is
-- "claimed" by the caller for claim_ms: the caller appends the message (idempotency key
-- "draft:<id>") and calls draft_finish.lua; a claim whose time ran out is taken over by
-- the next caller, who writes the same message under the same key. An outcome without a
-- message ends the draft here.
--
-- KEYS[1]   DRAFTS: the drafts hash
-- KEYS[2]   FEED: the drafts feed stream
-- KEYS[3]   STREAM: the draft's deltas
-- ARGV[1]   id: the draft's id
-- ARGV[2]   claimant: who asks (a log object's id)
-- ARGV[3]   intent: the writer's "commit", "abort" or "interrupt"
-- ARGV[4]   token: the writer's secret ("": a noticer of a lapsed lease)
-- ARGV[5]   claim_ms: how long the claim holds
-- ARGV[6]   grace_ms: how long an ended draft is kept
-- ARGV[7]   feed_max: about how many entries the feed keeps
-- ARGV[8]   ttl_ms: the log's ttl (0: none)
--
-- Returns {status, outcome, seq, pos, role, name}: status "claimed" (the caller writes the
-- message), "finished" (this call ended it: no message), "ended" (ended before), "live" (its lease holds), "busy" (another claimant's
-- claim holds) or "gone" (no such draft). Refuses: MSGLOG_DRAFTOWNER (a wrong token).

-- == Binding block: every KEYS and ARGV position, bound once to its name ==
local id = ARGV[1]
local claimant = ARGV[2]
local intent = ARGV[3]
local token = ARGV[4]
local claim_ms = ARGV[5]
local grace_ms = ARGV[6]
local feed_max = ARGV[7]
local ttl_ms = ARGV[8]
local DRAFTS = KEYS[1]
local FEED = KEYS[2]
local STREAM = KEYS[3]
-- == End of the binding block ==

-- @include draft_lib.lua

local state = draft_state(DRAFTS, id)
if not state then
  return {'gone', '', 0, 0, '', ''}
end
if state.err then return state end
local now = draft_now()
if state.status == 'ended' then
  return {'ended', state.outcome, state.seq or 0, state.pos, state.role, state.name or ''}
end
if state.status == 'claimed' then
  if state.claimant ~= claimant and now < state.claim_expires then
    return {'busy', state.outcome, 0, state.pos, state.role, state.name or ''}
  end
  state.claimant, state.claim_expires = claimant, now + tonumber(claim_ms)
  redis.call('HSET', DRAFTS, id, cjson.encode(state))
  return {'claimed', state.outcome, 0, state.pos, state.role, state.name or ''}
end
local keeps = state.on_interrupt == 'commit' and state.pos > 0
local outcome, message
if token ~= '' then
  if token ~= state.token then
    return redis.error_reply('MSGLOG_DRAFTOWNER draft ' .. id .. ' has another writer')
  end
  if intent == 'commit' then
    outcome, message = 'committed', true
  elseif intent == 'abort' then
    outcome, message = 'aborted', false
  else
    outcome, message = 'interrupted', keeps
  end
else
  if now < state.expires then
    return {'live', '', 0, state.pos, state.role, state.name or ''}
  end
  outcome, message = 'interrupted', keeps
end
if message then
  state.status, state.outcome = 'claimed', outcome
  state.claimant, state.claim_expires = claimant, now + tonumber(claim_ms)
  redis.call('HSET', DRAFTS, id, cjson.encode(state))
  return {'claimed', outcome, 0, state.pos, state.role, state.name or ''}
end
draft_end(DRAFTS, FEED, STREAM, id, state, outcome, 0, now, grace_ms, feed_max, tonumber(ttl_ms))
return {'finished', outcome, 0, state.pos, state.role, state.name or ''}
