-- record_lookup.lua: a caller's idempotency record looked up before anything is written,
-- for append.lua and append_keyed.lua: a record of this batch answers the call (a
-- replay: its first result, nothing written); a record of another batch under the same
-- key refuses it (MSGLOG_KEYREUSED). Not a script of its own: the loader puts it where a
-- script says `-- @include record_lookup.lua`, where `RECORD` (nil: no record),
-- `look_up`, `fingerprint`, `n` and `checked` (the counter already read, and not the
-- tombstone) are set. A record that outlived an erasure (one committed just before it)
-- replays nothing: the tombstone refuses the call, read here if it was not read yet.
if RECORD and look_up == '1' then
  local record = redis.pcall('GET', RECORD)
  if type(record) == 'table' and record.err then
    return redis.error_reply('WRONGTYPE idempotency record ' .. RECORD .. ' is not a string')
  end
  if record then
    if not checked and redis.pcall('GET', SEQ) == 'erased' then  -- (see above)
      return redis.error_reply('MSGLOG_ERASED ' .. SEQ .. ': the conversation was erased')
    end
    local last, at, count, held_fingerprint, held_call =
      string.match(record, '^(%d+) (%d+) (%d+) (%x+) ?(%x*)$')
    if not last then
      return redis.error_reply('MSGLOG_BADRECORD idempotency record ' .. RECORD .. ' holds ' ..
        record)
    end
    if held_fingerprint ~= fingerprint or tonumber(count) ~= n then
      return redis.error_reply('MSGLOG_KEYREUSED idempotency key ' .. RECORD ..
        ' was used for a different batch')
    end
    return {tonumber(last), at, 1, held_call}
  end
end
