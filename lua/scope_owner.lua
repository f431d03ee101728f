#!lua
-- scope_owner.lua: record the scope a conversation belongs to (docs/lifecycle.md,
-- "Scopes"), step 1 of 2 of a scoped log's registration, run once per log object before
-- its first write, in the conversation's slot. Idempotent: an equal record is kept as it
-- is (its created time too), so re-sending this after a lost reply is safe.
--
-- Arguments, by name: redis_msglog/_scope.py names them (OWNER_KEY_NAMES,
-- OWNER_ARGV_NAMES), the binding block below gives each a local of that name (keys in
-- capitals), and a test checks they agree.
--
-- KEYS[1]   SEQ: the conversation's seq counter ("erased": its erasure's tombstone)
-- KEYS[2]   STREAM: the conversation's stream
-- KEYS[3]   OWNER: the owner record, a hash {scope, created}
-- ARGV[1]   scope: the scope's parts joined by "/"
--
-- Returns the created time (µs since the epoch, the server's TIME, as text) of the
-- record, new or already there. Refuses, writing nothing: MSGLOG_ERASED (the
-- conversation was erased, its tombstone still stands), MSGLOG_SCOPE <recorded> (it
-- belongs to another scope), MSGLOG_UNSCOPED (it has entries but no owner record: it
-- was created without a scope), MSGLOG_BADOWNER (a record this library did not write).

-- == Binding block: every KEYS and ARGV position, bound once to its name ==
local scope = ARGV[1]
local SEQ = KEYS[1]
local STREAM = KEYS[2]
local OWNER = KEYS[3]
-- == End of the binding block ==

local counter = redis.call('GET', SEQ)
if counter == 'erased' then
  return redis.error_reply('MSGLOG_ERASED ' .. SEQ .. ' holds the tombstone of an erasure')
end
local recorded = redis.call('HGET', OWNER, 'scope')
if recorded then
  if recorded ~= scope then
    return redis.error_reply('MSGLOG_SCOPE ' .. recorded)
  end
  local created = redis.call('HGET', OWNER, 'created')
  if not created or not string.match(created, '^[1-9][0-9]*$') then
    return redis.error_reply('MSGLOG_BADOWNER ' .. OWNER .. ' has no created time')
  end
  return created
end
if counter or redis.call('EXISTS', STREAM) == 1 then
  return redis.error_reply('MSGLOG_UNSCOPED ' .. STREAM .. ' has entries and no owner record')
end
local now = redis.call('TIME')
local created = now[1] .. string.format('%06d', tonumber(now[2]))
redis.call('HSET', OWNER, 'scope', scope, 'created', created)
return created
