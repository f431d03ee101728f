#!lua flags=no-writes
-- view.lua: read a view of a conversation (docs/edits.md), atomically: one call is a
-- snapshot at one seq. Used only for logs that have edits; an edit-free log's view is
-- its stream, read with XRANGE/XREVRANGE.
--
-- KEYS[1]   seq counter
-- KEYS[2]   stream
-- KEYS[3]   view hash (see view_lib.lua)
-- KEYS[4]   hidden ranges
-- ARGV[1]   the view: "visible", "active" or "archived"
-- ARGV[2]   "last": the view's last ARGV[3] rows; "after": the rows whose seq is above
--           ARGV[4], in view order, from position ARGV[5]/ARGV[6], at most ARGV[3] (0: no
--           limit) and about ARGV[7] bytes; "count": the number of rows
-- ARGV[3]   how many rows at most
-- ARGV[4]   "after" only: the seq the rows must be above
-- ARGV[5]   "after" only: the position of the segment to start in ("": the view's first)
-- ARGV[6]   "after" only: the seq to start after in that segment (0: its start)
-- ARGV[7]   "after" only: stop once the rows read hold this many bytes
-- ARGV[8]   "after" only: rows read per step (the byte budget is checked between steps)
--
-- Returns {version, last_seq, rows_or_count, more, next_position, next_seq}: the seq of
-- the last edit (0: none), the log's last seq, the rows ({id, fields} like XRANGE, in
-- view order; or the count), and for "after" whether rows may remain (1) and where the
-- next call starts. The cost is what it returns plus the hidden ranges it crosses: the
-- view hash is read a segment at a time, never whole (view_lib.lua).

-- @include counter_lib.lua
-- @include view_lib.lua

local raw = redis.call('GET', KEYS[1])
local last
if raw then
  last = counter_value(KEYS[1], raw)
  if type(last) == 'table' then
    return last
  end
else
  local newest = redis.call('XREVRANGE', KEYS[2], '+', '-', 'COUNT', 1)
  last = newest[1] and tonumber(string.match(newest[1][1], '^(%d+)')) or 0
end

local v = open_view(KEYS[3], KEYS[4])
if v.err then
  return v
end

local function entry_bytes(entry)
  local total = #entry[1]
  for _, value in ipairs(entry[2]) do
    total = total + #value
  end
  return total
end

local function last_rows(want)
  local first, final, cut_lo, cut_hi = view_span(v, ARGV[1])
  local newest_first, need = {}, want
  for pos = final, first, -1 do
    local lo, hi = span_seqs(v, pos, last, first, final, cut_lo, cut_hi)
    need = walk_down(KEYS[2], KEYS[4], lo, hi, need, newest_first)
    if need == 0 then
      break
    end
  end
  local rows = {}
  for i = #newest_first, 1, -1 do
    rows[#rows + 1] = newest_first[i]
  end
  return {v.version, last, rows, 0, 0, 0}
end

local function rows_after(want)
  local first, final, cut_lo, cut_hi = view_span(v, ARGV[1])
  local above, budget, step = tonumber(ARGV[4]), tonumber(ARGV[7]), tonumber(ARGV[8])
  local pos, from = tonumber(ARGV[5]) or first, tonumber(ARGV[6])
  local need = want > 0 and want or math.huge
  local rows, bytes = {}, 0
  while pos <= final and need > 0 and bytes < budget do
    local lo, hi = span_seqs(v, pos, last, first, final, cut_lo, cut_hi)
    local take = math.min(need, step)
    local before = #rows
    local left = walk_up(KEYS[2], KEYS[4], math.max(lo, above + 1, from + 1), hi, take, rows)
    need = need - (take - left)
    for i = before + 1, #rows do
      bytes = bytes + entry_bytes(rows[i])
    end
    from = 0
    if left == 0 and #rows > before then  -- a full step: the segment may hold more
      from = tonumber(string.match(rows[#rows][1], '^(%d+)'))
    end
    if from == 0 or from >= hi then
      pos, from = pos + 1, 0
    end
  end
  return {v.version, last, rows, pos <= final and 1 or 0, pos, from}
end

return guarded(function()
  if ARGV[2] == 'count' then
    return {v.version, last, view_count(v, ARGV[1], last), 0, 0, 0}
  elseif ARGV[2] == 'last' then
    return last_rows(tonumber(ARGV[3]))
  end
  return rows_after(tonumber(ARGV[3]))
end)
