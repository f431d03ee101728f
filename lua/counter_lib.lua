-- counter_lib.lua: the check of the seq counter that append.lua and view.lua both make.
-- Not a script of its own: the loader puts it where a script says `-- @include
-- counter_lib.lua`, inline where `raw` holds the counter's text, and it sets `last` (not
-- a function: the two closures this file used to make cost every append ~1,900
-- instructions, callgrind).
--
-- An erased conversation's tombstone (lua/erase.lua) is the counter holding the text
-- "erased", for the erasure's `erased_for`: append.lua refuses every call while it stands
-- (MSGLOG_ERASED, before anything else is looked at), view.lua sees an empty log.

-- The seq counter's value: exactly the canonical non-negative integers INCRBY accepts
-- ("3.0", " 3", "0x3", "+3", "03" pass tonumber but not INCRBY), and few enough digits
-- for Lua's doubles; otherwise MSGLOG_BADSEQ.
if raw ~= '0' and not (string.match(raw, '^[1-9]%d*$') and #raw <= 15) then
  return redis.error_reply('MSGLOG_BADSEQ seq counter ' .. SEQ .. ' holds ' ..
    string.format('%q', raw) .. ', not a seq')
end
last = raw + 0  -- (arithmetic converts once; tonumber converts twice)
