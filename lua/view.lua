#!lua flags=no-writes
-- view.lua: read a view of a conversation (docs/edits.md), atomically: one call is a
-- snapshot at one seq. Used only for logs that have edits; an edit-free log's view is
-- its stream, read with XRANGE/XREVRANGE.
--
-- Arguments, by name: redis_msglog/_scripts.py names them (VIEW_KEY_NAMES,
-- VIEW_ARGV_NAMES), the binding block below gives each a local of that name (keys in
-- capitals), and a test checks they agree. Nothing else reads KEYS or ARGV by number.
--
-- KEYS[1]   SEQ: the seq counter
-- KEYS[2]   STREAM: the stream
-- KEYS[3]   VIEW: the view hash (see view_lib.lua)
-- KEYS[4]   HIDDEN: the hidden ranges
-- ARGV[1]   view: which view, "visible", "active" or "archived"
-- ARGV[2]   mode: "last": the view's last `limit` rows; "after": the runs of rows whose
--           seq is above `above`, in view order, from `position`/`start`, at most `limit`
--           rows (0: no limit) in at most `runs` runs; "count": the number of rows
-- ARGV[3]   limit: how many rows at most
-- ARGV[4]   above: "after" only, the seq the rows must be above
-- ARGV[5]   position: "after" only, the position of the segment to start in ("": the
--           view's first)
-- ARGV[6]   start: "after" only, the seq to start after in that segment (0: its start)
-- ARGV[7]   runs: "after" only, how many runs at most
--
-- Returns {version, last_seq, body, more, next_position, next_seq}: the seq of the last
-- edit (0: none), the log's last seq, and the body: for "last" the rows ({id, fields}
-- like XRANGE, in view order), for "count" the count, for "after" the runs {lo1, hi1,
-- lo2, hi2, ...}: every seq of a run is a row (a message), so the caller reads them with
-- XRANGE when it likes (entries never change: the runs are the snapshot; the rows are
-- not copied through Lua), with whether more may remain (1) and where the next call
-- starts. The cost is what it returns plus the hidden ranges it crosses: the view hash is
-- read a segment at a time, never whole (view_lib.lua).

-- == Binding block: every KEYS and ARGV position, bound once to its name ==
local view = ARGV[1]
local mode = ARGV[2]
local limit = ARGV[3]
local above = ARGV[4]
local position = ARGV[5]
local start = ARGV[6]
local runs = ARGV[7]
local SEQ = KEYS[1]
local STREAM = KEYS[2]
local VIEW = KEYS[3]
local HIDDEN = KEYS[4]
-- == End of the binding block ==

-- @include view_lib.lua

local raw = redis.call('GET', SEQ)
if raw == 'erased' then  -- an erased conversation (counter_lib.lua): an empty view
  return {0, 0, mode == 'count' and 0 or {}, 0, 0, 0}
end
local last
if raw then
-- @include counter_lib.lua
else
  local newest = redis.call('XREVRANGE', STREAM, '+', '-', 'COUNT', 1)
  last = newest[1] and tonumber(string.match(newest[1][1], '^(%d+)')) or 0
end

local v = open_view(VIEW, HIDDEN)
if v.err then
  return v
end

local function last_rows(want)
  local first, final, cut_lo, cut_hi = view_span(v, view)
  local newest_first, need = {}, want
  for pos = final, first, -1 do
    local lo, hi = span_seqs(v, pos, last, first, final, cut_lo, cut_hi)
    need = walk_down(STREAM, HIDDEN, lo, hi, need, newest_first, redactions(v))
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

-- Append to `out` the runs of visible seqs from..hi (lo, hi pairs), up to `need` seqs
-- and `room` runs; return the seqs still needed, the runs left and the next seq to look
-- at.
local function runs_up(from, hi, need, room, out)
  local cursor = from
  while cursor <= hi and need > 0 and room > 0 do
    local hlo, hhi = hidden_at_or_below(HIDDEN, cursor)
    if hlo and hhi >= cursor then
      cursor = hhi + 1
    else
      local ceiling = math.min(hi, cursor + need - 1)
      local next_lo = hidden_above(HIDDEN, cursor)
      if next_lo and next_lo - 1 < ceiling then
        ceiling = next_lo - 1
      end
      out[#out + 1], out[#out + 2] = cursor, ceiling
      need, room, cursor = need - (ceiling - cursor + 1), room - 1, ceiling + 1
    end
  end
  return need, room, cursor
end

local function runs_after(want)
  local first, final, cut_lo, cut_hi = view_span(v, view)
  local above_seq, room = tonumber(above), tonumber(runs)
  local pos, from = tonumber(position) or first, tonumber(start)
  local need = want > 0 and want or math.huge
  local found = {}
  while pos <= final and need > 0 and room > 0 do
    local lo, hi = span_seqs(v, pos, last, first, final, cut_lo, cut_hi)
    local cursor
    need, room, cursor = runs_up(math.max(lo, above_seq + 1, from + 1), hi, need, room, found)
    if cursor > hi then
      pos, from = pos + 1, 0
    else
      from = cursor - 1  -- stopped inside this segment: go on after the last seq taken
    end
  end
  return {v.version, last, found, pos <= final and 1 or 0, pos, from}
end

return guarded(function()
  if mode == 'count' then
    return {v.version, last, view_count(v, view, last), 0, 0, 0}
  elseif mode == 'last' then
    return last_rows(tonumber(limit))
  end
  return runs_after(tonumber(limit))
end)
