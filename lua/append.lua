#!lua
-- append.lua: append one or more encoded messages to a conversation, atomically.
--
-- The shebang declares no flags on purpose: that makes this a write script, which a
-- server over `maxmemory` (noeviction) rejects BEFORE it runs, so an OOM never leaves
-- a half-written batch behind. (Servers that cannot parse the shebang get this file
-- with the first line blanked out; see scripts.py.)
--
-- KEYS[1]   seq counter: a string holding the last assigned seq (absent = 0)
-- KEYS[2]   stream: one entry per message, entry ID "<seq>-<at>" (at: the commit time in
--           microseconds since the Unix epoch), one field: "msg" (an edit entry: "edit").
--           Entries written by earlier versions have ID "<seq>-0" and fields "at" (the
--           commit time) and "msg" or "edit"; they are read as before, and appends
--           continue after them (seq grows, so IDs still grow).
-- KEYS[3]   blobs: a hash of large binaries stored off the rows, field = SHA-256 (hex);
--           touched only when the batch stores blobs or ARGV[6] sets a lifetime, and
--           otherwise passed as KEYS[2] again (see "Slot moves" below)
-- KEYS[4]   producers: a hash, field = a producer id, value = its recent results (see
--           "The idempotent producer" below); KEYS[2] again when ARGV[13] is ""
-- KEYS[5]   optional idempotency record: "<last_seq> <at> <count> <fingerprint> <call>"
--           For an edit (ARGV[10] not "") or a conversation with a lifetime (ARGV[6] not
--           ""), KEYS[5] is the view hash, KEYS[6] the hidden ranges (see view_lib.lua)
--           and KEYS[7] the optional idempotency record. (Plain appends leave them out: a
--           key that does not exist would stall the call during a cluster slot move.)
-- ARGV[1]   publish command: "PUBLISH", "SPUBLISH" (cluster) or "" for no event
-- ARGV[2]   channel for the post-commit event
-- ARGV[3]   how long the exactly-once record lives, in milliseconds: the idempotency
--           record, or (with a producer) the producer's results after its last write
-- ARGV[4]   fingerprint of the batch (ignored without an idempotency record)
-- ARGV[5]   "1": look the record up first (the idempotency record, or this pseq among the
--           producer's results); "0": skip that (the first try of a producer's call:
--           nothing can have committed it yet)
-- ARGV[6]   the conversation's lifetime in milliseconds, refreshed on every key it owns
--           by each append ("" for none: keys live until deleted)
-- ARGV[7]   a token naming this call (every try of one call sends the same token), kept
--           in the record so a replay can tell its own commit from another's ("" is a
--           token too: a producer's own calls use it)
-- ARGV[8]   B, the number of blobs this batch stores (0 for most appends)
-- ARGV[9]   the seq the log must end at for this append to commit (a compare-and-set:
--           "" for none); otherwise MSGLOG_CONFLICT and nothing is written
-- ARGV[10]  the edit this call makes (docs/edits.md), written as one entry before the
--           messages: "" (none: a plain append), "retract", "pop", "compact", "archive",
--           "fork" or "attrs" (attributes changed, the view untouched)
-- ARGV[11]  the edit's argument: retract: the seqs ("7,9"); compact: the seq it compacts
--           through ("end": everything); archive: the watermark seq; else ""
-- ARGV[12]  fork and attrs only: the entry's JSON (a fork is a compaction of an empty log)
-- ARGV[13]  the producer id (12 hex digits) of the log object making the call, or "" for
--           none (a caller's key, or retries off)
-- ARGV[14]  the producer's call number (pseq) of this call, the same on every try
-- ARGV[15]  the lowest pseq of the producer's calls still in flight (none below it will
--           be re-sent, so their results can go), or "" if the caller cannot tell
-- ARGV[16]  A, the number of conversation attributes this call changes (0 for most)
-- ARGV[17]  those changes as JSON ({"name":"value","gone":null}; "" when A is 0), added
--           to the call's edit entry as "attrs" (docs/edits.md, "Attributes")
-- ARGV[18..] B pairs of a blob's SHA-256 (hex) and its bytes, then A pairs of an
--           attribute change ("+name" to set, "-name" to delete) and its value, then the
--           encoded messages (JSON), in order; at least one unless this is an edit
--
-- Returns {last_seq, at, replayed, call, popped}: the seq of the last entry written, the
-- commit time in microseconds since the Unix epoch (a string) read once from the server's
-- clock, 1 when the record or the producer already held this call (nothing written; the
-- first call's result), the token of the call that wrote it ("" for a record written
-- before tokens existed, or by a producer's own call), and for a pop the popped entry
-- ({id, fields}; 0 when the view was empty: nothing written). MSGLOG_STALE (nothing
-- written): the producer no longer holds this pseq's result, so whether it committed
-- cannot be told.
--
-- Nothing is written unless everything can be: the counter is checked to be exactly what
-- INCRBY accepts and to end where the stream ends, then the first XADD (which can still
-- fail on a wrong type) runs before any other change. Later XADDs use larger IDs, and
-- INCRBY, SET, HSET, HSETNX and PEXPIRE cannot fail on keys already checked.
--
-- Slot moves: while a Redis Cluster slot migrates, a multi-key command runs only on a
-- node holding every key it names (else TRYAGAIN until the move ends), so an append
-- names only keys that exist once the conversation does: KEYS[3] only when it is used,
-- the producers hash, and no per-append key (a record only with a caller's key).

-- @include view_lib.lua

local BLOBS = tonumber(ARGV[8])
local ATTRS = tonumber(ARGV[16])
local HEADER = 17 + 2 * BLOBS + 2 * ATTRS
local n = #ARGV - HEADER
local OP = ARGV[10]
local PRODUCERS = KEYS[4]
local VIEW, HIDDEN, RECORD = nil, nil, KEYS[5]
if OP ~= '' or ARGV[6] ~= '' then
  VIEW, HIDDEN, RECORD = KEYS[5], KEYS[6], KEYS[7]
end

if RECORD and ARGV[5] == '1' then
  local record = redis.pcall('GET', RECORD)
  if type(record) == 'table' and record.err then
    return redis.error_reply('WRONGTYPE idempotency record ' .. RECORD .. ' is not a string')
  end
  if record then
    local last, at, count, fingerprint, call =
      string.match(record, '^(%d+) (%d+) (%d+) (%x+) ?(%x*)$')
    if not last then
      return redis.error_reply('MSGLOG_BADRECORD idempotency record ' .. RECORD .. ' holds ' ..
        record)
    end
    if fingerprint ~= ARGV[4] or tonumber(count) ~= n then
      return redis.error_reply('MSGLOG_KEYREUSED idempotency key ' .. RECORD ..
        ' was used for a different batch')
    end
    return {tonumber(last), at, 1, call}
  end
end

-- The idempotent producer: exactly-once without a caller's key ------------------------
-- Each log object is a producer (ARGV[13]) numbering its calls (ARGV[14], the pseq); every
-- try of a call carries the same pair. PRODUCERS (KEYS[4]) holds one field per producer:
--   "<expires_ms> <count> <result> <result> ..."
--   result = "<pseq>,<last_seq>", or "<pseq>,<last_seq>,<call>" for a call with a token
-- in ascending pseq order, and the server time (ms) after which the producer is idle
-- enough to prune. Results below the caller's floor (ARGV[15]: its lowest call still in
-- flight) are dropped, and the lowest beyond WINDOW: a sequential caller keeps one, one
-- with C calls in flight about C. Only the lowest pseq is ever dropped, so a pseq below
-- the lowest held may have committed (MSGLOG_STALE: cannot tell), and one above it that
-- is not held never did (calls of one asyncio log object may commit out of order: pseq 6
-- before pseq 5's first try arrives). A replay reads its commit time from the stream
-- entry. Memory grows with the producers, not with the appends; idle ones are pruned a
-- few at a time when a new one joins more than PRUNE_ABOVE. Everything that can fail is
-- parsed here, before the first write; `msglog verify` checks every result.
local WINDOW = 64
local PRUNE_ABOVE = 32
local PRUNE_SAMPLE = 4

-- The commit time of the entry `seq` ("0" if it is gone), or nil if KEYS[2] is no stream:
-- the second part of its ID, or an older entry's "at" field (ID "<seq>-0").
local function committed_at(seq)
  local entry = redis.pcall('XRANGE', KEYS[2], seq, seq)  -- "<seq>-0" to "<seq>-<max>"
  if type(entry) == 'table' and entry.err then
    return nil
  end
  if not entry[1] then
    return '0'
  end
  local fields = entry[1][2]
  for i = 1, #fields - 1, 2 do
    if fields[i] == 'at' then
      return fields[i + 1]
    end
  end
  return string.match(entry[1][1], '%-(%d+)$') or '0'
end

-- This producer's results (nil: none yet), their count and newest pseq; or, as the fourth
-- value, the reply to return at once: an error, or (when ARGV[5] asks to look the call
-- up) its held result (a replay) or MSGLOG_STALE.
local function producer_lookup()
  local value = redis.pcall('HGET', PRODUCERS, ARGV[13])
  if type(value) == 'table' and value.err then
    return nil, 0, 0, redis.error_reply('WRONGTYPE producers ' .. PRODUCERS ..
      ' is not a hash')
  end
  if not value then
    return nil, 0, 0
  end
  local count, results = string.match(value, '^%d+ (%d+)( %d+,%d+,?%x*.*)$')
  local newest = results and string.match(results, '.* (%d+),%d+,?%x*$')
  if not newest then
    return nil, 0, 0, redis.error_reply('MSGLOG_BADRECORD producer ' .. ARGV[13] .. ' of ' ..
      PRODUCERS .. ' holds ' .. string.format('%q', string.sub(value, 1, 80)))
  end
  if ARGV[5] == '1' then
    local last, call = string.match(results, ' ' .. ARGV[14] .. ',(%d+),?(%x*)')
    if last then
      local at = committed_at(last)
      if not at then
        return nil, 0, 0, redis.error_reply('WRONGTYPE stream ' .. KEYS[2] ..
          ' is not a stream')
      end
      return nil, 0, 0, {tonumber(last), at, 1, call}
    end
    if tonumber(ARGV[14]) < tonumber(string.match(results, '^ (%d+),')) then
      return nil, 0, 0, redis.error_reply('MSGLOG_STALE producer ' .. ARGV[13] .. ' of ' ..
        PRODUCERS .. ' no longer holds the result of call ' .. ARGV[14])
    end
  end
  return results, tonumber(count), tonumber(newest)
end

-- Record this call's result (after the write), then prune a few idle producers.
local function producer_record(results, count, newest, new_last, now_ms)
  local pseq = tonumber(ARGV[14])
  local result = ' ' .. ARGV[14] .. ',' .. string.format('%d', new_last)
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
  local floor = tonumber(ARGV[15]) or 0
  while count > 1 do  -- drop the lowest pseq while below the floor or beyond the window
    local lowest = tonumber(string.match(results, '^ (%d+),') or '')
    local cut = string.find(results, ' ', 2, true)
    if not cut or (count <= WINDOW and lowest and lowest >= floor) then
      break
    end
    results = string.sub(results, cut)
    count = count - 1
  end
  local added = redis.call('HSET', PRODUCERS, ARGV[13],
    string.format('%d', now_ms + tonumber(ARGV[3])) .. ' ' .. count .. results)
  -- Only a new producer grows the hash: prune then.
  if added == 1 and redis.call('HLEN', PRODUCERS) > PRUNE_ABOVE then
    local sample = redis.call('HRANDFIELD', PRODUCERS, PRUNE_SAMPLE, 'WITHVALUES')
    for i = 1, #sample, 2 do
      local expires = tonumber(string.match(sample[i + 1], '^(%d+) '))
      if expires and expires < now_ms then
        redis.call('HDEL', PRODUCERS, sample[i])
      end
    end
  end
end

local producer_held, producer_count, producer_newest = nil, 0, 0
if ARGV[13] ~= '' then
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
if VIEW and OP == '' then  -- a log with a lifetime refreshes (and creates) its view keys
  local view_kind = redis.call('TYPE', VIEW)['ok']
  if view_kind ~= 'none' and view_kind ~= 'hash' then
    return redis.error_reply('WRONGTYPE view ' .. VIEW .. ' is not a hash')
  end
  local hidden_kind = redis.call('TYPE', HIDDEN)['ok']
  if hidden_kind ~= 'none' and hidden_kind ~= 'zset' then
    return redis.error_reply('WRONGTYPE hidden ranges ' .. HIDDEN .. ' is not a sorted set')
  end
end
if BLOBS > 0 or ARGV[6] ~= '' then
  local kind = redis.call('TYPE', KEYS[3])['ok']
  if kind ~= 'none' and kind ~= 'hash' then
    return redis.error_reply('WRONGTYPE blobs ' .. KEYS[3] .. ' is not a hash')
  end
end

-- The seq of a stream entry ({id, fields}) as this library writes it, or nil: ID
-- "<seq>-<at>" and a "msg" or "edit" field, or (older versions) ID "<seq>-0" and an "at"
-- field besides. An "at" field under any other ID is not ours: `XADD key *` makes IDs
-- "<ms>-<n>".
local function entry_seq(entry)
  local seq, tail = string.match(entry[1], '^(%d+)-(%d+)$')
  local has_at, has_body = false, false
  local fields = entry[2]
  for i = 1, #fields - 1, 2 do
    has_at = has_at or fields[i] == 'at'
    has_body = has_body or fields[i] == 'msg' or fields[i] == 'edit'
  end
  if seq and has_body and has_at == (tail == '0') then
    return tonumber(seq)
  end
  return nil
end

-- The seq of the stream's newest entry (0 when it is empty).
local function stream_end()
  local newest = redis.call('XREVRANGE', KEYS[2], '+', '-', 'COUNT', 1)
  if not newest[1] then
    return 0
  end
  local seq = entry_seq(newest[1])
  if not seq then
    return redis.error_reply('MSGLOG_FOREIGN stream ' .. KEYS[2] .. ' ends with entry ' ..
      newest[1][1] .. ', not one of the form <seq>-<at> with a msg or edit field')
  end
  return seq
end

local last = 0
if raw then
  last = counter_value(KEYS[1], raw)  -- see view_lib.lua
  if type(last) == 'table' then
    return last
  end
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
    if length > last then  -- more entries than seqs: a seq written twice (by hand)
      return redis.error_reply('MSGLOG_BEHIND seq counter ' .. KEYS[1] .. ' (' .. last ..
        ') is behind stream ' .. KEYS[2] .. ', which has ' .. length .. ' entries')
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

-- Edits (docs/edits.md): everything is checked before the first write.

local function bad_edit(text)
  return {err = 'MSGLOG_BADEDIT ' .. text}
end

-- An error unless seq s is a row of the view: a message, not hidden, in a segment.
local function check_row(segments, s, what)
  what = what .. ' ' .. string.format('%d', s)  -- exact: '..' would print 1e+14
  if s < 1 or s > last then
    return bad_edit(what .. ' is not in the log (last seq ' .. string.format('%d', last) .. ')')
  end
  if is_hidden(HIDDEN, s) or not segment_of(segments, s) then
    return bad_edit(what .. ' is not in the view: an edit entry, or already ' ..
      'retracted or compacted away')
  end
  local entry = redis.call('XRANGE', KEYS[2], s, s)  -- "<s>-0" to "<s>-<max>"
  if not entry[1] then
    return bad_edit(what .. ' is missing from the stream (deleted by hand?)')
  end
  return nil
end

-- The view after a compaction through `through` (nil: everything; 0: nothing) whose
-- entry is seq c, followed by its k messages: those first, then what followed `through`.
local function compacted(segments, through, c, k)
  local rest = {}
  if through == 0 then
    rest = segments
  elseif through then
    local i = segment_of(segments, through)
    if segments[i][2] == nil or through < segments[i][2] then
      rest[1] = {through + 1, segments[i][2]}
    end
    for j = i + 1, #segments do
      rest[#rest + 1] = segments[j]
    end
  end
  local result = {}
  if k > 0 then
    result[1] = {c + 1, c + k}
  end
  for _, segment in ipairs(rest) do
    if segment[2] ~= nil then
      result[#result + 1] = segment
    elseif c - 1 >= segment[1] then
      result[#result + 1] = {segment[1], c - 1}  -- the open run ends before this entry
    end
  end
  local tail = result[#result]
  if tail and (tail[2] == c + k or (k == 0 and tail[2] == c - 1)) then
    tail[2] = nil  -- nothing visible in between (the entry itself is hidden): one run
  else
    result[#result + 1] = {c + k + 1, nil}
  end
  return result
end

-- Whether row a comes before row b in the view (both in a segment).
local function before(segments, a, b)
  local sa, sb = segment_of(segments, a), segment_of(segments, b)
  return sa < sb or (sa == sb and a < b)
end

-- The edit to make: {marker, segments, archived ("" to clear, nil to keep), hide,
-- popped}; nil for a pop of an empty view; or an error reply.
local function plan_edit()
  local segments, edited = load_segments(VIEW)
  if segments.err then
    return segments
  end
  local kind = redis.call('TYPE', HIDDEN)['ok']
  if kind ~= 'none' and kind ~= 'zset' then
    return {err = 'WRONGTYPE hidden ranges ' .. HIDDEN .. ' is not a sorted set'}
  end
  local archived = edited and tonumber(redis.call('HGET', VIEW, 'archived') or '') or nil
  local c = last + 1
  if OP == 'attrs' then
    return {ARGV[12], segments, nil, {}}  -- changes attributes only: the view stays
  elseif OP == 'retract' then
    local seqs = {}
    for text in string.gmatch(ARGV[11], '%d+') do
      local s = tonumber(text)
      local problem = check_row(segments, s, 'retract: seq')
      if problem then
        return problem
      end
      seqs[#seqs + 1] = s
    end
    return {'{"op":"retract","seqs":[' .. ARGV[11] .. ']}', segments, nil, seqs}
  elseif OP == 'pop' then
    local found = {}
    for i = #segments, 1, -1 do
      if walk_down(KEYS[2], HIDDEN, segments[i][1], segments[i][2] or last, 1, found) == 0 then
        break
      end
    end
    if not found[1] then
      return nil
    end
    local s = string.match(found[1][1], '^(%d+)')
    return {'{"op":"retract","seqs":[' .. s .. ']}', segments, nil, {tonumber(s)}, found[1]}
  elseif OP == 'archive' then
    local w = tonumber(ARGV[11])
    local problem = check_row(segments, w, 'archive: seq')
    if problem then
      return problem
    end
    if archived and segment_of(segments, archived) and not before(segments, archived, w) then
      return bad_edit('archive: seq ' .. string.format('%d', w) .. ' is not after the ' ..
        'archive watermark (seq ' .. string.format('%d', archived) .. '): the watermark ' ..
        'only moves forward')
    end
    return {'{"op":"archive","through":' .. string.format('%d', w) .. '}', segments, string.format('%d', w), {}}
  end
  -- compact, or fork: a compaction of everything on an empty log
  local through = nil
  if ARGV[11] ~= 'end' then
    through = tonumber(ARGV[11])
    if through ~= 0 then
      local problem = check_row(segments, through, 'compact: seq')
      if problem then
        return problem
      end
    end
  end
  local keep = nil
  if archived and (through == nil or (through ~= 0 and segment_of(segments, archived)
      and not before(segments, through, archived))) then
    keep = ''  -- the watermark row is replaced: nothing is archived any more
  end
  local marker = ARGV[12]  -- a fork's: built by the client
  if OP == 'compact' then
    local what = through and ('"through":' .. through .. ',') or ''  -- none: everything
    marker = '{"op":"compact",' .. what .. '"count":' .. n .. '}'
  end
  return {marker, compacted(segments, through, c, n), keep, {}}
end

local edit = nil
if OP ~= '' then
  edit = plan_edit()
  if edit == nil then
    return {last, at, 0, ARGV[7], 0}  -- a pop of an empty view: nothing to do
  end
  if edit.err then
    return edit
  end
  if ATTRS > 0 and OP ~= 'attrs' and OP ~= 'fork' then  -- theirs already carry them
    edit[1] = string.sub(edit[1], 1, -2) .. ',"attrs":' .. ARGV[17] .. '}'
  end
end

-- The first entry (the edit's, else the first message) is added alone: it is the one
-- that can still fail. The messages follow without a table per message (a batch of 100
-- is 100 XADDs).
local first_field, first_value, next_arg = 'msg', ARGV[HEADER + 1], HEADER + 2
if edit then
  first_field, first_value, next_arg = 'edit', edit[1], HEADER + 1
end
local written = n + (edit and 1 or 0)

-- Entry ID "<seq>-<at>": the commit time is kept in the ID, not in a field of its own.
local added = redis.pcall('XADD', KEYS[2], string.format('%d-', last + 1) .. at,
  first_field, first_value)
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
for i = next_arg, #ARGV do
  redis.call('XADD', KEYS[2], string.format('%d-', last + 2 + i - next_arg) .. at, 'msg',
    ARGV[i])
end
for i = 0, BLOBS - 1 do  -- content-addressed: the same bytes are stored once
  redis.call('HSETNX', KEYS[3], ARGV[18 + 2 * i], ARGV[19 + 2 * i])
end
local new_last = last + written
if raw then
  redis.call('INCRBY', KEYS[1], written)
else
  redis.call('SET', KEYS[1], new_last)  -- a new counter, or one healed from the stream
end

if edit then
  for _, s in ipairs(edit[4]) do
    hide(HIDDEN, s, s)
  end
  hide(HIDDEN, last + 1, last + 1)  -- the edit entry itself is in no view
  redis.call('HSET', VIEW, 'segments', format_segments(edit[2]), 'version', last + 1)
  local first_attr = 18 + 2 * BLOBS
  for i = first_attr, first_attr + 2 * ATTRS - 1, 2 do  -- attributes live in the view hash
    local change, name = string.sub(ARGV[i], 1, 1), 'a:' .. string.sub(ARGV[i], 2)
    if change == '+' then
      redis.call('HSET', VIEW, name, ARGV[i + 1])
    else
      redis.call('HDEL', VIEW, name)
    end
  end
  if edit[3] == '' then
    redis.call('HDEL', VIEW, 'archived')
  elseif edit[3] then
    redis.call('HSET', VIEW, 'archived', edit[3])
  end
elseif VIEW then
  -- A log with a lifetime names its view keys in every append (to refresh their expiry),
  -- so they must exist, or a cluster slot move would hold its appends up (TRYAGAIN). An
  -- edit-free view, and a hidden range no seq falls in, from its first append on.
  if redis.call('EXISTS', VIEW) == 0 then
    redis.call('HSET', VIEW, 'segments', '1-', 'version', 0)
  end
  if redis.call('EXISTS', HIDDEN) == 0 then
    redis.call('ZADD', HIDDEN, 0, '0-0')
  end
end

if RECORD then
  redis.call('SET', RECORD, string.format('%d', new_last) .. ' ' .. at .. ' ' .. n .. ' ' ..
    ARGV[4] .. ' ' .. ARGV[7], 'PX', ARGV[3])
end
if ARGV[13] ~= '' then
  local now_ms = tonumber(time[1]) * 1000 + math.floor(tonumber(time[2]) / 1000)
  producer_record(producer_held, producer_count, producer_newest, new_last, now_ms)
end
if ARGV[6] ~= '' then
  if redis.call('EXISTS', KEYS[3]) == 0 then
    -- Named by every append of a log with a lifetime, so it must exist (see the view
    -- keys above): a placeholder field, never a digest.
    redis.call('HSET', KEYS[3], '-', '')
  end
  redis.call('PEXPIRE', KEYS[1], ARGV[6])
  redis.call('PEXPIRE', KEYS[2], ARGV[6])
  redis.call('PEXPIRE', KEYS[3], ARGV[6])  -- blobs live exactly as long as their rows
  redis.call('PEXPIRE', PRODUCERS, ARGV[6])
  redis.call('PEXPIRE', VIEW, ARGV[6])  -- the view lives as long as the entries
  redis.call('PEXPIRE', HIDDEN, ARGV[6])
end

if ARGV[1] ~= '' then
  local first = string.format('%d', last + 1)
  local messages = table.concat(ARGV, ',', HEADER + 1)
  local payload = '{"first":' .. first .. ',"last":' .. string.format('%d', new_last) ..
    ',"at":' .. at
  if edit then
    payload = payload .. ',"edit":' .. edit[1]
  end
  redis.call(ARGV[1], ARGV[2], payload .. ',"messages":[' .. messages .. ']}')
end

return {new_last, at, 0, ARGV[7], edit and edit[5] or 0}
