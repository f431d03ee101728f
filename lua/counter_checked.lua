-- counter_checked.lua: the counter and the stream's end checked, for append.lua (always)
-- and for append_plain.lua and append_keyed.lua when their INCRBY did not take the
-- counter (a retry that read it first, or a log that is not healthy): the counter read
-- with GET into `raw` (nil: none), unless it was read already (`checked`), checked as
-- counter_lib.lua says, then where the stream ends (stream_end_lib.lua). Not a script
-- of its own: the loader puts it where a script says `-- @include counter_checked.lua`,
-- where `last` is declared; it sets `last` to the seq to continue after, and `length`
-- to the stream's XLEN, or returns the error that refuses the append.
if not checked then
  raw = redis.pcall('GET', SEQ)
  if raw == 'erased' then
    return redis.error_reply('MSGLOG_ERASED ' .. SEQ .. ': the conversation was erased')
  end
end
if type(raw) == 'table' and raw.err then
  return redis.error_reply('WRONGTYPE seq counter ' .. SEQ .. ' is not a string')
end
local length = redis.pcall('XLEN', STREAM)
if type(length) == 'table' and length.err then
  return redis.error_reply('WRONGTYPE stream ' .. STREAM .. ' is not a stream')
end
last = 0
if raw then
-- @include counter_lib.lua
end
if length ~= last then
-- @include stream_end_lib.lua
end
