-- redact_lib.lua: the writes of a redact (docs/lifecycle.md, "Redacting a message"), and
-- what a trim through redacted rows removes of them. Not a script of its own: the loader
-- puts it where append.lua says `-- @include redact_lib.lua`, after its bindings (STREAM,
-- VIEW, BLOBS). Everything here runs after the checks (edit_lib.lua's plan_redact and
-- plan_trim) and the call's first write: none of it can fail. Built by redact_lib_part() on
-- use (an edit): a plain append creates none of its functions (each costs it time).
local function redact_lib_part()
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

  -- Rewrite the stream from the entry `from` on: `tail` (the plan read it: the entries
  -- from there, but the one redacted), and what this call added since, are deleted, the
  -- stream's last ID moved back to the entry before `from` (XSETID), and they are added
  -- again with the same IDs and fields. Every node holding an entry from `from` on is
  -- then freed whole (a node goes when its last entry does), so the bytes of `drop` (the
  -- redacted entry) or of the trimmed entries that shared the first one are gone. The
  -- stream key stays (its expiry too). A server without XSETID (fakeredis) rebuilds the
  -- whole stream instead: unlinked and every entry added again.
  function redact_lib.rewrite(from, tail, drop)
    local unpack_ = table.unpack or unpack
    local after = tail.upto and '(' .. tail.upto or from
    for _, e in ipairs(redis.call('XRANGE', STREAM, after, '+')) do
      tail[#tail + 1] = e
    end
    local ids = {drop}
    for _, e in ipairs(tail) do
      ids[#ids + 1] = e[1]
    end
    for i = 1, #ids, 500 do
      redis.call('XDEL', STREAM, unpack_(ids, i, math.min(i + 499, #ids)))
    end
    local top = redis.call('XREVRANGE', STREAM, '+', '-', 'COUNT', 1)[1]
    local moved = redis.pcall('XSETID', STREAM, top and top[1] or '0-0')
    if type(moved) == 'table' and moved.err then
      local kept = redis.call('XRANGE', STREAM, '-', '+')
      for _, e in ipairs(tail) do
        kept[#kept + 1] = e
      end
      tail = kept
      local ttl = redis.call('PTTL', STREAM)
      redis.call('UNLINK', STREAM)
      for _, e in ipairs(tail) do
        redis.call('XADD', STREAM, e[1], unpack_(e[2]))
      end
      if ttl > 0 then
        redis.call('PEXPIRE', STREAM, ttl)
      end
      return
    end
    for _, e in ipairs(tail) do
      redis.call('XADD', STREAM, e[1], unpack_(e[2]))
    end
  end

  -- plan: {seq, entry ID, original body, "<at> <replacement JSON>", from, tail}
  -- (edit_lib.lua).
  function redact_lib.redact(plan)
    local s, id, body, value = plan[1], plan[2], plan[3], plan[4]
    drop_blobs(id, body)
    redact_lib.rewrite(plan[5], plan[6], id)
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
  return redact_lib
end
