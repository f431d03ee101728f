-- counter_checked.lua: the checked path of append_plain.lua and append_keyed.lua, taken
-- when their INCRBY did not take the counter (a retry that read it first, or a log that
-- is not healthy): the counter read with GET (into `raw`, nil: none; a retry has read
-- it already: `checked`) and checked as append.lua checks it, then where the stream
-- ends. Not a script of its own: the loader puts it where a script says `-- @include
-- counter_checked.lua`; it sets `last` to the seq to continue after, or returns the
-- error that refuses the append.
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
