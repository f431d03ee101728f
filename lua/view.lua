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
-- ARGV[2]   "last": the view's last ARGV[3] rows; "after": up to ARGV[3] rows whose seq is
--           above ARGV[4], in view order, from position ARGV[5]/ARGV[6]; "count": the
--           number of rows
-- ARGV[3]   how many rows at most
-- ARGV[4]   "after" only: the seq the rows must be above
-- ARGV[5]   "after" only: the index of the segment (of this view) to start in
-- ARGV[6]   "after" only: the seq to start after in that segment (0: its start)
--
-- Returns {version, last_seq, rows_or_count, next_segment, next_seq}: the seq of the last
-- edit (0: none), the log's last seq, the rows ({id, fields} like XRANGE, in view order;
-- or the count), and for "after" where the next page starts (next_segment 0: the end).

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

local segments, edited = load_segments(KEYS[3])
if segments.err then
  return segments
end
local kind = redis.call('TYPE', KEYS[4])['ok']
if kind ~= 'none' and kind ~= 'zset' then
  return redis.error_reply('WRONGTYPE hidden ranges ' .. KEYS[4] .. ' is not a sorted set')
end
local version, archived = 0, nil
if edited then
  version = tonumber(redis.call('HGET', KEYS[3], 'version') or '0')
  archived = tonumber(redis.call('HGET', KEYS[3], 'archived') or '')
end
local ranges = view_segments(segments, ARGV[1], archived, last)
local want = tonumber(ARGV[3])

if ARGV[2] == 'count' then
  local total = 0
  for _, range in ipairs(ranges) do
    total = total + count_visible(KEYS[4], range[1], range[2])
  end
  return {version, last, total, 0, 0}
end

local rows = {}
if ARGV[2] == 'last' then
  local newest_first = {}
  local need = want
  for i = #ranges, 1, -1 do
    need = walk_down(KEYS[2], KEYS[4], ranges[i][1], ranges[i][2], need, newest_first)
    if need == 0 then
      break
    end
  end
  for i = #newest_first, 1, -1 do
    rows[#rows + 1] = newest_first[i]
  end
  return {version, last, rows, 0, 0}
end

local above = tonumber(ARGV[4])
local index, from = tonumber(ARGV[5]), tonumber(ARGV[6])
local need = want
while index <= #ranges and need > 0 do
  local start = math.max(ranges[index][1], above + 1, from + 1)
  local before = #rows
  need = walk_up(KEYS[2], KEYS[4], start, ranges[index][2], need, rows)
  if need == 0 and #rows > before then
    from = tonumber(string.match(rows[#rows][1], '^(%d+)'))
    if from >= ranges[index][2] then
      index, from = index + 1, 0
    end
  else
    index, from = index + 1, 0
  end
end
if index > #ranges then
  index = 0
end
return {version, last, rows, index, from}
