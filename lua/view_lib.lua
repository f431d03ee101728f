-- view_lib.lua: the view of a log, shared by append.lua (edits) and view.lua (reads),
-- with the check of the seq counter both make.
-- Not a script of its own: the loader puts it where a script says `-- @include view_lib.lua`.
--
-- The view (docs/edits.md) is kept in two keys beside the stream:
--   view hash:   "segments" = the view order as ascending seq ranges, e.g. "13-14,7-11,16-"
--                (closed ranges, the last one open: it grows with appends); "archived" = the
--                archive watermark row's seq; "version" = the seq of the last edit. Absent
--                until the first edit: then the view is every entry, "1-".
--   hidden zset: seq ranges no view shows (retracted messages and every edit entry),
--                member "<lo>-<hi>", score lo; overlapping or adjacent ranges are merged.
-- Every entry not hidden is a message, so a run of seqs between hidden ranges is read
-- with one XRANGE: a view read costs what it returns plus one step per hidden range it
-- crosses, never a scan of the history.

-- The seq counter's value: exactly the canonical non-negative integers INCRBY accepts
-- ("3.0", " 3", "0x3", "+3", "03" pass tonumber but not INCRBY), and few enough digits
-- for Lua's doubles; otherwise an error reply (a table).
local function counter_value(counter, raw)
  if raw == '0' or (string.match(raw, '^[1-9]%d*$') and #raw <= 15) then
    return tonumber(raw)
  end
  return redis.error_reply('MSGLOG_BADSEQ seq counter ' .. counter .. ' holds ' ..
    string.format('%q', raw) .. ', not a seq')
end

local function bad_view(view, what)
  return {err = 'MSGLOG_BADVIEW view ' .. view .. ' ' .. what .. ' (set by hand?)'}
end

-- The segments, as a list of {lo, hi} (hi nil for the open one), and whether any edit
-- was ever made; or an error reply.
local function load_segments(view)
  local kind = redis.call('TYPE', view)['ok']
  if kind == 'none' then
    return {{1, nil}}, false
  end
  if kind ~= 'hash' then
    return {err = 'WRONGTYPE view ' .. view .. ' is not a hash'}
  end
  local text = redis.call('HGET', view, 'segments')
  local segments = {}
  if text then
    for lo, hi in string.gmatch(text, '(%d+)%-(%d*)') do
      segments[#segments + 1] = {tonumber(lo), tonumber(hi)}
    end
  end
  if #segments == 0 or segments[#segments][2] ~= nil then
    return bad_view(view, 'holds segments ' .. tostring(text))
  end
  return segments, true
end

local function format_segments(segments)
  local parts = {}
  for i, segment in ipairs(segments) do
    parts[i] = string.format('%d', segment[1]) .. '-' ..
      (segment[2] and string.format('%d', segment[2]) or '')
  end
  return table.concat(parts, ',')
end

local function parse_range(member)
  local lo, hi = string.match(member, '^(%d+)%-(%d+)$')
  return tonumber(lo), tonumber(hi)
end

-- The hidden range starting at or below seq s (lo, hi), or nil.
local function hidden_at_or_below(hidden, s)
  local found = redis.call('ZREVRANGEBYSCORE', hidden, s, '-inf', 'LIMIT', 0, 1)
  if found[1] then
    return parse_range(found[1])
  end
  return nil
end

-- The first hidden range starting above seq s (lo, hi), or nil.
local function hidden_above(hidden, s)
  local found = redis.call('ZRANGEBYSCORE', hidden, '(' .. string.format('%d', s), '+inf',
    'LIMIT', 0, 1)
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
    replaced[1] = string.format('%d-%d', below_lo, below_hi)
    lo, hi = below_lo, math.max(hi, below_hi)
  end
  local cursor = lo
  while true do
    local next_lo, next_hi = hidden_above(hidden, cursor)
    if not next_lo or next_lo > hi + 1 then
      break
    end
    replaced[#replaced + 1] = string.format('%d-%d', next_lo, next_hi)
    hi, cursor = math.max(hi, next_hi), next_lo
  end
  local merged = string.format('%d-%d', lo, hi)
  redis.call('ZADD', hidden, lo, merged)
  for _, member in ipairs(replaced) do
    if member ~= merged then
      redis.call('ZREM', hidden, member)
    end
  end
end

-- The index of the segment holding seq s, or nil.
local function segment_of(segments, s)
  for i, segment in ipairs(segments) do
    if s >= segment[1] and (segment[2] == nil or s <= segment[2]) then
      return i
    end
  end
  return nil
end

-- Append to `out` up to `need` visible entries of seqs from..lo, newest first; return how
-- many are still needed.
local function walk_down(stream, hidden, lo, from, need, out)
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
      local entries = redis.call('XREVRANGE', stream, string.format('%d', cursor),
        string.format('%d', floor), 'COUNT', need)
      for _, entry in ipairs(entries) do
        out[#out + 1] = entry
      end
      need = need - #entries
      cursor = floor - 1
      if need == 0 then
        break
      end
    end
  end
  return need
end

-- Append to `out` up to `need` visible entries of seqs from..hi, oldest first; return how
-- many are still needed.
local function walk_up(stream, hidden, from, hi, need, out)
  local cursor = from
  while cursor <= hi and need > 0 do
    local hlo, hhi = hidden_at_or_below(hidden, cursor)
    if hlo and hhi >= cursor then
      cursor = hhi + 1
    else
      local ceiling = hi
      local next_lo = hidden_above(hidden, cursor)
      if next_lo and next_lo - 1 < ceiling then
        ceiling = next_lo - 1
      end
      local entries = redis.call('XRANGE', stream, string.format('%d', cursor),
        string.format('%d', ceiling), 'COUNT', need)  -- incomplete IDs: see walk_down
      for _, entry in ipairs(entries) do
        out[#out + 1] = entry
      end
      need = need - #entries
      cursor = ceiling + 1
      if need == 0 then
        break
      end
    end
  end
  return need
end

-- The number of visible seqs in lo..hi.
local function count_visible(hidden, lo, hi)
  if hi < lo then
    return 0
  end
  local total = hi - lo + 1
  local cursor = lo
  local hlo, hhi = hidden_at_or_below(hidden, cursor)
  if not (hlo and hhi >= cursor) then
    hlo, hhi = hidden_above(hidden, cursor)
  end
  while hlo and hlo <= hi do
    total = total - (math.min(hhi, hi) - math.max(hlo, lo) + 1)
    hlo, hhi = hidden_above(hidden, hhi)
  end
  return total
end

-- The segments of one view: "visible" (all), "active" (after the archive watermark),
-- "archived" (up to it). `last` closes the open segment.
local function view_segments(segments, which, archived, last)
  local closed = {}
  for i, segment in ipairs(segments) do
    closed[i] = {segment[1], segment[2] or last}
  end
  if which == 'visible' or archived == nil then
    if which == 'archived' then
      return {}
    end
    return closed
  end
  local at = segment_of(segments, archived)
  if at == nil then
    return which == 'active' and closed or {}
  end
  local result = {}
  if which == 'archived' then
    for i = 1, at - 1 do
      result[#result + 1] = closed[i]
    end
    result[#result + 1] = {closed[at][1], archived}
  else
    result[1] = {archived + 1, closed[at][2]}
    for i = at + 1, #closed do
      result[#result + 1] = closed[i]
    end
  end
  return result
end
