#!lua flags=allow-oom
-- erase.lua: erase one conversation (docs/lifecycle.md, "Erasing a conversation"),
-- atomically: every key it has is deleted and its tombstone set, in one call.
--
-- allow-oom: an erasure frees memory, so a server over `maxmemory` (noeviction) still
-- runs it. (Servers that cannot parse the shebang get this file with the first line
-- blanked out; see _lua/load.py.)
--
-- Arguments, by name: redis_msglog/_lua/load.py names them (ERASE_KEY_NAMES,
-- ERASE_ARGV_NAMES), the binding block below gives each a local of that name (keys in
-- capitals), and a test checks they agree. Nothing else reads KEYS or ARGV by number.
--
-- KEYS[1]   SEQ: the seq counter, which becomes the tombstone
-- KEYS[2]   OWNER: the owner record (the conversation's scope, a hash), read before it
--           is deleted
-- KEYS[3]   STREAM: the conversation's stream
-- KEYS[4]   RECORDS: the sorted set naming the conversation's idempotency records
--           (append.lua adds each record it writes; score: when it expires, in ms)
-- KEYS[5..] the tail: every other key of the conversation (blobs, view, hidden,
--           producers, ...) and the idempotency records the caller read from RECORDS
--           (key names are never built here: a Redis Cluster must see every key a
--           script touches)
-- ARGV[1]   erased_for_ms: the tombstone's lifetime in milliseconds
-- ARGV[2]   scope: "" for an erasure of this conversation by name (no check); else the
--           scope the caller erases (parts joined by "/"): the conversation is erased
--           only when its owner record names that scope or one below it
--
-- With a scope, nothing is written unless the owner record says the conversation is the
-- scope's: the index a scope's erasure walks is tenant-writable input, never authority.
-- A conversation with no owner record and no counter or stream (erased already, its
-- tombstone standing or expired) is "absent": nothing to erase, nothing written. Any
-- other (another scope's, or unscoped with data) is "outside": nothing written.
--
-- The tombstone is the counter holding the text "erased" (counter_lib.lua), expiring
-- after erased_for_ms: append.lua refuses every call while it stands (MSGLOG_ERASED)
-- and view.lua reads an empty view. Erasing again (an erased or never-created
-- conversation) by name sets the tombstone again, with the new lifetime.
--
-- Returns {deleted, owner, outcome, stragglers}: how many keys were deleted (the
-- tombstone not counted); the owner record's fields as they were (a flat list {name,
-- value, ...}; empty when there was none), so the caller can remove the conversation's
-- index entries; "erased", "absent" or "outside"; and the idempotency records RECORDS
-- named that the caller did not pass (written since it read RECORDS), which the caller
-- unlinks next (no append writes one once the tombstone stands).

-- == Binding block: every KEYS and ARGV position, bound once to its name ==
local erased_for_ms = ARGV[1]
local scope = ARGV[2]
local SEQ = KEYS[1]
local OWNER = KEYS[2]
local STREAM = KEYS[3]
local RECORDS = KEYS[4]
local NAMED_KEYS = 4  -- the named keys above: the tail follows them
-- == End of the binding block ==

local owner = redis.pcall('HGETALL', OWNER)
if type(owner) ~= 'table' or owner.err then
  owner = {}  -- not a hash (written by hand): deleted all the same
end
local counter = redis.pcall('GET', SEQ)  -- a non-string (by hand) is deleted too

if scope ~= '' then
  local recorded = nil
  for i = 1, #owner - 1, 2 do
    if owner[i] == 'scope' then
      recorded = owner[i + 1]
    end
  end
  if recorded == nil then
    local data = (counter and counter ~= 'erased') or redis.call('EXISTS', STREAM) == 1
    return {0, owner, data and 'outside' or 'absent', {}}
  end
  if recorded ~= scope and string.sub(recorded, 1, #scope + 1) ~= scope .. '/' then
    return {0, owner, 'outside', {}}
  end
end

local deleted = 0
local function delete(key)
  deleted = deleted + redis.call('UNLINK', key)  -- freed in the background
end

local passed = {}
for i = NAMED_KEYS + 1, #KEYS do
  passed[KEYS[i]] = true
end
local listed = redis.pcall('ZRANGE', RECORDS, 0, -1)
local stragglers = {}
if type(listed) == 'table' and not listed.err then
  for _, record in ipairs(listed) do
    if not passed[record] then
      stragglers[#stragglers + 1] = record
    end
  end
end

delete(SEQ)
if counter == 'erased' then
  deleted = deleted - 1  -- the tombstone of an earlier erasure is not the conversation's
end
delete(OWNER)
delete(STREAM)
delete(RECORDS)
if #KEYS > NAMED_KEYS then  -- the rest in one command (at most ~1,010 keys: within unpack)
  deleted = deleted + redis.call('UNLINK', unpack(KEYS, NAMED_KEYS + 1))
end
redis.call('SET', SEQ, 'erased', 'PX', erased_for_ms)
return {deleted, owner, 'erased', stragglers}
