#!lua
-- append_plain.lua: append one or more encoded messages to a conversation, atomically:
-- the plain append, the call nearly every append makes. Everything else (a caller's
-- idempotency key, expected_seq, an edit, blobs, a lifetime, retention by age, usage)
-- is append.lua's; a log object picks the script from options fixed when it is made and
-- from what the call carries (redis_msglog/_lua/contract.py), so this one tests none of
-- them. The keys and entries it writes are append.lua's (see its header).
--
-- The shebang declares no flags on purpose: a write script, which a server over
-- `maxmemory` (noeviction) rejects before it runs.
--
-- Arguments, by name: redis_msglog/_lua/contract.py sends them from one list of names
-- (PLAIN_KEY_NAMES, PLAIN_ARGV_NAMES), and the binding block below gives each a local of
-- that name (keys in capitals); a test checks the three agree.
--
-- KEYS[1]   SEQ: the seq counter
-- KEYS[2]   STREAM: the conversation's entries
-- KEYS[3]   PRODUCERS: the producers hash (producer_lib.lua), only with a producer
-- KEYS[last] OWNER: a scoped log's call only: the conversation's owner record, which
--           must name `scope` (MSGLOG_UNOWNED, MSGLOG_SCOPE: see append.lua)
-- ARGV[1]   publish: "PUBLISH", "SPUBLISH" (cluster) or "" for no event
-- ARGV[2]   channel: the channel of the post-commit event
-- ARGV[3]   record_ttl_ms: how long the producer's results live after its last write
-- ARGV[4]   look_up: "1": a retry, which looks its call up among the producer's results
--           first; "0": the first try (nothing can have committed it)
-- ARGV[5]   call: the call's token ("" for a producer's own calls)
-- ARGV[6]   producer: the producer id, or "" for none (NO_RETRY)
-- ARGV[7]   pseq: the producer's call number of this call, the same on every try
-- ARGV[8]   floor: the lowest pseq of the producer still in flight ("": cannot tell)
-- ARGV[9]   scope: "" (a log made without a scope), or the log's scope
-- ARGV[10..] the encoded messages (JSON), in order: at least one
--
-- Returns "<last_seq> <at> 0 <call>", or a replay {last_seq, at, 1, call} (append.lua).
--
-- The first try runs the design's floor and no more: INCRBY, XLEN, TIME, XADD, the
-- producer's HSET, PUBLISH. The checks ride on them: INCRBY refuses an erasure's
-- tombstone, a counter of another type and every counter that is not a canonical integer
-- (what counter_lib.lua refuses); XLEN equal to the counter is the healthy log (one entry
-- a seq, see stream_end_lib.lua); the explicit-ID XADD refuses a stream that is ahead.
-- When one of them says the log is not healthy, the INCRBY is undone and the checked path
-- runs: the counter read with GET, as append.lua reads it, and the same verdicts.

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
local NAMED = 9  -- the named arguments above: the messages follow them
local SEQ = KEYS[1]
local STREAM = KEYS[2]
local PRODUCERS = STREAM  -- (no producer: unused)
if producer ~= '' then
  PRODUCERS = KEYS[3]
end
local OWNER = nil
if scope ~= '' then
  OWNER = KEYS[#KEYS]
end
-- == End of the binding block ==

local n = #ARGV - NAMED

-- A retry reads the counter first: an erasure's tombstone refuses even a replay.
local raw = nil
local checked = look_up == '1'  -- the counter read, not taken
if checked then
  raw = redis.pcall('GET', SEQ)
  if raw == 'erased' then
    return redis.error_reply('MSGLOG_ERASED ' .. SEQ .. ': the conversation was erased')
  end
end
-- @include owner_check.lua

-- @include producer_lib.lua

-- Refused before anything is written (see append.lua).
if publish ~= '' and redis.acl_check_cmd and not redis.acl_check_cmd(publish, channel, '') then
  return redis.error_reply('NOPERM this user has no permissions to publish the append ' ..
    'event on channel ' .. channel)
end

local last, counted = 0, false  -- counted: the INCRBY ran, and the log is healthy
if not checked then
  local counter = redis.pcall('INCRBY', SEQ, n)
  if type(counter) == 'number' then
    last = counter - n
    counted = true
    if last < 0 or last > 999999999999999 or redis.pcall('XLEN', STREAM) ~= last then
-- @include counter_undo.lua
    end
  end
end
if not counted then  -- the checked path: append.lua's verdicts
-- @include counter_checked.lua
end

-- @include commit_time.lua

-- The first entry is added alone: it is the one that can still fail (an entry beyond the
-- counter). Entry ID "<seq>-<at>": the commit time is kept in the ID. Before it, the
-- producer's result, which fails on a producers key of another type (producer_save.lua).
local first_text = string.format('%d', last + 1)
local written, new_last = n, last + n
local new_last_text = n == 1 and first_text or string.format('%d', new_last)
-- @include producer_save.lua
-- @include entries_add.lua
-- @include producer_prune.lua

if publish ~= '' then
  local messages = n == 1 and ARGV[NAMED + 1] or table.concat(ARGV, ',', NAMED + 1)
  redis.call(publish, channel, '{"first":' .. first_text .. ',"last":' .. new_last_text ..
    ',"at":' .. at .. ',"messages":[' .. messages .. ']}')
end
return new_last_text .. ' ' .. at .. ' 0 ' .. call
