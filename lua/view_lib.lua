-- view_lib.lua: the view of a log, shared by append.lua (edits) and view.lua (reads).
-- Not a script of its own: the loader puts it where a script says `-- @include view_lib.lua`
-- (edit_lib.lua: inside edit_part(), which append.lua calls only for an edit, so a plain
-- append does not pay for defining these functions).
--
-- The view (docs/edits.md) is kept in two keys beside the stream:
--   view hash: the view order as *segments*, ascending seq ranges read one after the other:
--                "g<pos>" = "<lo>-<hi>", the segment at position pos, for every pos from
--                "front" to "back" (view order, no gaps); the last one, "<lo>-", is open (it
--                grows with appends). "version" = the seq of the last edit; "rows" = the
--                rows of the view with seq <= version (every later entry is a message at
--                the view's end, so the view has rows + last - version rows); "archived" =
--                the archive watermark row's seq, "archivedrows" = the rows up to it.
--                Absent until the first edit: then the view is every entry, "1-".
--   hidden zset: seq ranges no view shows (retracted messages and every edit entry),
--                member "<lo>-<hi>", score lo (>= 0); overlapping or adjacent ranges are
--                merged. At negative scores, the segments by seq: member "@<pos>", score
--                -lo, so the segment holding a seq is one ZRANGEBYSCORE away.
-- Every entry not hidden is a message, so a run of seqs between hidden ranges is read
-- with one XRANGE: a read costs what it returns plus one step per hidden range and
-- segment it crosses, whatever the history; a count is a few fields of the view hash.
--
-- Earlier versions kept the segments in one field, "segments" = "13-14,7-11,16-" (and
-- no counts): such a view is still read, parsed whole (a cost that grows with its
-- segments), and the next edit rewrites it in the form above.

local function int(x)
  return string.format('%d', x)
end

local function bad_view(view, what)
  return {err = 'MSGLOG_BADVIEW view ' .. view .. ' ' .. what .. ' (set by hand?)'}
end

-- Damaged view keys found in the middle of a read or an edit plan: raised, and turned
-- into the script's error reply by `guarded` (nothing has been written by then).
local function fail(reply)
  error(reply)
end

-- fn() as a reply: its result, or the error reply it raised (Redis 7 hands pcall the
-- error's text; fakeredis, the table).
local function guarded(fn)
  local ok, result = pcall(fn)
  if ok then
    return result
  end
  if type(result) == 'table' and result.err then
    result = result.err
  end
  return redis.error_reply(tostring(result))
end

local function parse_range(member)
  local lo, hi = string.match(member, '^(%d+)%-(%d+)$')
  return tonumber(lo), tonumber(hi)
end

-- The hidden range starting at or below seq s (lo, hi), or nil.
local function hidden_at_or_below(hidden, s)
  local found = redis.call('ZREVRANGEBYSCORE', hidden, int(s), '0', 'LIMIT', 0, 1)
  if found[1] then
    return parse_range(found[1])
  end
  return nil
end

-- The first hidden range starting above seq s (lo, hi), or nil.
local function hidden_above(hidden, s)
  local found = redis.call('ZRANGEBYSCORE', hidden, '(' .. int(s), '+inf', 'LIMIT', 0, 1)
  if found[1] then
    return parse_range(found[1])
  end
  return nil
end

local function is_hidden(hidden, s)
  local lo, hi = hidden_at_or_below(hidden, s)
  return lo ~= nil and hi >= s
end

-- Hide seqs lo..hi, merging with the ranges it overlaps or touches. The merged range is
-- added before the ranges it replaces are removed: the key never disappears, even for a
-- moment (in a cluster slot that is migrating, a script touching a key that no longer
-- exists fails mid-way, after its first writes).
local function hide(hidden, lo, hi)
  local replaced = {}
  local below_lo, below_hi = hidden_at_or_below(hidden, lo)
  if below_lo and below_hi >= lo - 1 then
    replaced[1] = int(below_lo) .. '-' .. int(below_hi)
    lo, hi = below_lo, math.max(hi, below_hi)
  end
  local cursor = lo
  while true do
    local next_lo, next_hi = hidden_above(hidden, cursor)
    if not next_lo or next_lo > hi + 1 then
      break
    end
    replaced[#replaced + 1] = int(next_lo) .. '-' .. int(next_hi)
    hi, cursor = math.max(hi, next_hi), next_lo
  end
  local merged = int(lo) .. '-' .. int(hi)
  redis.call('ZADD', hidden, int(lo), merged)
  for _, member in ipairs(replaced) do
    if member ~= merged then
      redis.call('ZREM', hidden, member)
    end
  end
end

-- A redacted row (docs/lifecycle.md) as a stream entry: its replacement, kept in the view
-- hash as "r:<seq>" = "<at> <row JSON>", or nil.
local function redacted_entry(view, s)
  local value = redis.call('HGET', view, 'r:' .. int(s))
  if not value then
    return nil
  end
  local at, body = string.match(value, '^(%d+) (.*)$')
  return {int(s) .. '-' .. at, {'msg', body}}
end

-- The view key when the log has redacted rows (their seqs are gaps in the stream, filled
-- from the view hash), else nil: a log without any pays nothing.
local function redactions(v)
  if v.redacted and v.redacted > 0 then
    return v.key
  end
  return nil
end

-- Walk the visible seqs down from `from` to `lo`, appending up to `need` entries to `out`
-- (newest first); return how many are still needed. `view`: the view key when the log
-- has redacted rows (see redactions()), whose seqs the stream lacks.
local function walk_down(stream, hidden, lo, from, need, out, view)
  local cursor = from
  while cursor >= lo and need > 0 do
    local hlo, hhi = hidden_at_or_below(hidden, cursor)
    if hlo and hhi >= cursor then
      cursor = hlo - 1
    else
      local floor = lo
      if hlo and hhi + 1 > floor then
        floor = hhi + 1
      end
      -- Incomplete IDs: "<cursor>" ends at "<cursor>-<max>", "<floor>" starts at
      -- "<floor>-0" (entry IDs are "<seq>-<at>", or "<seq>-0" for older entries).
      local entries = redis.call('XREVRANGE', stream, int(cursor), int(floor), 'COUNT', need)
      if view then  -- every seq of the run is a row: a gap is a redacted one
        local expect = cursor
        local function fill(down_to)
          while expect > down_to and need > 0 do
            local row = redacted_entry(view, expect)
            if row then
              out[#out + 1] = row
              need = need - 1
            end
            expect = expect - 1
          end
        end
        for _, entry in ipairs(entries) do
          local s = tonumber(string.match(entry[1], '^(%d+)'))
          fill(s)
          if need > 0 then
            out[#out + 1] = entry
            need = need - 1
          end
          expect = s - 1
        end
        fill(floor - 1)
      else
        for _, entry in ipairs(entries) do
          out[#out + 1] = entry
        end
        need = need - #entries
      end
      cursor = floor - 1
      if need == 0 then
        break
      end
    end
  end
  return need
end

-- The number of visible seqs in lo..hi: one step per hidden range in it.
local function count_visible(hidden, lo, hi)
  if hi < lo then
    return 0
  end
  local total = hi - lo + 1
  local hlo, hhi = hidden_at_or_below(hidden, lo)
  if not (hlo and hhi >= lo) then
    hlo, hhi = hidden_above(hidden, lo)
  end
  while hlo and hlo <= hi do
    total = total - (math.min(hhi, hi) - math.max(hlo, lo) + 1)
    hlo, hhi = hidden_above(hidden, hhi)
  end
  return total
end

-- The view's segments, read on demand ------------------------------------------------
-- A view state `v`: key, hidden, form ("none": no view hash yet, "old": the single
-- "segments" field, "new"), front, back, version, rows (nil until counted for the old
-- form), archived, archivedrows, segs (pos -> {lo, hi or nil}, false once dropped) and
-- changed (the positions an edit rewrote).

local function parse_old(v, text)
  local pos = 0
  for lo, hi in string.gmatch(text, '(%d+)%-(%d*)') do
    pos = pos + 1
    v.segs[pos] = {tonumber(lo), tonumber(hi)}
  end
  if pos == 0 or v.segs[pos][2] ~= nil then
    return bad_view(v.key, 'holds segments ' .. text)
  end
  v.form, v.front, v.back = 'old', 1, pos
  return v
end

-- The state of the view keys, or an error reply.
local function open_view(view, hidden)
  local kind = redis.call('TYPE', view)['ok']
  if kind ~= 'none' and kind ~= 'hash' then
    return {err = 'WRONGTYPE view ' .. view .. ' is not a hash'}
  end
  local hidden_kind = redis.call('TYPE', hidden)['ok']
  if hidden_kind ~= 'none' and hidden_kind ~= 'zset' then
    return {err = 'WRONGTYPE hidden ranges ' .. hidden .. ' is not a sorted set'}
  end
  local v = {key = view, hidden = hidden, form = 'none', front = 1, back = 1, version = 0,
    rows = 0, segs = {{1, nil}}, changed = {}}
  if kind == 'none' then
    return v
  end
  local f = redis.call('HMGET', view, 'front', 'back', 'rows', 'version', 'archived',
    'archivedrows', 'segments', 'redacted')
  v.version = tonumber(f[4] or '0')
  v.redacted = tonumber(f[8] or '0')
  v.archived = tonumber(f[5] or '')
  v.segs = {}
  if f[7] and not f[2] then
    v.rows = nil
    return parse_old(v, f[7])
  end
  v.form = 'new'
  v.front, v.back, v.rows = tonumber(f[1] or ''), tonumber(f[2] or ''), tonumber(f[3] or '')
  v.archivedrows = tonumber(f[6] or '')
  v.stored_front, v.stored_back = v.front, v.back  -- as written: the plan moves front, back
  if not (v.front and v.back and v.rows and v.version) or f[7] or v.front > v.back or
      (v.archived == nil) ~= (v.archivedrows == nil) then
    return bad_view(view, 'holds fields this library does not write')
  end
  return v
end

-- The segment at position pos: {lo, hi} (hi nil: the open one).
local function seg_at(v, pos)
  local seg = v.segs[pos]
  if seg == nil and v.form == 'new' and pos >= v.stored_front and pos <= v.stored_back then
    local text = redis.call('HGET', v.key, 'g' .. int(pos))
    local lo, hi = string.match(text or '', '^(%d+)%-(%d*)$')
    lo, hi = tonumber(lo), tonumber(hi)
    if lo and (hi == nil) == (pos == v.stored_back) and (hi == nil or hi >= lo) then
      seg = {lo, hi}
      v.segs[pos] = seg
    end
  end
  if not seg then
    fail(bad_view(v.key, 'has no segment at position ' .. int(pos)))
  end
  return seg
end

local function seg_set(v, pos, lo, hi)
  v.segs[pos] = {lo, hi}
  v.changed[pos] = true
end

local function seg_drop(v, pos)
  v.segs[pos] = false
  v.changed[pos] = true
end

-- The position of the segment holding seq s, or nil (compacted away, or a compaction's
-- own entry): one ZRANGEBYSCORE and one HGET (the old form: a scan).
local function lookup(v, s)
  local near = v.segs[v.near or v.front]  -- the last one found: edits name nearby seqs
  if near and s >= near[1] and (near[2] == nil or s <= near[2]) then
    return v.near or v.front
  end
  if v.form ~= 'new' then
    for pos = v.front, v.back do
      local seg = v.segs[pos]
      if seg and s >= seg[1] and (seg[2] == nil or s <= seg[2]) then
        return pos
      end
    end
    return nil
  end
  local found = redis.call('ZRANGEBYSCORE', v.hidden, int(-s), '(0', 'LIMIT', 0, 1)
  if not found[1] then
    return nil
  end
  local pos = tonumber(string.match(found[1], '^@(%-?%d+)$') or '')
  if not pos then
    fail(bad_view(v.hidden, 'holds ' .. found[1] .. ', not a segment'))
  end
  local seg = seg_at(v, pos)
  if s < seg[1] or (seg[2] ~= nil and s > seg[2]) then
    return nil
  end
  v.near = pos
  return pos
end

-- The seqs the segment at pos spans, the open one up to `last`.
local function seg_seqs(v, pos, last)
  local seg = seg_at(v, pos)
  return seg[1], seg[2] or last
end

-- One view ("visible", "active" or "archived") as a span of positions: first, final
-- (first > final: empty), and the seqs it starts at in `first` and ends at in `final`
-- where the archive watermark cuts a segment (nil: the whole segment).
local function view_span(v, which)
  if which == 'visible' or not v.archived then
    if which == 'archived' then
      return 1, 0
    end
    return v.front, v.back
  end
  local at = lookup(v, v.archived)
  if which == 'archived' then
    if not at then
      return 1, 0
    end
    return v.front, at, nil, v.archived
  end
  if not at then
    return v.front, v.back
  end
  return at, v.back, v.archived + 1, nil
end

-- The seqs the view span takes of the segment at pos.
local function span_seqs(v, pos, last, first, final, cut_lo, cut_hi)
  local lo, hi = seg_seqs(v, pos, last)
  if pos == first and cut_lo then
    lo = cut_lo
  end
  if pos == final and cut_hi then
    hi = cut_hi
  end
  return lo, hi
end

-- The rows of a view span, counted segment by segment (the old form, and edits that
-- move rows in or out of the view: their cost is the rows they move).
local function count_span(v, last, first, final, cut_lo, cut_hi)
  local total = 0
  for pos = first, final do
    local lo, hi = span_seqs(v, pos, last, first, final, cut_lo, cut_hi)
    total = total + count_visible(v.hidden, lo, hi)
  end
  return total
end

-- The old form's counts (what the new form keeps): an old view's first edit pays this
-- once, and so does each count of an old view.
local function ensure_counts(v, last)
  if v.rows ~= nil then
    return
  end
  v.rows = count_span(v, last, v.front, v.back) - (last - v.version)
  if v.archived then
    v.archivedrows = count_span(v, last, view_span(v, 'archived'))
  end
end

-- The number of rows of one view.
local function view_count(v, which, last)
  ensure_counts(v, last)
  local visible = v.rows + last - v.version
  local archived = 0
  if v.archived and lookup(v, v.archived) then
    archived = v.archivedrows
  end
  if which == 'visible' then
    return visible
  elseif which == 'archived' then
    return archived
  end
  return visible - archived
end

-- Write the view state after an edit whose entry is seq c: the segments it changed (every
-- one, for a view of the old form), the counts (v.total: the rows with seq below c), the
-- version.
local function save_view(v, c)
  if v.form ~= 'new' then
    for pos in pairs(v.segs) do
      v.changed[pos] = true
    end
  end
  for pos in pairs(v.changed) do
    local seg, field, member = v.segs[pos], 'g' .. int(pos), '@' .. int(pos)
    if seg then
      redis.call('HSET', v.key, field, int(seg[1]) .. '-' .. (seg[2] and int(seg[2]) or ''))
      redis.call('ZADD', v.hidden, int(-seg[1]), member)
    else
      redis.call('HDEL', v.key, field)
      redis.call('ZREM', v.hidden, member)
    end
  end
  redis.call('HSET', v.key, 'front', int(v.front), 'back', int(v.back), 'rows',
    int(v.total), 'version', int(c))
  if v.archived then
    redis.call('HSET', v.key, 'archived', int(v.archived), 'archivedrows',
      int(v.archivedrows))
  else
    redis.call('HDEL', v.key, 'archived', 'archivedrows')
  end
  if v.form == 'old' then
    redis.call('HDEL', v.key, 'segments')
  end
end
