-- redact_lib.lua: the writes of a redact (docs/lifecycle.md, "Redacting a message"), and
-- what a trim through redacted rows removes of them. Not a script of its own: the loader
-- puts it where append.lua says `-- @include redact_lib.lua`, after its bindings (STREAM,
-- VIEW, BLOBS). Everything here runs after the checks (edit_lib.lua's plan_redact and
-- plan_trim) and the call's first write: none of it can fail.
local redact_lib = {}

-- The entries a redact reads at most to prove a blob of the redacted row is used by no
-- other entry (the span between the first call that stored it and its last user): a
-- blob whose users span more is kept. One redact stays a short call (~10 ms at most).
local REDACT_BLOB_SCAN = 10000

local function seq_text(x)
  return string.format('%d', x)
end

-- Whether an entry other than `id` in seqs lo..hi refers to blob `digest`.
local function blob_used(id, digest, lo, hi)
  local needle = '"blob":"' .. digest .. '"'
  for _, e in ipairs(redis.call('XRANGE', STREAM, seq_text(lo), seq_text(hi))) do
    if e[1] ~= id then
      for _, value in ipairs(e[2]) do
        if string.find(value, needle, 1, true) then
          return true
        end
      end
    end
  end
  return false
end

-- The blobs the redacted row (entry `id`, `body`) referred to that no other entry does:
-- "_<sha256>" (the first seq of the call that stored it) and "^<sha256>" (its last
-- user) bound the entries that may refer to it; those are read. A blob without "_"
-- (stored by an earlier version) or used over a longer span is kept.
local function drop_blobs(id, body)
  if redis.call('EXISTS', BLOBS) == 0 then
    return
  end
  local seen = {}
  for digest in string.gmatch(body, '"blob":"(%x+)"') do
    if not seen[digest] then
      seen[digest] = true
      local bounds = redis.call('HMGET', BLOBS, '_' .. digest, '^' .. digest)
      local lo, hi = tonumber(bounds[1] or ''), tonumber(bounds[2] or '')
      if lo and hi and hi - lo < REDACT_BLOB_SCAN and not blob_used(id, digest, lo, hi) then
        redis.call('HDEL', BLOBS, digest, '_' .. digest, '^' .. digest)
      end
    end
  end
end

-- XDEL only marks an entry deleted inside its stream node (a listpack of up to 100
-- entries): its bytes stay in memory, in DUMP and in RDB snapshots until every entry of
-- the node is deleted. So the stream is rebuilt: every other entry read, the key unlinked
-- and the entries added again with the same IDs and fields, into fresh nodes (bounded:
-- plan_redact refuses a stream of more than MAX_REDACT_REBUILD entries).
local function rebuild_without(id)
  redis.call('XDEL', STREAM, id)
  local kept = redis.call('XRANGE', STREAM, '-', '+')
  -- The new key would have no expiry: a log object without ttl redacting a log that has
  -- one would otherwise keep its stream forever.
  local ttl = redis.call('PTTL', STREAM)
  redis.call('UNLINK', STREAM)
  local unpack_ = table.unpack or unpack
  for _, e in ipairs(kept) do
    redis.call('XADD', STREAM, e[1], unpack_(e[2]))
  end
  if ttl > 0 then
    redis.call('PEXPIRE', STREAM, ttl)
  end
end

-- plan: {seq, entry ID, original body, "<at> <replacement JSON>"} (edit_lib.lua).
function redact_lib.redact(plan)
  local s, id, body, value = plan[1], plan[2], plan[3], plan[4]
  drop_blobs(id, body)
  rebuild_without(id)
  local count = tonumber(redis.call('HGET', VIEW, 'redacted') or '0') or 0
  redis.call('HSET', VIEW, 'r:' .. seq_text(s), value, 'redacted', seq_text(count + 1))
end

-- A trim through `through` (from the log's first seq `first`): the redacted rows among
-- the trimmed seqs go too (only a log with redacted rows looks: 500 fields a step).
function redact_lib.trimmed(first, through)
  local count = tonumber(redis.call('HGET', VIEW, 'redacted') or '0') or 0
  if count == 0 then
    return
  end
  for lo = first, through, 500 do
    local names = {}
    for s = lo, math.min(through, lo + 499) do
      names[#names + 1] = 'r:' .. seq_text(s)
    end
    count = count - redis.call('HDEL', VIEW, (table.unpack or unpack)(names))
  end
  if count > 0 then
    redis.call('HSET', VIEW, 'redacted', seq_text(count))
  else
    redis.call('HDEL', VIEW, 'redacted')
  end
end
