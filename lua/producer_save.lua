-- producer_save.lua: the idempotent producer's result of this call (producer_lib.lua),
-- for the append scripts. Not a script of its own: the loader puts it where
-- a script says `-- @include producer_save.lua`: after every check and before the first
-- entry is written, where `at` (the commit time, µs) and `new_last_text` (the call's last
-- seq) are set. Written first because the HSET is what fails on a producers key of
-- another type (a result written without reading the field finds out no other way):
-- then nothing is written, and the script returns `producer_refused`. If the first XADD
-- then fails, the script puts back `producer_held` in `producer_field` (nil: deletes it).
-- producer_prune.lua, after the entries, prunes idle fields.
local producer_field, producer_held, producer_added, producer_refused = nil, nil, false, nil
local now_ms = nil
if producer ~= '' then
  now_ms = string.sub(at, 1, -4) + 0  -- microseconds to milliseconds (one conversion)
  local value
  if producer_fast then
    -- The sequential field: this call's result alone, kept for its own window (no other
    -- result is held), every pseq below it dropped (none is sent again).
    value = string.format('%d', now_ms + record_ttl_ms) .. ' 1 ' ..
      string.format('%d', pseq - 1) .. ',0 ' .. pseq .. ',' .. new_last_text
    if call ~= '' then
      value = value .. ',' .. call
    end
    producer_field = producer
  else
    value = producer_value(producer_state, new_last_text, now_ms)
    producer_field, producer_held = producer .. '+', producer_raw
  end
  local set = redis.pcall('HSET', PRODUCERS, producer_field, value)
  if type(set) == 'table' and set.err then
    producer_refused = redis.error_reply('WRONGTYPE producers ' .. PRODUCERS ..
      ' is not a hash')
  end
  producer_added = set == 1
end
