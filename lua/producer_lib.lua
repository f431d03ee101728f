-- producer_lib.lua: the idempotent producer, exactly-once without a caller's key, for
-- append.lua. Not a script of its own: the loader puts it where append.lua says
-- `-- @include producer_lib.lua`, after its argument bindings (the names below).
--
-- Each process is a producer (`producer`, shared by its log objects:
-- redis_msglog/_producer.py) numbering its calls (`pseq`); every try of a call carries
-- the same pair. PRODUCERS holds one field per producer:
--   "<expires_ms> <count> <dropped>,0 <result> <result> ..."
--   result = "<pseq>,<last_seq>", or "<pseq>,<last_seq>,<call>" for a call with a token
-- in ascending pseq order (<count> of them); the server time (ms) after which the
-- producer is idle enough to prune (the latest of its calls' windows: `record_ttl_ms` may
-- differ between calls); and the highest pseq whose result was dropped (0: none; its
-- last_seq of 0 marks it, as no append ends at seq 0; values written before it existed
-- lack it, and anything below their lowest result counts as dropped). Results below the
-- caller's `floor` (its lowest call still in flight) are dropped, and the lowest beyond
-- WINDOW: a sequential caller keeps one, one with C calls in flight about C. So a pseq
-- not held was dropped (may have committed: MSGLOG_STALE, cannot tell) if it is at most
-- <dropped>, and otherwise never committed, whatever commits of its later calls arrived
-- first (the calls of a process's threads and tasks commit in any order). A replay
-- reads its commit time from the stream entry. Memory grows with the producers, not with
-- the appends or the log objects: a write that adds a field (a producer new to the
-- hash), and every write whose seqs pass a multiple of PRUNE_EVERY (append.lua), looks at
-- PRUNE_SAMPLE fields and drops the idle ones (bounded work; only a new field grows the
-- hash, and each looks at 40, so it settles at about the producers that wrote within
-- their window, however many come and go). Everything that can fail is parsed here,
-- before the first write; `msglog verify` checks every result.

local WINDOW = 64
local PRUNE_SAMPLE = 40
local PRUNE_EVERY = 10

-- The lookup, inline (a closure costs every call its making, ~400 instructions and more
-- with upvalues: the slow path's are made on that path only). It leaves either
--   producer_kept, producer_through: the fast path, the first try of a sequential
--     caller's call (every held result goes): the value's expiry and dropped marker to
--     write back, as text (append.lua builds the new value from them); or
--   producer_state: the slow path's {results, count, newest pseq, kept until, dropped
--     through}, or nil (no field yet), and producer_value(state, new_last, now_ms): the
--     new value with this call's result (new_last: its last seq, as text)
-- or returns at once: an error, or (when look_up asks to look the call up) its held
-- result (a replay) or MSGLOG_STALE.
local producer_state, producer_kept, producer_through, producer_value = nil, nil, nil, nil
if producer ~= '' then
  local value = redis.pcall('HGET', PRODUCERS, producer)
  if look_up == '0' and floor == pseq and type(value) == 'string' then
    -- The first try of a call with no other call of the producer in flight (a sequential
    -- caller): every held result is below the floor and goes, so only the expiry, the
    -- dropped marker and the newest pseq are read, in one match. (Compared as digit
    -- strings, shorter is less: no text-to-number conversion.) A value this path wrote
    -- holds one result: matched first with no `.*`, whose backtracking over the value
    -- cost ~4,800 instructions (callgrind); any other, as before.
    local expires, through, newest = string.match(value, '^(%d+) 1 (%d+),0 (%d+),%d+,?%x*$')
    if not expires then
      expires, through, newest = string.match(value, '^(%d+) %d+ (%d+),0.* (%d+),%d+,?%x*$')
    end
    if newest and (#newest < #pseq or (#newest == #pseq and newest < pseq)) then
      local newer = #through > #newest or (#through == #newest and through > newest)
      producer_kept, producer_through = expires, newer and through or newest
    end
  end
  if not producer_kept then
    local function producer_lookup()
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
      if look_up == '1' then
        local last, held_call = string.match(results, ' ' .. pseq .. ',(%d+),?(%x*)')
        if last then
          -- The commit time of the entry `last` ("0" if it is gone), or nil if STREAM is no
          -- stream: the second part of its ID, or an older entry's "at" field (ID "<seq>-0").
          -- (Made here, on a replay only: a closure costs every call its making.)
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
          local at = committed_at(last)
          if not at then
            return nil, redis.error_reply('WRONGTYPE stream ' .. STREAM .. ' is not a stream')
          end
          return nil, {tonumber(last), at, 1, held_call}
        end
        if tonumber(pseq) <= dropped then
          return nil, redis.error_reply('MSGLOG_STALE producer ' .. producer .. ' of ' ..
            PRODUCERS .. ' no longer holds the result of call ' .. pseq)
        end
      end
      return {results, tonumber(count), tonumber(newest), tonumber(expires), dropped}
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

    local answer
    if value then
      producer_state, answer = producer_lookup()
      if answer then
        return answer
      end
    end
    producer_value = producer_record
  end
end
