#!lua
-- values.lua: set some of a conversation's values kept in place (a hash of current
-- values, no history: Google ADK's user: and app: state), in one atomic call in the
-- conversation's slot, only where its scoped log could write: not under the tombstone of
-- an erasure, and only if the conversation's owner record names the caller's scope.
--
-- Arguments, by name: redis_msglog/_core/lifecycle/values.py names them
-- (VALUES_KEY_NAMES, VALUES_ARGV_NAMES), the binding block below gives each a local of
-- that name (keys in capitals), and a test checks they agree.
--
-- KEYS[1]   SEQ: the conversation's seq counter ("erased": its erasure's tombstone)
-- KEYS[2]   OWNER: the owner record, a hash {scope, created}
-- KEYS[3]   VALUES: the values, a hash (field: a name, value: its JSON)
-- ARGV[1]   scope: the caller's scope, its parts joined by "/"
-- ARGV[2..] the tail: name, value pairs to set
--
-- Returns the number of pairs set. Refuses, writing nothing: MSGLOG_ERASED (the
-- conversation was erased, its tombstone still stands), MSGLOG_UNOWNED (no owner record:
-- the caller registers the conversation in its scope, then calls again), MSGLOG_SCOPE
-- <recorded> (it belongs to another scope).

-- == Binding block: every KEYS and ARGV position, bound once to its name ==
local scope = ARGV[1]
local SEQ = KEYS[1]
local OWNER = KEYS[2]
local VALUES = KEYS[3]
local NAMED = 1 -- ARGV positions before the tail
-- == End of the binding block ==

if redis.call('GET', SEQ) == 'erased' then
  return redis.error_reply('MSGLOG_ERASED ' .. SEQ .. ' holds the tombstone of an erasure')
end
local recorded = redis.call('HGET', OWNER, 'scope')
if not recorded then
  return redis.error_reply('MSGLOG_UNOWNED ' .. OWNER .. ' is missing')
end
if recorded ~= scope then
  return redis.error_reply('MSGLOG_SCOPE ' .. recorded)
end
local pairs_set = 0
for i = NAMED + 1, #ARGV - 1, 2 do  -- one pair a call: no unpack() of a long tail
  redis.call('HSET', VALUES, ARGV[i], ARGV[i + 1])
  pairs_set = pairs_set + 1
end
return pairs_set
