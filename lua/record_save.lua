-- record_save.lua: a caller's idempotency record written after the call's entries, for
-- append.lua and append_keyed.lua: "<last_seq> <at> <count> <fingerprint> <call>", for
-- record_ttl_ms, and its name added to RECORDS (score: when it expires, ms), so that an
-- erasure finds the conversation's records without SCAN; each write drops up to
-- PRUNE_RECORDS expired names (bounded work a call, and more than the one it adds).
-- Not a script of its own: the loader puts it where a script says `-- @include
-- record_save.lua`, where `RECORD` (nil: no record), `RECORDS`, `new_last_text`, `at`,
-- `n`, `fingerprint`, `call` and `record_ttl_ms` are set.
local PRUNE_RECORDS = 16
if RECORD then
  redis.call('SET', RECORD, new_last_text .. ' ' .. at .. ' ' .. n .. ' ' ..
    fingerprint .. ' ' .. call, 'PX', record_ttl_ms)
  -- Named in RECORDS for an erasure; expired names pruned, a few a call (bounded work).
  local now_ms = string.sub(at, 1, -4) + 0
  redis.call('ZADD', RECORDS, now_ms + record_ttl_ms, RECORD)
  local expired = redis.call('ZRANGEBYSCORE', RECORDS, '-inf', '(' .. now_ms, 'LIMIT', 0,
    PRUNE_RECORDS)
  if expired[1] then
    redis.call('ZREM', RECORDS, unpack(expired))
  end
end
