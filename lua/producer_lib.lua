-- producer_lib.lua: the idempotent producer's look-up, exactly-once without a caller's
-- key, for the append scripts. Not a script of its own: the loader puts it
-- where a script says `-- @include producer_lib.lua`, after its argument bindings (the
-- names below); producer_save.lua writes the call's result before the entries,
-- producer_prune.lua prunes idle fields after them.
--
-- Each process is a producer (`producer`, shared by its log objects:
-- redis_msglog/_core/write/producer.py) numbering its calls (`pseq`); every try of a call
-- carries the same pair and `floor`, the lowest pseq of the producer still in flight (no
-- call below it will be sent again). PRODUCERS holds at most two fields per producer,
-- each "<expires_ms> <count> <dropped>,0 <result> <result> ...",
--   result = "<pseq>,<last_seq>", or "<pseq>,<last_seq>,<call>" for a call with a token,
-- in ascending pseq order (<count> of them); the server time (ms) after which the field
-- is idle enough to prune; and the highest pseq whose result was dropped (0: none;
-- values written before the marker existed lack it, and anything below their lowest
-- result counts as dropped):
--   "<producer>": the sequential field. The first try of a call that is the lowest of its
--     producer in flight (floor == pseq: every other call of the producer in flight began
--     after it, so none of them writes this field before it does) replaces it without
--     reading it, with its one result and <dropped> = pseq - 1: no call below the floor
--     is sent again. This is the common case, and costs one HSET.
--   "<producer>+": the concurrent field, written by every other call (a retry, or a call
--     with an older one still in flight), read and rewritten: results below the caller's
--     floor go, and the lowest beyond WINDOW; each dropped result raises <dropped>.
-- A retry (look_up "1") reads both: a pseq held by either was committed (a replay), one
-- at most the higher <dropped> may have committed (MSGLOG_STALE: cannot tell), any other
-- never committed, whatever commits of its producer's later calls arrived first (the
-- calls of a process's threads and tasks commit in any order). Memory grows with the
-- producers, not with the appends or the log objects (producer_prune.lua prunes idle
-- fields). `msglog verify` checks every value.
--
-- It leaves
--   producer_fast: the first try of a sequential call (nothing read), or
--   producer_state: the concurrent field's {results, count, newest pseq, kept until,
--     dropped through} (nil: none yet), producer_raw its value as read (nil: none), and
--     producer_value(state, new_last, now_ms): its new value with this call's result
--     (new_last: its last seq, as text)
-- or returns at once: an error, or (a retry) its held result (a replay) or MSGLOG_STALE.

local WINDOW = 64
local PRUNE_SAMPLE = 40
local PRUNE_EVERY = 10

local producer_fast, producer_state, producer_value, producer_raw = false, nil, nil, nil
if producer ~= '' then
  if look_up == '0' and floor == pseq then
    producer_fast = true
  else  -- (closures made on this path only: making one costs every call ~400 instructions)
    local function parsed(value)  -- {results, count, newest, expires, dropped} or an error
      if type(value) == 'table' and value.err then
        return nil, redis.error_reply('WRONGTYPE producers ' .. PRODUCERS .. ' is not a hash')
      end
      local expires, count, results = string.match(value, '^(%d+) (%d+)( %d+,%d+,?%x*.*)$')
      local through, held = string.match(results or '', '^ (%d+),0( %d+,.*)$')
      results = held or results
      local newest = results and string.match(results, '.* (%d+),%d+,?%x*$')
      if not newest then
        return nil, redis.error_reply('MSGLOG_BADRECORD producer ' .. producer .. ' of ' ..
          PRODUCERS .. ' holds ' .. string.format('%q', string.sub(value, 1, 80)))
      end
      local lowest = tonumber(string.match(results, '^ (%d+),'))
      -- A value written before the marker existed: anything below its lowest may be gone.
      local dropped = tonumber(through) or lowest - 1
      return {results, tonumber(count), tonumber(newest), tonumber(expires), dropped}
    end

    -- The commit time of the entry `seq` ("0" if it is gone), or nil if STREAM is no
    -- stream: the second part of its ID, or an older entry's "at" field (ID "<seq>-0").
    local function committed_at(seq)
      local found = redis.pcall('XRANGE', STREAM, seq, seq)  -- "<seq>-0" to "<seq>-<max>"
      if type(found) == 'table' and found.err then
        return nil
      end
      if not found[1] then
        return '0'
      end
      local fields = found[1][2]
      for i = 1, #fields - 1, 2 do
        if fields[i] == 'at' then
          return fields[i + 1]
        end
      end
      return string.match(found[1][1], '%-(%d+)$') or '0'
    end

    -- A retry: this call's result if a field holds it, else MSGLOG_STALE if a field
    -- dropped it, else nil (never committed).
    local function replayed(states)
      local dropped = 0
      for _, state in pairs(states) do
        local last, held_call = string.match(state[1], ' ' .. pseq .. ',(%d+),?(%x*)')
        if last then
          local at = committed_at(last)
          if not at then
            return redis.error_reply('WRONGTYPE stream ' .. STREAM .. ' is not a stream')
          end
          return {tonumber(last), at, 1, held_call}
        end
        dropped = math.max(dropped, state[5])
      end
      if tonumber(pseq) <= dropped then
        return redis.error_reply('MSGLOG_STALE producer ' .. producer .. ' of ' ..
          PRODUCERS .. ' no longer holds the result of call ' .. pseq)
      end
      return nil
    end

    local function producer_record(state, new_last, now_ms)
      local result = ' ' .. pseq .. ',' .. new_last
      if call ~= '' then
        result = result .. ',' .. call
      end
      -- Kept for the longest window of its calls: one with a short window must not let a
      -- call with a longer one be forgotten early.
      local expires = now_ms + record_ttl_ms  -- (digits: one conversion, not tonumber's two)
      local results, count, newest, kept_until, dropped = nil, 0, 0, 0, 0
      if state then
        results, count, newest, kept_until, dropped = state[1], state[2], state[3], state[4],
          state[5]
      end
      local number = tonumber(pseq)
      if not results then
        results = result
      elseif number > newest then
        results = results .. result
      else  -- committed after a later call of the same producer: keep pseq order
        local parts, placed = {}, false
        for part, held in string.gmatch(results, '( (%d+),[^ ]*)') do
          if not placed and tonumber(held) > number then
            parts[#parts + 1] = result
            placed = true
          end
          parts[#parts + 1] = part
        end
        results = table.concat(parts)
      end
      count = count + 1
      local lowest_in_flight = tonumber(floor) or 0
      while count > 1 do  -- drop the lowest pseq while below the floor or beyond the window
        local lowest = tonumber(string.match(results, '^ (%d+),') or '')
        local cut = string.find(results, ' ', 2, true)
        if not cut or (count <= WINDOW and lowest and lowest >= lowest_in_flight) then
          break
        end
        results = string.sub(results, cut)
        count = count - 1
        dropped = math.max(dropped, lowest)
      end
      return string.format('%d', math.max(kept_until, expires)) .. ' ' .. count .. ' ' ..
        string.format('%d', dropped) .. ',0' .. results
    end

    -- One command: a retry reads both fields, another call the concurrent one only.
    local read = redis.pcall('HMGET', PRODUCERS, producer .. '+', producer)
    if read.err then
      return redis.error_reply('WRONGTYPE producers ' .. PRODUCERS .. ' is not a hash')
    end
    local states = {}
    for i = 1, look_up == '1' and 2 or 1 do
      if read[i] then
        local state, refused = parsed(read[i])
        if refused then
          return refused
        end
        states[i] = state
      end
    end
    if look_up == '1' then
      local answer = replayed(states)
      if answer then
        return answer
      end
    end
    producer_state, producer_value, producer_raw = states[1], producer_record, read[1]
  end
end
