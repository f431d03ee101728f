-- counter_lib.lua: the check of the seq counter that append.lua and view.lua both make.
-- Not a script of its own: the loader puts it where a script says `-- @include counter_lib.lua`.

-- The seq counter's value: exactly the canonical non-negative integers INCRBY accepts
-- ("3.0", " 3", "0x3", "+3", "03" pass tonumber but not INCRBY), and few enough digits
-- for Lua's doubles; otherwise an error reply (a table).
local function counter_value(counter, raw)
  if raw == '0' or (string.match(raw, '^[1-9]%d*$') and #raw <= 15) then
    return raw + 0  -- (arithmetic converts once; tonumber converts twice)
  end
  return redis.error_reply('MSGLOG_BADSEQ seq counter ' .. counter .. ' holds ' ..
    string.format('%q', raw) .. ', not a seq')
end

-- An erased conversation's tombstone (lua/erase.lua): the counter holding this text, for
-- the erasure's `erased_for`. Appends refuse it (MSGLOG_ERASED), reads see an empty log.
local ERASED = 'erased'
local function erased_reply(counter)
  return redis.error_reply('MSGLOG_ERASED ' .. counter .. ': the conversation was erased')
end
