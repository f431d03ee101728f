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
-- ARGV[2]   "last": the view's last ARGV[3] rows; "after": the runs of rows whose seq is
--           above ARGV[4], in view order, from position ARGV[5]/ARGV[6], at most ARGV[3]
--           rows (0: no limit) in at most ARGV[7] runs; "count": the number of rows
-- ARGV[3]   how many rows at most
-- ARGV[4]   "after" only: the seq the rows must be above
-- ARGV[5]   "after" only: the position of the segment to start in ("": the view's first)
-- ARGV[6]   "after" only: the seq to start after in that segment (0: its start)
-- ARGV[7]   "after" only: how many runs at most
--
-- Returns {version, last_seq, body, more, next_position, next_seq}: the seq of the last
-- edit (0: none), the log's last seq, and the body: for "last" the rows ({id, fields}
-- like XRANGE, in view order), for "count" the count, for "after" the runs {lo1, hi1,
-- lo2, hi2, ...}: every seq of a run is a row (a message), so the caller reads them with
-- XRANGE when it likes (entries never change: the runs are the snapshot; the rows are
-- not copied through Lua), with whether more may remain (1) and where the next call
-- starts. The cost is what it returns plus the hidden ranges it crosses: the view hash is
-- read a segment at a time, never whole (view_lib.lua).

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

-- Append to `runs` the runs of visible seqs from..hi (lo, hi pairs), up to `need` seqs
-- and `room` runs; return the seqs still needed, the runs left and the next seq to look
-- at.
local function runs_up(from, hi, need, room, runs)
  local cursor = from
  while cursor <= hi and need > 0 and room > 0 do
    local hlo, hhi = hidden_at_or_below(KEYS[4], cursor)
    if hlo and hhi >= cursor then
      cursor = hhi + 1
    else
      local ceiling = math.min(hi, cursor + need - 1)
      local next_lo = hidden_above(KEYS[4], cursor)
      if next_lo and next_lo - 1 < ceiling then
        ceiling = next_lo - 1
      end
      runs[#runs + 1], runs[#runs + 2] = cursor, ceiling
      need, room, cursor = need - (ceiling - cursor + 1), room - 1, ceiling + 1
    end
  end
  return need, room, cursor
end

local function runs_after(want)
  local first, final, cut_lo, cut_hi = view_span(v, ARGV[1])
  local above, room = tonumber(ARGV[4]), tonumber(ARGV[7])
  local pos, from = tonumber(ARGV[5]) or first, tonumber(ARGV[6])
  local need = want > 0 and want or math.huge
  local runs = {}
  while pos <= final and need > 0 and room > 0 do
    local lo, hi = span_seqs(v, pos, last, first, final, cut_lo, cut_hi)
    local cursor
    need, room, cursor = runs_up(math.max(lo, above + 1, from + 1), hi, need, room, runs)
    if cursor > hi then
      pos, from = pos + 1, 0
    else
      from = cursor - 1  -- stopped inside this segment: go on after the last seq taken
    end
  end
  return {v.version, last, runs, pos <= final and 1 or 0, pos, from}
end

return guarded(function()
  if ARGV[2] == 'count' then
    return {v.version, last, view_count(v, ARGV[1], last), 0, 0, 0}
  elseif ARGV[2] == 'last' then
    return last_rows(tonumber(ARGV[3]))
  end
  return runs_after(tonumber(ARGV[3]))
end)
