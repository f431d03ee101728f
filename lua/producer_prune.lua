-- producer_prune.lua: idle fields of the producers hash dropped, after a call's entries
-- are written (producer_save.lua wrote its result), for the append scripts.
-- Not a script of its own: the loader puts it where a script says `-- @include
-- producer_prune.lua`, where `new_last` and `written` are set.
--
-- Idle fields are pruned (never this one: it is not idle) when this write added a
-- field, so producers that come and go cannot outgrow the ones pruned, and when its seqs
-- pass a multiple of PRUNE_EVERY, so the idle ones go with no new writer too: not on
-- every write (an HLEN on every append cost ~2,000 instructions).
if producer ~= '' and (producer_added or new_last % PRUNE_EVERY < written) then
  local sample, idle = redis.call('HRANDFIELD', PRODUCERS, PRUNE_SAMPLE, 'WITHVALUES'), {}
  local concurrent = producer_fast and producer .. '+'
  for i = 1, #sample, 2 do
    local idle_after = tonumber(string.match(sample[i + 1], '^(%d+) '))
    if idle_after and idle_after < now_ms then
      idle[#idle + 1] = sample[i]
    elseif sample[i] == concurrent then
      -- This producer's concurrent field, all of whose calls are below this one (the
      -- lowest in flight): none is sent again, and the sequential field's <dropped> now
      -- covers them.
      local newest = tonumber(string.match(sample[i + 1], '.* (%d+),%d+,?%x*$') or '')
      if newest and newest < tonumber(pseq) then
        idle[#idle + 1] = sample[i]
      end
    end
  end
  if idle[1] then  -- one HDEL for them all
    redis.call('HDEL', PRODUCERS, unpack(idle))
  end
end
