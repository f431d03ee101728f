#!lua
-- append.lua: append one or more encoded messages to a conversation, atomically.
--
-- The shebang declares no flags on purpose: that makes this a write script, which a
-- server over `maxmemory` (noeviction) rejects BEFORE it runs, so an OOM never leaves
-- a half-written batch behind. (Servers that cannot parse the shebang get this file
-- with the first line blanked out; see scripts.py.)
--
-- KEYS[1]   seq counter: a string holding the last assigned seq (absent = 0)
-- KEYS[2]   stream: one entry per message, entry ID "<seq>-0", fields "at" and "msg"
-- KEYS[3]   blobs: a hash of large binaries stored off the rows, field = SHA-256 (hex);
--           touched only when the batch stores blobs or ARGV[6] sets a lifetime, and
--           otherwise passed as KEYS[2] again (see "Slot moves" below)
-- KEYS[4]   producers: a hash, field = a producer id, value = its recent results (see
--           "The idempotent producer" below)
-- KEYS[5]   optional idempotency record of a caller's key:
--           "<last_seq> <at> <count> <fingerprint> <call>"
-- ARGV[1]   publish command: "PUBLISH", "SPUBLISH" (cluster) or "" for no event
-- ARGV[2]   channel for the post-commit event
-- ARGV[3]   how long the exactly-once record lives, in milliseconds: KEYS[5], or (with a
--           producer) the producer's results after its last write
-- ARGV[4]   fingerprint of the batch (ignored without KEYS[5])
-- ARGV[5]   "1": look the record up first (KEYS[5], or this pseq among the producer's
--           results); "0": skip that (the first try of a call: nothing can have
--           committed it yet)
-- ARGV[6]   the conversation's lifetime in milliseconds, refreshed on every key it owns
--           by each append ("" for none: keys live until deleted)
-- ARGV[7]   a token naming this call (every try of one call sends the same token), kept
--           in the record so a replay can tell its own commit from another's ("" is a
--           token too: a producer's own calls use it)
-- ARGV[8]   B, the number of blobs this batch stores (0 for most appends)
-- ARGV[9]   the seq the log must end at for this append to commit (a compare-and-set:
--           "" for none); otherwise MSGLOG_CONFLICT and nothing is written
-- ARGV[10]  the producer id (12 hex digits) of the log object making the call, or "" for
--           none (a caller's key, or retries off)
-- ARGV[11]  the producer's call number (pseq) of this call, the same on every try
-- ARGV[12..] B pairs of a blob's SHA-256 (hex) and its bytes, then the encoded messages
--           (JSON), in order; at least one
--
-- Returns {last_seq, at, replayed, call}: the seq of the last message written, the commit
-- time in microseconds since the Unix epoch (a string) read once from the server's clock,
-- 1 when KEYS[5] or the producer already recorded this call (nothing written; the first
-- result), and the token of the call that wrote it ("" for a record written before tokens
-- existed, or by a producer's own call). MSGLOG_STALE (nothing written): the producer no
-- longer holds this pseq's result, so whether it committed cannot be told.
--
-- Nothing is written unless everything can be: the counter is checked to be exactly what
-- INCRBY accepts and to end where the stream ends, then the first XADD (which can still
-- fail on a wrong type) runs before any other change. Later XADDs use larger IDs, and
-- INCRBY, SET, HSET, HSETNX and PEXPIRE cannot fail on keys already checked.
--
-- Slot moves: while a Redis Cluster slot migrates, a multi-key command runs only on a
-- node holding every key it names (else TRYAGAIN until the move ends), so an append
-- names only keys that exist once the conversation does: KEYS[3] only when it is used,
-- and no per-append key (KEYS[5] only with a caller's key).

local BLOBS = tonumber(ARGV[8])
local HEADER = 11 + 2 * BLOBS
local n = #ARGV - HEADER

if KEYS[5] and ARGV[5] == '1' then
  local record = redis.pcall('GET', KEYS[5])
  if type(record) == 'table' and record.err then
    return redis.error_reply('WRONGTYPE idempotency record ' .. KEYS[5] .. ' is not a string')
  end
  if record then
    local last, at, count, fingerprint, call =
      string.match(record, '^(%d+) (%d+) (%d+) (%x+) ?(%x*)$')
    if not last then
      return redis.error_reply('MSGLOG_BADRECORD idempotency record ' .. KEYS[5] .. ' holds ' ..
        record)
    end
    if fingerprint ~= ARGV[4] or tonumber(count) ~= n then
      return redis.error_reply('MSGLOG_KEYREUSED idempotency key ' .. KEYS[5] ..
        ' was used for a different batch')
    end
    return {tonumber(last), at, 1, call}
  end
end

-- The idempotent producer: exactly-once without a caller's key ------------------------
-- Each log object is a producer (ARGV[10]) numbering its calls (ARGV[11], the pseq); every
-- try of a call carries the same pair. KEYS[4] holds one field per producer:
--   "<expires_ms> <count> <result> <result> ..."
--   result = "<pseq>,<last_seq>", or "<pseq>,<last_seq>,<call>" for a call with a token
-- with at most WINDOW results, in ascending pseq order, and the server time (ms) after
-- which the producer is idle enough to prune. Only the lowest pseq is ever dropped, so a
-- pseq below the lowest held may have committed (MSGLOG_STALE: cannot tell), and one
-- above it that is not held never did (calls of one asyncio log object may commit out of
-- order: pseq 6 before pseq 5's first try arrives). A replay reads its commit time from
-- the stream entry. Memory grows with the producers, not with the appends; idle ones are
-- pruned a few at a time when a new one joins more than PRUNE_ABOVE. Everything that can fail
-- is parsed here, before the first write; `msglog verify` checks every result.
local WINDOW = 16
local PRUNE_ABOVE = 32
local PRUNE_SAMPLE = 4

-- The commit time of the entry `seq` ("0" if it is gone), or nil if KEYS[2] is no stream.
local function committed_at(seq)
  local entry = redis.pcall('XRANGE', KEYS[2], seq .. '-0', seq .. '-0')
  if type(entry) == 'table' and entry.err then
    return nil
  end
  local fields = entry[1] and entry[1][2] or {}
  for i = 1, #fields - 1, 2 do
    if fields[i] == 'at' then
      return fields[i + 1]
    end
  end
  return '0'
end

-- This producer's results (nil: none yet), their count and newest pseq; or, as the fourth
-- value, the reply to return at once: an error, or (when ARGV[5] asks to look the call
-- up) its held result (a replay) or MSGLOG_STALE.
local function producer_lookup()
  local value = redis.pcall('HGET', KEYS[4], ARGV[10])
  if type(value) == 'table' and value.err then
    return nil, 0, 0, redis.error_reply('WRONGTYPE producers ' .. KEYS[4] .. ' is not a hash')
  end
  if not value then
    return nil, 0, 0
  end
  local count, results = string.match(value, '^%d+ (%d+)( %d+,%d+,?%x*.*)$')
  local newest = results and string.match(results, '.* (%d+),%d+,?%x*$')
  if not newest then
    return nil, 0, 0, redis.error_reply('MSGLOG_BADRECORD producer ' .. ARGV[10] .. ' of ' ..
      KEYS[4] .. ' holds ' .. string.format('%q', string.sub(value, 1, 80)))
  end
  if ARGV[5] == '1' then
    local last, call = string.match(results, ' ' .. ARGV[11] .. ',(%d+),?(%x*)')
    if last then
      local at = committed_at(last)
      if not at then
        return nil, 0, 0, redis.error_reply('WRONGTYPE stream ' .. KEYS[2] .. ' is not a stream')
      end
      return nil, 0, 0, {tonumber(last), at, 1, call}
    end
    if tonumber(ARGV[11]) < tonumber(string.match(results, '^ (%d+),')) then
      return nil, 0, 0, redis.error_reply('MSGLOG_STALE producer ' .. ARGV[10] .. ' of ' ..
        KEYS[4] .. ' no longer holds the result of call ' .. ARGV[11])
    end
  end
  return results, tonumber(count), tonumber(newest)
end

-- Record this call's result (after the write), then prune a few idle producers.
local function producer_record(results, count, newest, new_last, now_ms)
  local pseq = tonumber(ARGV[11])
  local result = ' ' .. ARGV[11] .. ',' .. string.format('%d', new_last)
  if ARGV[7] ~= '' then
    result = result .. ',' .. ARGV[7]
  end
  if not results then
    results = result
  elseif pseq > newest then
    results = results .. result
  else  -- committed after a later call of the same producer: keep pseq order
    local parts, placed = {}, false
    for part, held in string.gmatch(results, '( (%d+),[^ ]*)') do
      if not placed and tonumber(held) > pseq then
        parts[#parts + 1] = result
        placed = true
      end
      parts[#parts + 1] = part
    end
    results = table.concat(parts)
  end
  count = count + 1
  if count > WINDOW then  -- drop the lowest pseq
    results = string.sub(results, (string.find(results, ' ', 2, true)))
    count = count - 1
  end
  local added = redis.call('HSET', KEYS[4], ARGV[10],
    string.format('%d', now_ms + tonumber(ARGV[3])) .. ' ' .. count .. results)
  -- Only a new producer grows the hash: prune then.
  if added == 1 and redis.call('HLEN', KEYS[4]) > PRUNE_ABOVE then
    local sample = redis.call('HRANDFIELD', KEYS[4], PRUNE_SAMPLE, 'WITHVALUES')
    for i = 1, #sample, 2 do
      local expires = tonumber(string.match(sample[i + 1], '^(%d+) '))
      if expires and expires < now_ms then
        redis.call('HDEL', KEYS[4], sample[i])
      end
    end
  end
end

local producer_held, producer_count, producer_newest = nil, 0, 0
if ARGV[10] ~= '' then
  local answer
  producer_held, producer_count, producer_newest, answer = producer_lookup()
  if answer then
    return answer
  end
end
-- ------------------------------------------------------------------------------------

local time = redis.call('TIME')
local at = time[1] .. string.format('%06d', tonumber(time[2]))

local raw = redis.pcall('GET', KEYS[1])
if type(raw) == 'table' and raw.err then
  return redis.error_reply('WRONGTYPE seq counter ' .. KEYS[1] .. ' is not a string')
end
local length = redis.pcall('XLEN', KEYS[2])
if type(length) == 'table' and length.err then
  return redis.error_reply('WRONGTYPE stream ' .. KEYS[2] .. ' is not a stream')
end
if BLOBS > 0 or ARGV[6] ~= '' then
  local kind = redis.call('TYPE', KEYS[3])['ok']
  if kind ~= 'none' and kind ~= 'hash' then
    return redis.error_reply('WRONGTYPE blobs ' .. KEYS[3] .. ' is not a hash')
  end
end

-- The seq of the stream's newest entry (0 when it is empty).
local function stream_end()
  local newest = redis.call('XREVRANGE', KEYS[2], '+', '-', 'COUNT', 1)
  if not newest[1] then
    return 0
  end
  local seq = string.match(newest[1][1], '^(%d+)-0$')
  if not seq then
    return redis.error_reply('MSGLOG_FOREIGN stream ' .. KEYS[2] .. ' ends with entry ' ..
      newest[1][1] .. ', not one of the form <seq>-0')
  end
  return tonumber(seq)
end

local last = 0
if raw then
  -- Exactly the canonical non-negative integers INCRBY accepts ("3.0", " 3", "0x3", "+3",
  -- "03" pass tonumber but not INCRBY), and few enough digits for Lua's doubles.
  if not (raw == '0' or (string.match(raw, '^[1-9]%d*$') and #raw <= 15)) then
    return redis.error_reply('MSGLOG_BADSEQ seq counter ' .. KEYS[1] .. ' holds ' ..
      string.format('%q', raw) .. ', not a seq')
  end
  last = tonumber(raw)
  -- A healthy log has one entry per seq, so XLEN == counter; only when it does not (an
  -- operator's XDEL, a counter moved by hand) is the stream's last entry read.
  if length ~= last then
    local ends = stream_end()
    if type(ends) == 'table' then
      return ends
    end
    if ends > last then
      return redis.error_reply('MSGLOG_BEHIND seq counter ' .. KEYS[1] .. ' (' .. last ..
        ') is behind the last entry of stream ' .. KEYS[2] .. ' (seq ' .. ends .. ')')
    end
    if ends < last then
      return redis.error_reply('MSGLOG_AHEAD seq counter ' .. KEYS[1] .. ' (' .. last ..
        ') is ahead of the last entry of stream ' .. KEYS[2] .. ' (seq ' .. ends ..
        '): appending would leave a gap')
    end
  end
elseif length > 0 then
  -- No counter: a new conversation, or one whose counter was deleted or evicted while
  -- its stream remains. Continue after the stream's last entry instead of wedging.
  last = stream_end()
  if type(last) == 'table' then
    return last
  end
end

if ARGV[9] ~= '' and last ~= tonumber(ARGV[9]) then
  return redis.error_reply('MSGLOG_CONFLICT ' .. string.format('%d', last) ..
    ' is the last seq of ' .. KEYS[2] .. ', not ' .. ARGV[9])
end

local first_id = string.format('%d-0', last + 1)
local added = redis.pcall('XADD', KEYS[2], first_id, 'at', at, 'msg', ARGV[HEADER + 1])
if type(added) == 'table' and added.err then
  local err = tostring(added.err)  -- fakeredis hands over a userdata, not a string
  if string.find(err, 'equal or smaller', 1, true) then
    -- XLEN matched the counter, but an entry beyond it exists (one foreign entry with a
    -- deleted one below it, say).
    return redis.error_reply('MSGLOG_BEHIND seq counter ' .. KEYS[1] .. ' (' .. last ..
      ') is behind the last entry of stream ' .. KEYS[2])
  end
  return redis.error_reply(err)
end
for i = 2, n do
  redis.call('XADD', KEYS[2], string.format('%d-0', last + i), 'at', at, 'msg', ARGV[HEADER + i])
end
for i = 0, BLOBS - 1 do  -- content-addressed: the same bytes are stored once
  redis.call('HSETNX', KEYS[3], ARGV[12 + 2 * i], ARGV[13 + 2 * i])
end
local new_last = last + n
if raw then
  redis.call('INCRBY', KEYS[1], n)
else
  redis.call('SET', KEYS[1], new_last)  -- a new counter, or one healed from the stream
end

if KEYS[5] then
  redis.call('SET', KEYS[5], string.format('%d', new_last) .. ' ' .. at .. ' ' .. n .. ' ' ..
    ARGV[4] .. ' ' .. ARGV[7], 'PX', ARGV[3])
end
if ARGV[10] ~= '' then
  local now_ms = tonumber(time[1]) * 1000 + math.floor(tonumber(time[2]) / 1000)
  producer_record(producer_held, producer_count, producer_newest, new_last, now_ms)
end
if ARGV[6] ~= '' then
  redis.call('PEXPIRE', KEYS[1], ARGV[6])
  redis.call('PEXPIRE', KEYS[2], ARGV[6])
  redis.call('PEXPIRE', KEYS[3], ARGV[6])  -- blobs live exactly as long as their rows
  redis.call('PEXPIRE', KEYS[4], ARGV[6])
end

if ARGV[1] ~= '' then
  local first = string.format('%d', last + 1)
  local payload = '{"first":' .. first .. ',"last":' .. string.format('%d', new_last) ..
    ',"at":' .. at .. ',"messages":[' .. table.concat(ARGV, ',', HEADER + 1) .. ']}'
  redis.call(ARGV[1], ARGV[2], payload)
end

return {new_last, at, 0, ARGV[7]}
