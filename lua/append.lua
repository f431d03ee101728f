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
--           touched only when the batch stores blobs, refers to stored ones (ARGV[18])
--           or ARGV[6] sets a lifetime, and otherwise passed as KEYS[2] again (see "Slot
--           moves" below)
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
-- ARGV[13]  the producer id (12 hex digits) of the process making the call (shared by its
--           log objects), or "" for none (a caller's key, or retries off)
-- ARGV[14]  the producer's call number (pseq) of this call, the same on every try
-- ARGV[15]  the lowest pseq of the producer's calls still in flight (none below it will
--           be re-sent, so their results can go), or "" if the caller cannot tell
-- ARGV[16]  A, the number of conversation attributes this call changes (0 for most)
-- ARGV[17]  those changes as JSON ({"name":"value","gone":null}; "" when A is 0), added
--           to the call's edit entry as "attrs" (docs/edits.md, "Attributes")
-- ARGV[18]  the blob references of this call's messages to bytes it does not bring
--           ("<message>.<part>:<sha256>" separated by spaces, indexes from 0; "" for
--           none, most calls): each must be a field of KEYS[3], which is then named, or
--           MSGLOG_BADBLOB and nothing is written (a reading worker could not hydrate it)
-- ARGV[19..] B pairs of a blob's SHA-256 (hex) and its bytes, then A pairs of an
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

-- @include counter_lib.lua

local BLOBS = tonumber(ARGV[8])
local ATTRS = tonumber(ARGV[16])
local HEADER = 18 + 2 * BLOBS + 2 * ATTRS
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
-- Each process is a producer (ARGV[13], shared by its log objects: redis_msglog/_producer.py)
-- numbering its calls (ARGV[14], the pseq); every try of a call carries the same pair.
-- PRODUCERS (KEYS[4]) holds one field per producer:
--   "<expires_ms> <count> <dropped>,0 <result> <result> ..."
--   result = "<pseq>,<last_seq>", or "<pseq>,<last_seq>,<call>" for a call with a token
-- in ascending pseq order (<count> of them); the server time (ms) after which the
-- producer is idle enough to prune (the latest of its calls' windows: ARGV[3] may differ
-- between calls); and the highest pseq whose result was dropped (0: none; its last_seq of
-- 0 marks it, as no append ends at seq 0; values written before it existed lack it, and
-- anything below their lowest result counts as dropped). Results below the caller's
-- floor (ARGV[15]: its lowest call still in flight) are dropped, and the lowest beyond
-- WINDOW: a sequential caller keeps one, one with C calls in flight about C. So a pseq
-- not held was dropped (may have committed: MSGLOG_STALE, cannot tell) if it is at most
-- <dropped>, and otherwise never committed, whatever commits of its later calls arrived
-- first (the calls of a process's threads and tasks commit in any order). A replay
-- reads its commit time from the stream entry. Memory grows with the producers, not with
-- the appends or the log objects; every write looks at PRUNE_SAMPLE fields of the others
-- and drops the idle ones (bounded work; the hash settles at about 4/3 of the producers
-- that wrote within their window, however many come and go). Everything that can fail
-- is parsed here, before the first write; `msglog verify` checks every result.
local WINDOW = 64
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

-- This producer's state: {results, count, newest pseq, kept until, dropped through}, or
-- nil (none yet); or, second, the reply to return at once: an error, or (when ARGV[5]
-- asks to look the call up) its held result (a replay) or MSGLOG_STALE.
local function producer_lookup()
  local value = redis.pcall('HGET', PRODUCERS, ARGV[13])
  if type(value) == 'table' and value.err then
    return nil, redis.error_reply('WRONGTYPE producers ' .. PRODUCERS .. ' is not a hash')
  end
  if not value then
    return nil
  end
  local expires, count, results = string.match(value, '^(%d+) (%d+)( %d+,%d+,?%x*.*)$')
  local through, rest = string.match(results or '', '^ (%d+),0( %d+,.*)$')
  results = rest or results
  local newest = results and string.match(results, '.* (%d+),%d+,?%x*$')
  if not newest then
    return nil, redis.error_reply('MSGLOG_BADRECORD producer ' .. ARGV[13] .. ' of ' ..
      PRODUCERS .. ' holds ' .. string.format('%q', string.sub(value, 1, 80)))
  end
  local lowest = tonumber(string.match(results, '^ (%d+),'))
  -- A value written before the marker existed: anything below its lowest may be gone.
  local dropped = tonumber(through) or lowest - 1
  if ARGV[5] == '1' then
    local last, call = string.match(results, ' ' .. ARGV[14] .. ',(%d+),?(%x*)')
    if last then
      local at = committed_at(last)
      if not at then
        return nil, redis.error_reply('WRONGTYPE stream ' .. KEYS[2] .. ' is not a stream')
      end
      return nil, {tonumber(last), at, 1, call}
    end
    if tonumber(ARGV[14]) <= dropped then
      return nil, redis.error_reply('MSGLOG_STALE producer ' .. ARGV[13] .. ' of ' ..
        PRODUCERS .. ' no longer holds the result of call ' .. ARGV[14])
    end
  end
  return {results, tonumber(count), tonumber(newest), tonumber(expires), dropped}
end

-- Record this call's result (after the write), then prune a few idle producers.
local function producer_record(state, new_last, now_ms)
  local results, count, newest, kept_until, dropped = nil, 0, 0, 0, 0
  if state then
    results, count, newest, kept_until, dropped = state[1], state[2], state[3], state[4],
      state[5]
  end
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
    dropped = math.max(dropped, lowest)
  end
  -- Kept for the longest window of its calls: one with a short window must not let a
  -- call with a longer one be forgotten early.
  local expires = math.max(kept_until, now_ms + tonumber(ARGV[3]))
  redis.call('HSET', PRODUCERS, ARGV[13], string.format('%d', expires) .. ' ' .. count ..
    ' ' .. string.format('%d', dropped) .. ',0' .. results)
  -- Every write prunes (never this producer: it is not idle), so producers that come and
  -- go cannot outgrow the ones pruned, whether or not new ones join.
  if redis.call('HLEN', PRODUCERS) > 1 then
    local sample = redis.call('HRANDFIELD', PRODUCERS, PRUNE_SAMPLE, 'WITHVALUES')
    for i = 1, #sample, 2 do
      local idle_after = tonumber(string.match(sample[i + 1], '^(%d+) '))
      if idle_after and idle_after < now_ms then
        redis.call('HDEL', PRODUCERS, sample[i])
      end
    end
  end
end

local producer_state = nil
if ARGV[13] ~= '' then
  local answer
  producer_state, answer = producer_lookup()
  if answer then
    return answer
  end
end
-- ------------------------------------------------------------------------------------

-- The event is published after the writes, and Redis checks a script's channels only when
-- it publishes (its keys it checks before running it): refuse a user who may not publish
-- here, before anything is written, rather than commit and then fail (Redis 7+).
if ARGV[1] ~= '' and redis.acl_check_cmd and not redis.acl_check_cmd(ARGV[1], ARGV[2], '') then
  return redis.error_reply('NOPERM this user has no permissions to publish the append ' ..
    'event on channel ' .. ARGV[2])
end

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
if BLOBS > 0 or ARGV[6] ~= '' or ARGV[18] ~= '' then
  local kind = redis.call('TYPE', KEYS[3])['ok']
  if kind ~= 'none' and kind ~= 'hash' then
    return redis.error_reply('WRONGTYPE blobs ' .. KEYS[3] .. ' is not a hash')
  end
end
-- A reference is written only if this conversation holds its bytes: otherwise every
-- hydrating read of every worker would fail on it. (Most calls have none.)
if ARGV[18] ~= '' then
  for message, part, digest in string.gmatch(ARGV[18], '(%d+)%.(%d+):(%x+)') do
    if redis.call('HEXISTS', KEYS[3], digest) == 0 then
      return redis.error_reply('MSGLOG_BADBLOB ' .. message .. ' ' .. part .. ' ' .. digest)
    end
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
  last = counter_value(KEYS[1], raw)  -- see counter_lib.lua
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

-- Edits (docs/edits.md): everything is checked before the first write. The functions an
-- edit needs are defined only by a call that edits: a plain append does not pay for them.
local function edit_part()
-- @include view_lib.lua
  -- The plan reads the view a segment at a time (view_lib.lua), so an edit costs the rows
  -- it moves in or out of the view, not the view's length.

  local MAX_RETRACT = 256  -- seqs one retract may take: it stays a short call

  local function bad_edit(text)
    return {err = 'MSGLOG_BADEDIT ' .. text}
  end

  -- An error unless seq s is a row of the view: a message, not hidden, in a segment.
  local function check_row(v, s, what)
    what = what .. ' ' .. int(s)  -- exact: '..' would print 1e+14
    if s < 1 or s > last then
      return bad_edit(what .. ' is not in the log (last seq ' .. int(last) .. ')')
    end
    if is_hidden(HIDDEN, s) or not lookup(v, s) then
      return bad_edit(what .. ' is not in the view: an edit entry, or already ' ..
        'retracted or compacted away')
    end
    local entry = redis.call('XRANGE', KEYS[2], s, s)  -- "<s>-0" to "<s>-<max>"
    if not entry[1] then
      return bad_edit(what .. ' is missing from the stream (deleted by hand?)')
    end
    return nil
  end

  -- Whether row a comes before row b in the view (both in a segment).
  local function before(v, a, b)
    local pa, pb = lookup(v, a), lookup(v, b)
    return pa < pb or (pa == pb and a < b)
  end

  -- The rows from the view's start, or after row `after`, up to and including row `upto`.
  local function rows_through(v, upto, after)
    local first, cut_lo = v.front, nil
    if after then
      first, cut_lo = lookup(v, after), after + 1
    end
    local final = lookup(v, upto)
    return count_span(v, last, first, final, cut_lo, upto)
  end

  -- The segments after a compaction through `through` (nil: everything; 0: nothing) whose
  -- entry is seq c, followed by its k messages: those first, then what followed `through`.
  -- Only the ends of the view change: the segments compacted away at the front, the
  -- compaction's at the front, the open one at the back.
  local function compact_segments(v, through, c, k)
    if through == nil then
      for pos = v.front, v.back do
        seg_drop(v, pos)
      end
      v.front = v.back + 1  -- empty
    elseif through ~= 0 then
      local at = lookup(v, through)
      for pos = v.front, at - 1 do
        seg_drop(v, pos)
      end
      local seg = seg_at(v, at)
      v.front = at
      if seg[2] == nil or through < seg[2] then
        seg_set(v, at, through + 1, seg[2])
      else
        seg_drop(v, at)
        v.front = at + 1
      end
    end
    if v.front <= v.back then  -- the open run ends before this entry (or goes, if empty)
      local open = seg_at(v, v.back)
      if c - 1 >= open[1] then
        seg_set(v, v.back, open[1], c - 1)
      else
        seg_drop(v, v.back)
        v.back = v.back - 1
      end
    end
    if k > 0 then
      v.front = v.front - 1
      v.back = math.max(v.back, v.front)
      seg_set(v, v.front, c + 1, c + k)
    end
    local tail = v.front <= v.back and seg_at(v, v.back) or nil
    if tail and (tail[2] == c + k or (k == 0 and tail[2] == c - 1)) then
      seg_set(v, v.back, tail[1], nil)  -- nothing visible in between (the entry is hidden)
    else
      v.back = v.back + 1
      seg_set(v, v.back, c + k + 1, nil)
    end
  end

  -- A row leaves the view: the counts follow.
  local function remove_row(v, s)
    v.total = v.total - 1
    if v.archived and lookup(v, v.archived) and not before(v, v.archived, s) then
      v.archivedrows = v.archivedrows - 1
    end
  end

  local function plan_retract(v)
    local seqs, seen = {}, {}
    for text in string.gmatch(ARGV[11], '%d+') do
      local s = tonumber(text)
      if #seqs == MAX_RETRACT then
        return bad_edit('retract: more than ' .. MAX_RETRACT .. ' seqs in one call')
      end
      if seen[s] then
        return bad_edit('retract: seq ' .. int(s) .. ' is given twice')
      end
      local problem = check_row(v, s, 'retract: seq')
      if problem then
        return problem
      end
      seqs[#seqs + 1], seen[s] = s, true
    end
    for _, s in ipairs(seqs) do
      remove_row(v, s)
    end
    return {'{"op":"retract","seqs":[' .. ARGV[11] .. ']}', v, false, seqs}
  end

  local function plan_pop(v)
    local found = {}
    for pos = v.back, v.front, -1 do
      local lo, hi = seg_seqs(v, pos, last)
      if walk_down(KEYS[2], HIDDEN, lo, hi, 1, found) == 0 then
        break
      end
    end
    if not found[1] then
      return nil
    end
    local s = tonumber(string.match(found[1][1], '^(%d+)'))
    remove_row(v, s)
    return {'{"op":"retract","seqs":[' .. int(s) .. ']}', v, false, {s}, found[1]}
  end

  local function plan_archive(v)
    local w = tonumber(ARGV[11])
    local problem = check_row(v, w, 'archive: seq')
    if problem then
      return problem
    end
    local after = v.archived and lookup(v, v.archived) and v.archived
    if after and not before(v, after, w) then
      return bad_edit('archive: seq ' .. int(w) .. ' is not after the archive watermark (seq ' ..
        int(after) .. '): the watermark only moves forward')
    end
    v.archivedrows = (after and v.archivedrows or 0) + rows_through(v, w, after or nil)
    v.archived = w
    return {'{"op":"archive","through":' .. int(w) .. '}', v, false, {}}
  end

  -- compact, or fork: a compaction of everything on an empty log
  local function plan_compact(v)
    local through = nil
    if ARGV[11] ~= 'end' then
      through = tonumber(ARGV[11])
      if through ~= 0 then
        local problem = check_row(v, through, 'compact: seq')
        if problem then
          return problem
        end
      end
    end
    local removed = 0
    if through == nil then
      removed = v.total
    elseif through ~= 0 then
      removed = rows_through(v, through)
    end
    local watermark = v.archived and lookup(v, v.archived)
    if v.archived and (through == nil or (through ~= 0 and watermark and
        not before(v, through, v.archived))) then
      v.archived, v.archivedrows = nil, nil  -- the watermark row is replaced: none archived
    elseif watermark then  -- rows before the watermark replaced: their messages archived
      v.archivedrows = v.archivedrows - removed + n
    end
    v.total = v.total - removed  -- the rows up to this entry (its messages follow)
    compact_segments(v, through, last + 1, n)
    local marker = ARGV[12]  -- a fork's: built by the client
    if OP == 'compact' then
      local what = through and ('"through":' .. int(through) .. ',') or ''  -- none: everything
      marker = '{"op":"compact",' .. what .. '"count":' .. n .. '}'
    end
    return {marker, v, false, {}}
  end

  -- The edit to make: {marker, view state, false, seqs to hide, popped}; nil for a pop of
  -- an empty view; or an error reply.
  local function plan_edit()
    local v = open_view(VIEW, HIDDEN)
    if v.err then
      return v
    end
    ensure_counts(v, last)
    v.total = v.rows + last - v.version  -- the rows of the view now; saved as "rows"
    if OP == 'attrs' then
      return {ARGV[12], v, false, {}}  -- changes attributes only: the view stays
    elseif OP == 'retract' then
      return plan_retract(v)
    elseif OP == 'pop' then
      return plan_pop(v)
    elseif OP == 'archive' then
      return plan_archive(v)
    end
    return plan_compact(v)
  end

  return {plan = plan_edit, save = save_view, hide = hide, guarded = guarded}
end

local edit, part = nil, nil
if OP ~= '' then
  part = edit_part()
  edit = part.guarded(part.plan)
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
  redis.call('HSETNX', KEYS[3], ARGV[19 + 2 * i], ARGV[20 + 2 * i])
end
local new_last = last + written
if raw then
  redis.call('INCRBY', KEYS[1], written)
else
  redis.call('SET', KEYS[1], new_last)  -- a new counter, or one healed from the stream
end

if edit then
  local runs = edit[4]
  table.sort(runs)
  local i = 1
  while i <= #runs do  -- a run of consecutive seqs is hidden in one step
    local j = i
    while runs[j + 1] == runs[j] + 1 do
      j = j + 1
    end
    part.hide(HIDDEN, runs[i], runs[j])
    i = j + 1
  end
  part.hide(HIDDEN, last + 1, last + 1)  -- the edit entry itself is in no view
  part.save(edit[2], last + 1)
  local first_attr = 19 + 2 * BLOBS
  for i = first_attr, first_attr + 2 * ATTRS - 1, 2 do  -- attributes live in the view hash
    local change, name = string.sub(ARGV[i], 1, 1), 'a:' .. string.sub(ARGV[i], 2)
    if change == '+' then
      redis.call('HSET', VIEW, name, ARGV[i + 1])
    else
      redis.call('HDEL', VIEW, name)
    end
  end
elseif VIEW then
  -- A log with a lifetime names its view keys in every append (to refresh their expiry),
  -- so they must exist, or a cluster slot move would hold its appends up (TRYAGAIN). An
  -- edit-free view, and a hidden range no seq falls in, from its first append on.
  if redis.call('EXISTS', VIEW) == 0 then
    redis.call('HSET', VIEW, 'g1', '1-', 'front', 1, 'back', 1, 'rows', 0, 'version', 0)
  end
  if redis.call('EXISTS', HIDDEN) == 0 then
    redis.call('ZADD', HIDDEN, 0, '0-0', -1, '@1')
  end
end

if RECORD then
  redis.call('SET', RECORD, string.format('%d', new_last) .. ' ' .. at .. ' ' .. n .. ' ' ..
    ARGV[4] .. ' ' .. ARGV[7], 'PX', ARGV[3])
end
if ARGV[13] ~= '' then
  local now_ms = tonumber(time[1]) * 1000 + math.floor(tonumber(time[2]) / 1000)
  producer_record(producer_state, new_last, now_ms)
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
