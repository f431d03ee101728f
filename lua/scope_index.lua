#!lua
-- scope_index.lua: add a conversation to, or remove it from, the directory indexes of
-- its scope and of every prefix of that scope (docs/lifecycle.md, "Listing a scope's
-- conversations"), in one atomic call: every key is under the top-level part's hash tag
-- "{<top>:}", so they share one slot. Step 2 of 2 of a scoped log's registration (after
-- scope_owner.lua), and the removal an erasure makes. Both are idempotent (ZADD of a
-- member already there, ZREM of one gone): re-sending after a lost reply is safe.
--
-- Arguments, by name: redis_msglog/_scope.py names them (INDEX_ARGV_NAMES); the binding
-- block below gives each a local of that name. The keys are a variable-length list read
-- through the named base INDEXES (0) and the count `depth`:
--
-- ARGV[1]   mode: "add" or "remove"
-- ARGV[2]   member: "<20-digit inverted created µs>|<scope>|<conversation id>"
-- ARGV[3]   depth: how many parts the scope has (1 to 8)
-- KEYS      INDEXES + i (i = 1..depth): the index of the scope's first i parts, a sorted
--           set (every score 0, ordered by member);
--           INDEXES + depth + i: the tombstone of the scope's first i parts
--
-- Returns the number of indexes changed. "add" refuses, writing nothing, with
-- MSGLOG_SCOPE_ERASED <tombstone key> while the scope or a prefix of it is erased.

-- == Binding block: every KEYS and ARGV position, bound once to its name ==
local mode = ARGV[1]
local member = ARGV[2]
local depth = tonumber(ARGV[3])
local INDEXES = 0
-- == End of the binding block ==

local changed = 0
if mode == 'add' then
  for i = 1, depth do
    local tombstone = KEYS[INDEXES + depth + i]
    if redis.call('EXISTS', tombstone) == 1 then
      return redis.error_reply('MSGLOG_SCOPE_ERASED ' .. tombstone)
    end
  end
  for i = 1, depth do
    changed = changed + redis.call('ZADD', KEYS[INDEXES + i], 0, member)
  end
else
  for i = 1, depth do
    changed = changed + redis.call('ZREM', KEYS[INDEXES + i], member)
  end
end
return changed
