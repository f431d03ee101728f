-- draft_lib.lua: what the draft scripts (draft_open.lua, draft_write.lua,
-- draft_claim.lua, draft_finish.lua) share, as functions with explicit parameters. Not a
-- script of its own: the loader puts it where a script says `-- @include draft_lib.lua`.
--
-- A draft (docs/drafts.md) is a field of the conversation's DRAFTS hash, its state a JSON
-- object written only by these scripts:
--   role, name         the message it will become
--   token              its writer's secret: only the writer writes, renews or ends it
--   lease              ms a write (or heartbeat) keeps it alive; expires: when that ends
--   on_interrupt       "commit" (keep what was written) or "discard"
--   pos, bytes         deltas written, and their bytes
--   status             "open", "claimed" (being ended by claimant until claim_expires),
--                      "ended" (outcome, seq, ended: kept for the grace, then forgotten)
--   started            server time, ms
-- Its deltas are the entries "0-1", "0-2", ... of its own stream (field "d"); the FEED
-- stream has one entry when it starts and one when it ends.

local function draft_now()
  local t = redis.call('TIME')
  return tonumber(t[1]) * 1000 + math.floor(tonumber(t[2]) / 1000)
end

-- The state of draft `id`, or nil; a value these scripts did not write: MSGLOG_BADDRAFT.
local function draft_state(drafts, id)
  local raw = redis.call('HGET', drafts, id)
  if not raw then
    return nil
  end
  local ok, state = pcall(cjson.decode, raw)
  if not ok or type(state) ~= 'table' or type(state.pos) ~= 'number'
      or type(state.status) ~= 'string' or type(state.token) ~= 'string' then
    return redis.error_reply('MSGLOG_BADDRAFT draft ' .. id .. ' of ' .. drafts .. ' holds '
      .. string.format('%q', string.sub(raw, 1, 80)))
  end
  return state
end

-- End the draft: its state "ended" (kept `grace_ms` for readers mid-draft, then forgotten
-- by the next draft_open), an end entry on the feed, its deltas expiring after the grace.
local function draft_end(drafts, feed, stream, id, state, outcome, seq, now, grace_ms,
                         feed_max, ttl_ms)
  state.status, state.outcome, state.seq, state.ended = 'ended', outcome, seq, now
  state.claimant, state.claim_expires = nil, nil
  redis.call('HSET', drafts, id, cjson.encode(state))
  redis.call('XADD', feed, 'MAXLEN', '~', feed_max, '*', 'event', 'end', 'draft', id,
    'outcome', outcome, 'seq', seq, 'pos', state.pos)
  redis.call('PEXPIRE', stream, grace_ms)
  if ttl_ms > 0 then
    redis.call('PEXPIRE', drafts, ttl_ms)
    redis.call('PEXPIRE', feed, ttl_ms)
  end
end
