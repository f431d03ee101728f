#!lua
-- append.lua: append one or more encoded messages to a conversation, atomically.
--
-- The shebang declares no flags on purpose: that makes this a write script, which a
-- server over `maxmemory` (noeviction) rejects BEFORE it runs, so an OOM never leaves
-- a half-written batch behind. (Servers that cannot parse the shebang get this file
-- with the first line blanked out; see _scripts.py.)
--
-- Arguments, by name: redis_msglog/_append_script.py sends them from one list of names
-- (KEY_NAMES, ARGV_NAMES), and the binding block below gives each a local of that name
-- (keys in capitals); a test checks the three agree. Nothing else reads KEYS or ARGV by
-- number.
--
-- KEYS[1]   SEQ: the seq counter, a string holding the last assigned seq (absent = 0)
-- KEYS[2]   STREAM: one entry per message, entry ID "<seq>-<at>" (at: the commit time in
--           microseconds since the Unix epoch), one field: "msg" (an edit entry: "edit").
--           Entries written by earlier versions have ID "<seq>-0" and fields "at" (the
--           commit time) and "msg" or "edit"; they are read as before, and appends
--           continue after them (seq grows, so IDs still grow).
-- KEYS[3]   BLOBS: a hash of large binaries stored off the rows, field = SHA-256 (hex);
--           touched only when the batch stores blobs, refers to stored ones (blob_refs),
--           trims, or ttl_ms sets a lifetime, and otherwise STREAM again (see "Slot
--           moves"). Field "^<sha256>" beside each digest: the last seq of the latest
--           call that stored or referred to it (no entry after it refers to it), so a trim
--           through that seq removes the bytes in one step (docs/lifecycle.md); field
--           "_<sha256>": the first seq of the call that stored it (no entry before it
--           refers to it), so a redact can tell whether another entry uses it
-- KEYS[4]   PRODUCERS: a hash, field = a producer id, value = its recent results (see
--           producer_lib.lua); STREAM again when producer is ""
-- KEYS[5]   VIEW: the view hash (see view_lib.lua), only for an edit (op not "") or a
--           conversation with a lifetime (ttl_ms not "")
-- KEYS[6]   HIDDEN: the hidden ranges (see view_lib.lua), with VIEW
-- KEYS[7]   RECORD: the optional idempotency record,
--           "<last_seq> <at> <count> <fingerprint> <call>"; KEYS[5] when VIEW and HIDDEN
--           are left out. (Plain appends leave them out: a key that does not exist would
--           stall the call during a cluster slot move.)
-- KEYS[8]   RECORDS: with RECORD, the sorted set naming the conversation's records (score:
--           when each expires, ms), so that an erasure finds them without SCAN; a write
--           of RECORD adds it and drops up to PRUNE_RECORDS expired members
--           A call with neither VIEW nor RECORD sends no placeholder (each key costs
--           the server time): 3 keys are SEQ, STREAM and PRODUCERS (BLOBS is STREAM),
--           2 keys SEQ and STREAM (BLOBS and PRODUCERS are STREAM).
-- ARGV[1]   publish: the publish command, "PUBLISH", "SPUBLISH" (cluster) or "" for no
--           event
-- ARGV[2]   channel: the channel of the post-commit event
-- ARGV[3]   record_ttl_ms: how long the exactly-once record lives, in milliseconds: the
--           idempotency record, or (with a producer) the producer's results after its
--           last write
-- ARGV[4]   look_up: "1": look the record up first (the idempotency record, or this pseq
--           among the producer's results); "0": skip that (the first try of a producer's
--           call: nothing can have committed it yet)
-- ARGV[5]   call: a token naming this call (every try of one call sends the same token),
--           kept in the record so a replay can tell its own commit from another's (""
--           is a token too: a producer's own calls use it)
-- ARGV[6]   producer: the producer id (12 hex digits) of the process making the call
--           (shared by its log objects), or "" for none (a caller's key, or retries off)
-- ARGV[7]   pseq: the producer's call number of this call, the same on every try
-- ARGV[8]   floor: the lowest pseq of the producer's calls still in flight (none below it
--           will be re-sent, so their results can go), or "" if the caller cannot tell
-- ARGV[9]   rest: "1": the named arguments below follow; "" (most calls): none does,
--           each takes its default ("", a count 0) and the tail follows at once (each
--           argument costs the server time to read and to hand over to the script)
-- ARGV[10]  fingerprint: of the batch (ignored without an idempotency record)
-- ARGV[11]  ttl_ms: the conversation's lifetime in milliseconds, refreshed on every key
--           it owns by each append ("" for none: keys live until deleted)
-- ARGV[12]  blob_count: B, the number of blobs this batch stores (0 for most appends)
-- ARGV[13]  expected_seq: the seq the log must end at for this append to commit (a
--           compare-and-set: "" for none); otherwise MSGLOG_CONFLICT and nothing is
--           written
-- ARGV[14]  op: the edit this call makes (docs/edits.md), written as one entry before the
--           messages: "" (none: a plain append), "retract", "pop", "compact", "archive",
--           "fork", "attrs" (attributes changed, the view untouched), "trim" (the
--           entries up to op_arg removed from the stream, docs/lifecycle.md) or "redact"
--           (one message removed from the stream, its replacement kept in VIEW)
-- ARGV[15]  op_arg: the edit's argument: retract: the seqs ("7,9"); compact: the seq it
--           compacts through ("end": everything); archive: the watermark seq; trim:
--           the seq it trims through; redact: "<seq> <replacement row JSON>" (no JSON:
--           a marker); else ""
-- ARGV[16]  entry: fork, attrs and redact only, the entry's JSON (a fork is a compaction
--           of an empty log)
-- ARGV[17]  attr_count: A, the number of conversation attributes this call changes (0
--           for most)
-- ARGV[18]  attrs_json: those changes as JSON ({"name":"value","gone":null}; "" when A is
--           0), added to the call's edit entry as "attrs" (docs/edits.md, "Attributes")
-- ARGV[19]  blob_refs: the blob references of this call's messages to bytes it does not
--           bring ("<message>.<part>:<sha256>" separated by spaces, indexes from 0; ""
--           for none, most calls): each must be a field of BLOBS, which is then named, or
--           MSGLOG_BADBLOB and nothing is written (a reading worker could not hydrate it)
-- ARGV[20]  max_age_us: retention by age (docs/lifecycle.md), in microseconds: a plain
--           append (op "") trims the entries committed longer ago than that from the
--           head, at most MAX_AGE_STEP of them, with a trim entry as its edit; "" for none
--           (then one string compare is all it costs). Needs VIEW, HIDDEN and BLOBS.
-- ARGV[21]  scope: "" (a log made without a scope: no check), or the scope of the log
--           making the call (parts joined by "/"): then the conversation's owner record,
--           the last key (OWNER, after every key above), must name it, or nothing is
--           written: MSGLOG_UNOWNED when there is none (the conversation was erased and
--           its id is free again: the client registers it again, then re-sends once),
--           MSGLOG_SCOPE <recorded> when it names another
-- ARGV[22]  rewrite: "<max_rewrite_bytes> <stream_node_entries>": the bytes a trim or a
--           redact may rewrite, and the entries a stream node holds at most (edit_lib.lua;
--           "": 8 MiB and 100)
-- ARGV[23]  usage: "" (most calls: no totals touched), or what this call adds to the
--           conversation's usage totals, "<input> <output> <cached> <reasoning> <cost>
--           <currency>" (cost in billionths of a unit, currency "" with no cost): then
--           the totals hash USAGE (fields input, output, cached, reasoning, cost,
--           currency; docs/usage.md) comes after every key above and before OWNER. A
--           cost in another currency than the totals' is refused (MSGLOG_CURRENCY
--           <theirs>), and so is a sum past 2^53 - 1 (MSGLOG_USAGEBIG): nothing written
-- ARGV[24..] the tail (ARGV[10..] when rest is ""): B pairs of a blob's SHA-256 (hex)
--           and its bytes, then A pairs of an attribute change ("+name" to set, "-name"
--           to delete) and its value, then the encoded messages (JSON), in order; at
--           least one unless this is an edit
--
-- Returns "<last_seq> <at> 0 <call>" for a call that wrote and popped nothing (most), else
-- {last_seq, at, replayed, call, popped}: the seq of the last entry written, the
-- commit time in microseconds since the Unix epoch (a string) read once from the server's
-- clock, 1 when the record or the producer already held this call (nothing written; the
-- first call's result), the token of the call that wrote it ("" for a record written
-- before tokens existed, or by a producer's own call), and for a pop the popped entry
-- ({id, fields}; 0 when the view was empty: nothing written). MSGLOG_STALE (nothing
-- written): the producer no longer holds this pseq's result, so whether it committed
-- cannot be told. MSGLOG_ERASED (nothing written): the conversation was erased and its
-- tombstone (the counter holding "erased", see erase.lua) still stands.
--
-- Nothing is written unless everything can be: the counter is checked to be exactly what
-- INCRBY accepts and to end where the stream ends, then the first XADD (which can still
-- fail on a wrong type) runs before any other change. Later XADDs use larger IDs, and
-- INCRBY, SET, HSET, HSETNX and PEXPIRE cannot fail on keys already checked.
--
-- Slot moves: while a Redis Cluster slot migrates, a multi-key command runs only on a
-- node holding every key it names (else TRYAGAIN until the move ends), so an append
-- names only keys that exist once the conversation does: BLOBS only when it is used,
-- the producers hash, and no per-append key (a record only with a caller's key).

-- == Binding block: every KEYS and ARGV position, bound once to its name ==
local publish = ARGV[1]
local channel = ARGV[2]
local record_ttl_ms = ARGV[3]
local look_up = ARGV[4]
local call = ARGV[5]
local producer = ARGV[6]
local pseq = ARGV[7]
local floor = ARGV[8]
local rest = ARGV[9]
local NAMED = 23  -- the named arguments above: the tail follows them (9 when rest is "")
local fingerprint, ttl_ms, blob_count, expected_seq, op, op_arg = '', '', '0', '', '', ''
local entry, attr_count, attrs_json, blob_refs, max_age_us, scope = '', '0', '', '', '', ''
local rewrite, usage = '', ''
if rest ~= '' then
  fingerprint = ARGV[10]
  ttl_ms = ARGV[11]
  blob_count = ARGV[12]
  expected_seq = ARGV[13]
  op = ARGV[14]
  op_arg = ARGV[15]
  entry = ARGV[16]
  attr_count = ARGV[17]
  attrs_json = ARGV[18]
  blob_refs = ARGV[19]
  max_age_us = ARGV[20]
  scope = ARGV[21]
  rewrite = ARGV[22]
  usage = ARGV[23]
else
  NAMED = 9
end
local SEQ = KEYS[1]
local STREAM = KEYS[2]
local OWNER, key_count = nil, #KEYS  -- a scoped log's call: its owner record comes last
if scope ~= '' then
  OWNER, key_count = KEYS[key_count], key_count - 1
end
local USAGE = nil  -- a call adding usage: the totals come next to last
if usage ~= '' then
  USAGE, key_count = KEYS[key_count], key_count - 1
end
local BLOBS, PRODUCERS = STREAM, STREAM  -- 2 keys: neither (NO_RETRY's plain append)
if key_count == 3 then  -- 3 keys: the producers, no blobs (a plain append)
  PRODUCERS = KEYS[3]
elseif key_count > 3 then
  BLOBS = KEYS[3]
  PRODUCERS = KEYS[4]
end
local VIEW, HIDDEN, RECORD, RECORDS = nil, nil, nil, nil
if op == '' and ttl_ms == '' and max_age_us == '' then
  if key_count > 4 then  -- a record and its set
    RECORD, RECORDS = KEYS[5], KEYS[6]
  end
else  -- the view keys, then (if sent) the record
  VIEW, HIDDEN = KEYS[5], KEYS[6]
  if key_count > 6 then
    RECORD, RECORDS = KEYS[7], KEYS[8]
  end
end
-- == End of the binding block ==


-- The tail, by its named base indexes: blob_count pairs from blobs_from, attr_count pairs
-- from attrs_from, then the n messages from messages_from.
local blobs_from = NAMED + 1
local attrs_from, messages_from = blobs_from, blobs_from
if blob_count == '0' and attr_count == '0' then  -- most calls: no string to convert
  blob_count, attr_count = 0, 0
else
  blob_count, attr_count = tonumber(blob_count), tonumber(attr_count)
  attrs_from = blobs_from + 2 * blob_count
  messages_from = attrs_from + 2 * attr_count
end
local n = #ARGV - messages_from + 1

-- The counter is read first: an erased conversation's tombstone (counter_lib.lua) refuses
-- every call before anything else is looked at, a replay of a record or a producer's
-- result included (lua/erase.lua deletes those, but one written just before it may not be
-- gone yet).
local raw = redis.pcall('GET', SEQ)
if raw == 'erased' then
  return redis.error_reply('MSGLOG_ERASED ' .. SEQ .. ': the conversation was erased')
end
local checked = true  -- the counter read, and not the tombstone (owner_check.lua, ...)
-- @include owner_check.lua

-- @include record_lookup.lua

-- The idempotent producer: exactly-once without a caller's key.
-- @include producer_lib.lua

-- The event is published after the writes, and Redis checks a script's channels only when
-- it publishes (its keys it checks before running it): refuse a user who may not publish
-- here, before anything is written, rather than commit and then fail (Redis 7+).
if publish ~= '' and redis.acl_check_cmd and not redis.acl_check_cmd(publish, channel, '') then
  return redis.error_reply('NOPERM this user has no permissions to publish the append ' ..
    'event on channel ' .. channel)
end

-- @include commit_time.lua

-- The counter and the stream's end (the counter is read above: `checked`).
local last = 0
-- @include counter_checked.lua

-- A log with a lifetime refreshes (and creates) its view keys, blobs and usage totals:
-- each key's TYPE, read here, also says whether it must be made below (`none`), so no
-- EXISTS runs for it again.
local view_kind, hidden_kind, blobs_kind, usage_kind = nil, nil, nil, nil
if VIEW and op == '' then
  view_kind = redis.call('TYPE', VIEW)['ok']
  if view_kind ~= 'none' and view_kind ~= 'hash' then
    return redis.error_reply('WRONGTYPE view ' .. VIEW .. ' is not a hash')
  end
  hidden_kind = redis.call('TYPE', HIDDEN)['ok']
  if hidden_kind ~= 'none' and hidden_kind ~= 'zset' then
    return redis.error_reply('WRONGTYPE hidden ranges ' .. HIDDEN .. ' is not a sorted set')
  end
end
if blob_count > 0 or ttl_ms ~= '' or blob_refs ~= '' then
  blobs_kind = redis.call('TYPE', BLOBS)['ok']
  if blobs_kind ~= 'none' and blobs_kind ~= 'hash' then
    return redis.error_reply('WRONGTYPE blobs ' .. BLOBS .. ' is not a hash')
  end
end
-- A reference is written only if this conversation holds its bytes: otherwise every
-- hydrating read of every worker would fail on it. (Most calls have none.)
if blob_refs ~= '' then
  for message, part, digest in string.gmatch(blob_refs, '(%d+)%.(%d+):(%x+)') do
    if redis.call('HEXISTS', BLOBS, digest) == 0 then
      return redis.error_reply('MSGLOG_BADBLOB ' .. message .. ' ' .. part .. ' ' .. digest)
    end
  end
end


if expected_seq ~= '' and last ~= tonumber(expected_seq) then
  return redis.error_reply('MSGLOG_CONFLICT ' .. string.format('%d', last) ..
    ' is the last seq of ' .. STREAM .. ', not ' .. expected_seq)
end

-- The usage totals this call adds to (docs/usage.md), checked before the first write: the
-- sums are made here and written after the entries. (A zero delta, a log with a lifetime
-- naming its totals: only made to exist, for their expiry.)
local totals = nil
if USAGE then
  local added = {string.match(usage, '^(%d+) (%d+) (%d+) (%d+) (%d+) (%u*)$')}
  if not added[1] then
    return redis.error_reply('ERR usage must be "<input> <output> <cached> <reasoning> ' ..
      '<cost> <currency>", got ' .. usage)
  end
  if usage ~= '0 0 0 0 0 ' then
    local held = redis.pcall('HMGET', USAGE, 'input', 'output', 'cached', 'reasoning', 'cost',
      'currency')
    if held.err then
      return redis.error_reply('WRONGTYPE usage totals ' .. USAGE .. ' is not a hash')
    end
    if added[6] ~= '' and held[6] and held[6] ~= '' and held[6] ~= added[6] then
      return redis.error_reply('MSGLOG_CURRENCY ' .. held[6])
    end
    totals = {}
    for i = 1, 5 do
      local sum = tonumber(held[i] or '0')
      if not sum then
        return redis.error_reply('MSGLOG_BADUSAGE usage totals ' .. USAGE .. ' hold ' ..
          held[i] .. ' as ' .. ({'input', 'output', 'cached', 'reasoning', 'cost'})[i])
      end
      sum = sum + tonumber(added[i])
      if sum > 9007199254740991 then  -- 2^53 - 1: past it, a number here is not exact
        return redis.error_reply('MSGLOG_USAGEBIG ' .. USAGE)
      end
      totals[i] = string.format('%.0f', sum)
    end
    totals[6] = added[6] ~= '' and added[6] or held[6] or ''
  else
    usage_kind = redis.call('TYPE', USAGE)['ok']
    if usage_kind ~= 'none' and usage_kind ~= 'hash' then
      return redis.error_reply('WRONGTYPE usage totals ' .. USAGE .. ' is not a hash')
    end
  end
end

-- Retention by age: a plain append trims the entries older than max_age_us from the head
-- (through the last message among them), at most MAX_AGE_STEP a call: one step per append,
-- so the call stays short; a log that ages faster catches up over its next appends.
local by_age = false  -- whether this call's trim is max_age's (edit_lib.lua: never refused)
if max_age_us ~= '' and op == '' then
  local MAX_AGE_STEP = 100
  local cutoff = tonumber(at) - tonumber(max_age_us)
  local function committed(e)  -- an entry's commit time: in its ID, or (older) its field
    local t = tonumber(string.match(e[1], '^%d+%-(%d+)$') or '')
    if t == 0 then
      for i = 1, #e[2] - 1, 2 do
        if e[2][i] == 'at' then
          t = tonumber(e[2][i + 1])
        end
      end
    end
    return t
  end
  local oldest = redis.call('XRANGE', STREAM, '-', '+', 'COUNT', 1)
  local t = oldest[1] and committed(oldest[1])
  if t and t < cutoff then  -- something is due: read one step of the head
    local aged = nil
    for _, e in ipairs(redis.call('XRANGE', STREAM, '-', '+', 'COUNT', MAX_AGE_STEP)) do
      local when = committed(e)
      if not when or when >= cutoff then
        break
      end
      for i = 1, #e[2] - 1, 2 do
        if e[2][i] == 'msg' then
          aged = string.match(e[1], '^(%d+)')
        end
      end
    end
    if aged then
      op, op_arg, by_age = 'trim', aged, true  -- this call's edit: a trim entry first
    end
  end
end

-- Edits (docs/edits.md): everything is checked before the first write.
-- (Included inside the block: a call that does not edit makes none of their closures.)
local edit, part, redact_part = nil, nil, nil
if op ~= '' then
-- @include edit_lib.lua
-- @include redact_lib.lua
  redact_part = redact_lib_part
  part = edit_part()
  edit = part.guarded(part.plan)
  if edit == nil then
    return {last, at, 0, call, 0}  -- a pop of an empty view: nothing to do
  end
  if edit.err then
    return edit
  end
  if attr_count > 0 and op ~= 'attrs' and op ~= 'fork' then  -- theirs already carry them
    edit[1] = string.sub(edit[1], 1, -2) .. ',"attrs":' .. attrs_json .. '}'
  end
end

-- The first entry (the edit's, else the first message) is added alone: it is the one
-- that can still fail. The messages follow without a table per message (a batch of 100
-- is 100 XADDs).
local first_field, first_value, next_arg = 'msg', ARGV[messages_from], messages_from + 1
if edit then
  first_field, first_value, next_arg = 'edit', edit[1], messages_from
end
local written = n + (edit and 1 or 0)
local new_last = last + written

-- Entry ID "<seq>-<at>": the commit time is kept in the ID, not in a field of its own.
-- (Each seq is formatted once: a number turned into text costs a sprintf.)
local first_text = string.format('%d', last + 1)
local new_last_text = written == 1 and first_text or string.format('%d', new_last)
-- The producer's result first: its HSET is what fails on a producers key of another type.
-- @include producer_save.lua
if producer_refused then
  return producer_refused
end
local added = redis.pcall('XADD', STREAM, first_text .. '-' .. at,
  first_field, first_value)
if type(added) == 'table' and added.err then
-- @include producer_undo.lua
  local err = tostring(added.err)  -- fakeredis hands over a userdata, not a string
  if string.find(err, 'equal or smaller', 1, true) then
    -- XLEN matched the counter, but an entry beyond it exists (one foreign entry with a
    -- deleted one below it, say).
    return redis.error_reply('MSGLOG_BEHIND seq counter ' .. SEQ .. ' (' .. last ..
      ') is behind the last entry of stream ' .. STREAM)
  end
  return redis.error_reply(err)
end
for i = next_arg, #ARGV do
  redis.call('XADD', STREAM, string.format('%d-', last + 2 + i - next_arg) .. at, 'msg',
    ARGV[i])
end
for i = 0, blob_count - 1 do  -- content-addressed: the same bytes are stored once
  local digest = ARGV[blobs_from + 2 * i]
  if redis.call('HSETNX', BLOBS, digest, ARGV[blobs_from + 2 * i + 1]) == 1 then
    redis.call('HSET', BLOBS, '_' .. digest, last + 1)  -- no entry before it refers to it
  end
  redis.call('HSET', BLOBS, '^' .. digest, new_last)  -- its last user
end
if blob_refs ~= '' then
  for digest in string.gmatch(blob_refs, '%d+%.%d+:(%x+)') do
    redis.call('HSET', BLOBS, '^' .. digest, new_last)
  end
end
if raw then
  redis.call('INCRBY', SEQ, written)
else
  redis.call('SET', SEQ, new_last)  -- a new counter, or one healed from the stream
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
  if edit[6] then  -- a trim: its entries leave the stream, and the blobs only they used
    local first, through = edit[6][1], edit[6][2]
    part.hide(HIDDEN, first, through)  -- in no view: the view reads never look for them
    if redis.call('EXISTS', BLOBS) == 1 then
      local seen = {}
      for _, gone in ipairs(redis.call('XRANGE', STREAM, first, through)) do
        for _, value in ipairs(gone[2]) do
          for digest in string.gmatch(value, '"blob":"(%x+)"') do
            if not seen[digest] then
              seen[digest] = true
              local user = tonumber(redis.call('HGET', BLOBS, '^' .. digest) or '')
              if user and user <= through then  -- no later entry refers to it
                redis.call('HDEL', BLOBS, digest, '^' .. digest, '_' .. digest)
              end
            end
          end
        end
      end
    end
    -- "<through + 1>" is "<through + 1>-0": every entry of a seq up to `through` goes.
    redis.call('XTRIM', STREAM, 'MINID', string.format('%d', through + 1))
    redis.call('HSET', VIEW, 'first', string.format('%d', through + 1))
    redact_part().trimmed(first, through)  -- and the redacted rows among them
    if edit[6][3] then  -- and the trimmed bytes left in the node of `through`
      redact_part().rewrite(edit[6][3][1], edit[6][3][2])
    end
  end
  if edit[7] then  -- a redact: the entry leaves the stream, its replacement takes its place
    redact_part().redact(edit[7])
  end
    for i = attrs_from, attrs_from + 2 * attr_count - 1, 2 do  -- attributes live in the view hash
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
  if view_kind == 'none' then
    redis.call('HSET', VIEW, 'g1', '1-', 'front', 1, 'back', 1, 'rows', 0, 'version', 0)
  end
  if hidden_kind == 'none' then
    redis.call('ZADD', HIDDEN, 0, '0-0', -1, '@1')
  end
end

if totals then
  redis.call('HSET', USAGE, 'input', totals[1], 'output', totals[2], 'cached', totals[3],
    'reasoning', totals[4], 'cost', totals[5], 'currency', totals[6] or '')
elseif USAGE then
  if usage_kind == 'none' then
    redis.call('HSETNX', USAGE, 'input', 0)  -- a lifetime's placeholder (see above)
  end
end

-- @include record_save.lua
if RECORD and ttl_ms ~= '' then
  redis.call('PEXPIRE', RECORDS, ttl_ms)  -- outlives every record it names (window <= ttl)
end
-- @include producer_prune.lua
if ttl_ms ~= '' then
  -- (A hash before a call that edits nothing still is one: such a call only adds
  -- fields. An edit may delete its last field.)
  if (blobs_kind ~= 'hash' or edit) and redis.call('EXISTS', BLOBS) == 0 then
    -- Named by every append of a log with a lifetime, so it must exist (see the view
    -- keys above): a placeholder field, never a digest.
    redis.call('HSET', BLOBS, '-', '')
  end
  redis.call('PEXPIRE', SEQ, ttl_ms)
  redis.call('PEXPIRE', STREAM, ttl_ms)
  redis.call('PEXPIRE', BLOBS, ttl_ms)  -- blobs live exactly as long as their rows
  redis.call('PEXPIRE', PRODUCERS, ttl_ms)
  redis.call('PEXPIRE', VIEW, ttl_ms)  -- the view lives as long as the entries
  redis.call('PEXPIRE', HIDDEN, ttl_ms)
  if USAGE then
    redis.call('PEXPIRE', USAGE, ttl_ms)
  end
end

if publish ~= '' then
  -- (One message, most calls: no table.concat; one concatenation, no payload in parts.)
  local messages = n == 1 and ARGV[messages_from] or table.concat(ARGV, ',', messages_from)
  local edited = edit and ',"edit":' .. edit[1] or ''
  redis.call(publish, channel, '{"first":' .. first_text .. ',"last":' .. new_last_text ..
    ',"at":' .. at .. edited .. ',"messages":[' .. messages .. ']}')
end

if edit and edit[5] then
  return {new_last, at, 0, call, edit[5]}  -- a pop: the popped entry
end
-- Most replies: one string, which the server turns into a reply far more cheaply than
-- a table (redis_msglog/_append_script.py reads both).
return new_last_text .. ' ' .. at .. ' 0 ' .. call
