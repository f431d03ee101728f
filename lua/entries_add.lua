-- entries_add.lua: the messages of append_plain.lua and append_keyed.lua written, once
-- every check passed and the producer's result was saved (producer_save.lua): the first
-- entry alone, as it is the one that can still fail (an entry beyond the counter: then
-- the INCRBY and the producer's result are undone and nothing is written), the rest
-- after it, then the counter where the INCRBY did not take it. Not a script of its own:
-- the loader puts it where a script says `-- @include entries_add.lua`, where `NAMED`
-- (the messages follow it), `n`, `last`, `at`, `first_text`, `new_last_text`, `raw`
-- and `counted` are set. Entry ID "<seq>-<at>": the commit time is kept in the ID.
local added = producer_refused
if not added then
  added = redis.pcall('XADD', STREAM, first_text .. '-' .. at, 'msg', ARGV[NAMED + 1])
end
if type(added) == 'table' and added.err then  -- nothing written: undo the INCRBY, the HSET
-- @include counter_undo.lua
-- @include producer_undo.lua
  local err = tostring(added.err)  -- fakeredis hands over a userdata, not a string
  if string.find(err, 'equal or smaller', 1, true) then
    return redis.error_reply('MSGLOG_BEHIND seq counter ' .. SEQ .. ' (' .. last ..
      ') is behind the last entry of stream ' .. STREAM)
  end
  return redis.error_reply(err)
end
for i = NAMED + 2, #ARGV do
  redis.call('XADD', STREAM, string.format('%d-', last + i - NAMED) .. at, 'msg', ARGV[i])
end
if not counted then
  if raw then
    redis.call('INCRBY', SEQ, n)
  else
    redis.call('SET', SEQ, new_last_text)  -- a new counter, or one healed from the stream
  end
end
