-- counter_undo.lua: the INCRBY of append_plain.lua or append_keyed.lua taken back, when
-- the log it found is not healthy or its first entry could not be written. Not a script of its own: the loader puts it where the script says
-- `-- @include counter_undo.lua`, where `counted` says the INCRBY ran (and is left
-- false), `last` is the seq before it and `n` what it added.
if counted then
  counted = false
  if last == 0 then  -- the INCRBY made the counter (or it held "0"): no counter, to heal
    redis.call('UNLINK', SEQ)
  else
    redis.call('INCRBY', SEQ, -n)  -- (the commands the library's ACL rules allow)
  end
end
