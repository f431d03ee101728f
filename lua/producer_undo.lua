-- producer_undo.lua: the producer's result taken back when the first entry of its call
-- could not be written (producer_save.lua wrote it before), for the append
-- scripts. Not a script of its own: the loader puts it where a script says
-- `-- @include producer_undo.lua`. The concurrent field gets its value back; the
-- sequential one, written without reading it, goes: its earlier value held only results
-- of calls that are not sent again.
if producer_field and not producer_refused then
  if producer_held then
    redis.call('HSET', PRODUCERS, producer_field, producer_held)
  else
    redis.call('HDEL', PRODUCERS, producer_field)
  end
end
