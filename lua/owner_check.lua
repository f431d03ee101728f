-- owner_check.lua: a scoped log writes only into a conversation whose owner record
-- names its scope (one left running across an erasure would otherwise re-create the
-- conversation outside any scope), for the append scripts. Not a script of its own: the
-- loader puts it where a script says `-- @include owner_check.lua`, where `OWNER` (nil:
-- no scope), `scope` and `checked` (the counter already read, and not the tombstone)
-- are set. No owner record: MSGLOG_ERASED if the tombstone stands, else MSGLOG_UNOWNED
-- (the client registers the conversation again, then re-sends once); another scope:
-- MSGLOG_SCOPE <recorded>.
if OWNER then
  local recorded = redis.call('HGET', OWNER, 'scope')
  if not recorded then
    if not checked and redis.pcall('GET', SEQ) == 'erased' then  -- the erasure's verdict
      return redis.error_reply('MSGLOG_ERASED ' .. SEQ .. ': the conversation was erased')
    end
    return redis.error_reply('MSGLOG_UNOWNED ' .. OWNER .. ' is missing')
  elseif recorded ~= scope then
    return redis.error_reply('MSGLOG_SCOPE ' .. recorded)
  end
end
