-- commit_time.lua: the commit time of an append, read once from the server's clock (so
-- workers with skewed clocks agree), for the append scripts. Not a script of
-- its own: the loader puts it where a script says `-- @include commit_time.lua`; it sets
-- `at`, microseconds since the Unix epoch as digits (the entry IDs' second part).
local time = redis.call('TIME')
local micros = time[2]
if #micros < 6 then  -- (9 times in 10 it has 6 digits: no padding to make)
  micros = string.sub('00000' .. micros, -6)
end
local at = time[1] .. micros  -- microseconds, 6 digits
