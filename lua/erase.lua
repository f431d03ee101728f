#!lua flags=allow-oom
-- erase.lua: erase one conversation (docs/lifecycle.md, "Erasing a conversation"),
-- atomically: every key it has is deleted and its tombstone set, in one call.
--
-- allow-oom: an erasure frees memory, so a server over `maxmemory` (noeviction) still
-- runs it. (Servers that cannot parse the shebang get this file with the first line
-- blanked out; see _scripts.py.)
--
-- Arguments, by name: redis_msglog/_scripts.py names them (ERASE_KEY_NAMES,
-- ERASE_ARGV_NAMES), the binding block below gives each a local of that name (keys in
-- capitals), and a test checks they agree. Nothing else reads KEYS or ARGV by number.
--
-- KEYS[1]   SEQ: the seq counter, which becomes the tombstone
-- KEYS[2]   OWNER: the owner record (the conversation's scope, a hash), read before it
--           is deleted
-- KEYS[3..] the tail: every other key of the conversation (stream, blobs, view, hidden,
--           producers, ...) and its idempotency records, found by the caller (key names
--           are never built here: a Redis Cluster must see every key a script touches)
-- ARGV[1]   erased_for_ms: the tombstone's lifetime in milliseconds
--
-- The tombstone is the counter holding the text "erased" (counter_lib.lua), expiring
-- after erased_for_ms: append.lua refuses every call while it stands (MSGLOG_ERASED)
-- and view.lua reads an empty view. Erasing again (an erased or never-created
-- conversation) sets the tombstone again, with the new lifetime.
--
-- Returns {deleted, owner}: how many keys were deleted (the tombstone not counted), and
-- the owner record's fields as they were (a flat list {name, value, ...}; empty when
-- there was none), so the caller can remove the conversation's index entries.

-- == Binding block: every KEYS and ARGV position, bound once to its name ==
local erased_for_ms = ARGV[1]
local SEQ = KEYS[1]
local OWNER = KEYS[2]
local NAMED_KEYS = 2  -- the named keys above: the tail follows them
-- == End of the binding block ==

local owner = redis.pcall('HGETALL', OWNER)
if type(owner) ~= 'table' or owner.err then
  owner = {}  -- not a hash (written by hand): deleted all the same
end

local deleted = 0
local function delete(key)
  deleted = deleted + redis.call('UNLINK', key)  -- freed in the background
end

local counter = redis.pcall('GET', SEQ)  -- a non-string (by hand) is deleted too
delete(SEQ)
if counter == 'erased' then
  deleted = deleted - 1  -- the tombstone of an earlier erasure is not the conversation's
end
delete(OWNER)
for i = NAMED_KEYS + 1, #KEYS do
  delete(KEYS[i])
end
redis.call('SET', SEQ, 'erased', 'PX', erased_for_ms)
return {deleted, owner}
