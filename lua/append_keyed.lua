#!lua
-- append_keyed.lua: append one or more encoded messages to a conversation, atomically,
-- exactly once under a caller's idempotency key, or only if the log ends at
-- `expected_seq` (a compare-and-set), or both: the plain append (append_plain.lua) with
-- those two checks. Everything else (an edit, blobs, a lifetime, retention by age,
-- usage) is append.lua's; a log object picks the script from what the call carries
-- (redis_msglog/_lua/contract.py), so this one tests none of them. The keys, entries and
-- records it writes are append.lua's (see its header); so are its refusals.
--
-- The shebang declares no flags on purpose: a write script, which a server over
-- `maxmemory` (noeviction) rejects before it runs.
--
-- Arguments, by name: redis_msglog/_lua/contract.py sends them from one list of names
-- (KEYED_KEY_NAMES, KEYED_ARGV_NAMES), and the binding block below gives each a local of
-- that name (keys in capitals); a test checks the three agree.
--
-- KEYS[1]   SEQ: the seq counter
-- KEYS[2]   STREAM: the conversation's entries
-- KEYS[3]   PRODUCERS: the producers hash (producer_lib.lua), only with a producer
-- KEYS[3]   RECORD: the caller's idempotency record, "<last_seq> <at> <count>
--           <fingerprint> <call>", only with a record (fingerprint not "")
-- KEYS[4]   RECORDS: with RECORD, the sorted set naming the conversation's records
--           (append.lua)
-- KEYS[last] OWNER: a scoped log's call only: the conversation's owner record, which
--           must name `scope` (MSGLOG_UNOWNED, MSGLOG_SCOPE: see append.lua)
-- ARGV[1]   publish: "PUBLISH", "SPUBLISH" (cluster) or "" for no event
-- ARGV[2]   channel: the channel of the post-commit event
-- ARGV[3]   record_ttl_ms: how long the record (or the producer's results) lives
-- ARGV[4]   look_up: "1": look the record up first (a caller's key: every try), or this
--           pseq among the producer's results (a retry); "0": the first try of a
--           producer's call (nothing can have committed it)
-- ARGV[5]   call: the call's token, kept in the record ("" for a producer's own calls)
-- ARGV[6]   producer: the producer id (a key handed out by AppendInDoubtError, or the
--           process's own with expected_seq alone), or "" for none
-- ARGV[7]   pseq: the producer's call number of this call, the same on every try
-- ARGV[8]   floor: the lowest pseq of the producer still in flight ("": cannot tell)
-- ARGV[9]   scope: "" (a log made without a scope), or the log's scope
-- ARGV[10]  fingerprint: of the batch, with a record only ("": no record)
-- ARGV[11]  expected_seq: the seq the log must end at for this append to commit ("": no
--           condition), otherwise MSGLOG_CONFLICT and nothing is written
-- ARGV[12..] the encoded messages (JSON), in order: at least one
--
-- Returns "<last_seq> <at> 0 <call>", or a replay {last_seq, at, 1, call} (append.lua).
--
-- Like append_plain.lua, a call that need not read the counter first (not a producer's
-- retry) takes it with INCRBY, and the checks ride on the commands it runs: XLEN is the
-- last seq of a healthy log, so the condition is checked against it before the INCRBY;
-- the INCRBY refuses a tombstone and every counter that is not a canonical integer, and
-- its old value must be the XLEN. When one of them fails, the INCRBY (if it ran) is
-- undone and the checked path gives append.lua's verdict: the counter read with GET, the
-- stream's end, then the condition.

-- == Binding block: every KEYS and ARGV position, bound once to its name ==
local publish = ARGV[1]
local channel = ARGV[2]
local record_ttl_ms = ARGV[3]
local look_up = ARGV[4]
local call = ARGV[5]
local producer = ARGV[6]
local pseq = ARGV[7]
local floor = ARGV[8]
local scope = ARGV[9]
local fingerprint = ARGV[10]
local expected_seq = ARGV[11]
local NAMED = 11  -- the named arguments above: the messages follow them
local SEQ = KEYS[1]
local STREAM = KEYS[2]
local PRODUCERS, RECORD, RECORDS = STREAM, nil, nil  -- (unused ones: the stream, nil)
if producer ~= '' then
  PRODUCERS = KEYS[3]
elseif fingerprint ~= '' then
  RECORD = KEYS[3]
  RECORDS = KEYS[4]
end
local OWNER = nil
if scope ~= '' then
  OWNER = KEYS[#KEYS]
end
-- == End of the binding block ==

local n = #ARGV - NAMED

-- A producer's retry reads the counter first: an erasure's tombstone refuses even a
-- replay. (A record's replay reads it below, only when there is one to replay.)
local raw = nil
local checked = producer ~= '' and look_up == '1'  -- the counter read, not taken
if checked then
  raw = redis.pcall('GET', SEQ)
  if raw == 'erased' then
    return redis.error_reply('MSGLOG_ERASED ' .. SEQ .. ': the conversation was erased')
  end
end
-- @include owner_check.lua

-- @include record_lookup.lua

-- @include producer_lib.lua

-- Refused before anything is written (see append.lua).
if publish ~= '' and redis.acl_check_cmd and not redis.acl_check_cmd(publish, channel, '') then
  return redis.error_reply('NOPERM this user has no permissions to publish the append ' ..
    'event on channel ' .. channel)
end

-- The stream's length first: on a healthy log it is the last seq, so a condition it
-- does not meet goes to the checked path, which refuses it without writing (a conflict,
-- the common refusal of a compare-and-set, then takes no INCRBY to undo: nothing reaches
-- the replicas, the AOF or a keyspace notification).
local last, counted = 0, false  -- counted: the INCRBY ran, and the log is healthy
if not checked then
  local length = redis.pcall('XLEN', STREAM)
  if expected_seq == '' or length == tonumber(expected_seq) then
    local counter = redis.pcall('INCRBY', SEQ, n)
    if type(counter) == 'number' then
      last = counter - n
      counted = true
      if last ~= length or last > 999999999999999 then  -- (an error table is no number)
-- @include counter_undo.lua
      end
    end
  end
end
if not counted then  -- the checked path: append.lua's verdicts
-- @include counter_checked.lua
  if expected_seq ~= '' and last ~= tonumber(expected_seq) then
    return redis.error_reply('MSGLOG_CONFLICT ' .. string.format('%d', last) ..
      ' is the last seq of ' .. STREAM .. ', not ' .. expected_seq)
  end
end

-- @include commit_time.lua

-- The first entry is added alone: it is the one that can still fail (an entry beyond the
-- counter). Before it, the producer's result, which fails on a producers key of another
-- type (producer_save.lua).
local first_text = string.format('%d', last + 1)
local written, new_last = n, last + n
local new_last_text = n == 1 and first_text or string.format('%d', new_last)
-- @include producer_save.lua
-- @include entries_add.lua

-- @include record_save.lua
-- @include producer_prune.lua

if publish ~= '' then
  local messages = n == 1 and ARGV[NAMED + 1] or table.concat(ARGV, ',', NAMED + 1)
  redis.call(publish, channel, '{"first":' .. first_text .. ',"last":' .. new_last_text ..
    ',"at":' .. at .. ',"messages":[' .. messages .. ']}')
end
return new_last_text .. ' ' .. at .. ' 0 ' .. call
