-- stream_end_lib.lua: where the stream ends, read when XLEN is not the counter, for
-- the append scripts. Not a script of its own: the loader puts it where a
-- script says `-- @include stream_end_lib.lua`, inline where `raw` holds the counter's
-- text (nil: none), `last` its value and `length` the stream's XLEN; it sets `last` to
-- the seq to continue after, or returns the error that refuses the append.
--
-- A healthy log has one entry per seq, so XLEN == counter; only when it does not (an
-- operator's XDEL, a counter moved by hand, a trim; or no counter: a new conversation, or
-- one whose counter was deleted or evicted while its stream remains) is the stream's last
-- entry read. (Inline, not a function: a closure costs every append its making.)
-- The seq of the newest entry (0: none), as this library writes it: ID "<seq>-<at>"
-- and a "msg" or "edit" field, or (older versions) ID "<seq>-0" and an "at" field
-- besides. An "at" field under any other ID is not ours: `XADD key *` makes IDs
-- "<ms>-<n>".
local ends = 0
local newest = redis.call('XREVRANGE', STREAM, '+', '-', 'COUNT', 1)[1]
if newest then
  local seq, tail = string.match(newest[1], '^(%d+)-(%d+)$')
  local has_at, has_body = false, false
  local fields = newest[2]
  for i = 1, #fields - 1, 2 do
    has_at = has_at or fields[i] == 'at'
    has_body = has_body or fields[i] == 'msg' or fields[i] == 'edit'
  end
  if not (seq and has_body and has_at == (tail == '0')) then
    return redis.error_reply('MSGLOG_FOREIGN stream ' .. STREAM .. ' ends with entry ' ..
      newest[1] .. ', not one of the form <seq>-<at> with a msg or edit field')
  end
  ends = tonumber(seq)
end
if not raw then
  -- No counter: continue after the stream's last entry instead of wedging.
  last = ends
elseif ends > last then
  return redis.error_reply('MSGLOG_BEHIND seq counter ' .. SEQ .. ' (' .. last ..
    ') is behind the last entry of stream ' .. STREAM .. ' (seq ' .. ends .. ')')
elseif length > last then  -- more entries than seqs: a seq written twice (by hand)
  return redis.error_reply('MSGLOG_BEHIND seq counter ' .. SEQ .. ' (' .. last ..
    ') is behind stream ' .. STREAM .. ', which has ' .. length .. ' entries')
elseif ends < last then
  return redis.error_reply('MSGLOG_AHEAD seq counter ' .. SEQ .. ' (' .. last ..
    ') is ahead of the last entry of stream ' .. STREAM .. ' (seq ' .. ends ..
    '): appending would leave a gap')
end
