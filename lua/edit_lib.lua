-- edit_lib.lua: the edits of append.lua (docs/edits.md): retract, pop, archive, compact,
-- fork, attrs, trim and redact, each planned (checked) before the first write. Not a script of its
-- own: the loader puts it where append.lua says `-- @include edit_lib.lua`, after its
-- argument bindings (op, op_arg, entry, VIEW, HIDDEN, STREAM) and the checks that give
-- `last` (the log's last seq) and `n` (the messages of the call).
--
-- The functions an edit needs are defined only by a call that edits (edit_part() runs
-- only then): a plain append does not pay for them. The writes an edit plans (the rows
-- hidden, the view saved, the attributes set) follow in append.lua, after the XADDs.
local function edit_part()
-- @include view_lib.lua
  -- The plan reads the view a segment at a time (view_lib.lua), so an edit costs the rows
  -- it moves in or out of the view, not the view's length.

  local MAX_RETRACT = 256  -- seqs one retract may take: it stays a short call
  local MAX_TRIM = 10000  -- entries one trim may remove: it stays a short call (~10 ms)
  -- A trim or a redact rewrites the stream's tail (redact_lib.lua): the bytes it may move
  -- and the entries a stream node holds at most, from `rewrite` ("<bytes> <entries>": the
  -- log's max_rewrite_bytes and stream_node_entries; "": their defaults).
  local cap_text, node_text = string.match(rewrite, '^(%d+) (%d+)$')
  local REWRITE_MAX = tonumber(cap_text or '8388608')
  local NODE_ENTRIES = tonumber(node_text or '100')

  local function bad_edit(text)
    return {err = 'MSGLOG_BADEDIT ' .. text}
  end

  local function entry_bytes(e)  -- an entry's ID, field names and values
    local size = #e[1]
    for _, value in ipairs(e[2]) do
      size = size + #value
    end
    return size
  end

  local AGE_REWRITE_MAX = 65536  -- what a trim by age may rewrite: the append stays short

  -- The entries from `from` (an XRANGE start) to the stream's end but `skip` (an ID), which
  -- a rewrite adds again, or, when they and `extra` bytes (the call's own entries) are over
  -- `cap`, nil and their size so far. Read a step at a time, each step sized by the
  -- largest entry seen so that it stays within the cap: a refusal reads about the cap.
  local function tail_from(from, skip, extra, cap)
    local tail, size, biggest, step = {}, extra, 1, 16
    while true do
      local page = redis.call('XRANGE', STREAM, from, '+', 'COUNT', step)
      for _, e in ipairs(page) do
        if e[1] ~= skip then
          local bytes = entry_bytes(e)
          size, biggest = size + bytes, math.max(biggest, bytes)
          tail[#tail + 1] = e
        end
      end
      if size > cap then
        return nil, size
      end
      tail.upto = page[#page] and page[#page][1] or tail.upto  -- the last entry read
      if #page < step then
        return tail, size
      end
      from = '(' .. tail.upto
      step = math.max(1, math.min(1000, math.floor((cap - size) / biggest)))
    end
  end

  local function too_big(what, size)
    return {err = 'MSGLOG_TOOBIG ' .. what .. ' would rewrite more than ' .. int(REWRITE_MAX) ..
      ' bytes of the stream (max_rewrite_bytes; at least ' .. int(size) .. ')'}
  end

  -- A rewrite deletes entries (XDEL) and moves the stream's last ID back (XSETID): a user
  -- the ACL refuses either is refused before anything is written (Redis 7+).
  local function may_rewrite()
    return not redis.acl_check_cmd or (redis.acl_check_cmd('XDEL', STREAM, '0-1') and
      redis.acl_check_cmd('XSETID', STREAM, '0-1'))
  end

  -- Whether seq s was redacted: its row is in the view hash, not the stream.
  local function is_redacted(s)
    return redis.call('HEXISTS', VIEW, 'r:' .. int(s)) == 1
  end

  -- An error unless seq s is a row of the view: a message, not hidden, in a segment.
  local function check_row(v, s, what)
    what = what .. ' ' .. int(s)  -- exact: '..' would print 1e+14
    if s < 1 or s > last then
      return bad_edit(what .. ' is not in the log (last seq ' .. int(last) .. ')')
    end
    if is_hidden(HIDDEN, s) or not lookup(v, s) then
      return bad_edit(what .. ' is not in the view: an edit entry, or already ' ..
        'retracted or compacted away')
    end
    local found = redis.call('XRANGE', STREAM, s, s)  -- "<s>-0" to "<s>-<max>"
    if not found[1] and not is_redacted(s) then  -- a redacted row lives in the view hash
      return bad_edit(what .. ' is missing from the stream (deleted by hand?)')
    end
    return nil
  end

  -- Whether row a comes before row b in the view (both in a segment).
  local function before(v, a, b)
    local pa, pb = lookup(v, a), lookup(v, b)
    return pa < pb or (pa == pb and a < b)
  end

  -- The rows from the view's start, or after row `after`, up to and including row `upto`.
  local function rows_through(v, upto, after)
    local first, cut_lo = v.front, nil
    if after then
      first, cut_lo = lookup(v, after), after + 1
    end
    local final = lookup(v, upto)
    return count_span(v, last, first, final, cut_lo, upto)
  end

  -- The segments after a compaction through `through` (nil: everything; 0: nothing) whose
  -- entry is seq c, followed by its k messages: those first, then what followed `through`.
  -- Only the ends of the view change: the segments compacted away at the front, the
  -- compaction's at the front, the open one at the back.
  local function compact_segments(v, through, c, k)
    if through == nil then
      for pos = v.front, v.back do
        seg_drop(v, pos)
      end
      v.front = v.back + 1  -- empty
    elseif through ~= 0 then
      local at = lookup(v, through)
      for pos = v.front, at - 1 do
        seg_drop(v, pos)
      end
      local seg = seg_at(v, at)
      v.front = at
      if seg[2] == nil or through < seg[2] then
        seg_set(v, at, through + 1, seg[2])
      else
        seg_drop(v, at)
        v.front = at + 1
      end
    end
    if v.front <= v.back then  -- the open run ends before this entry (or goes, if empty)
      local open = seg_at(v, v.back)
      if c - 1 >= open[1] then
        seg_set(v, v.back, open[1], c - 1)
      else
        seg_drop(v, v.back)
        v.back = v.back - 1
      end
    end
    if k > 0 then
      v.front = v.front - 1
      v.back = math.max(v.back, v.front)
      seg_set(v, v.front, c + 1, c + k)
    end
    local tail = v.front <= v.back and seg_at(v, v.back) or nil
    if tail and (tail[2] == c + k or (k == 0 and tail[2] == c - 1)) then
      seg_set(v, v.back, tail[1], nil)  -- nothing visible in between (the entry is hidden)
    else
      v.back = v.back + 1
      seg_set(v, v.back, c + k + 1, nil)
    end
  end

  -- A row leaves the view: the counts follow.
  local function remove_row(v, s)
    v.total = v.total - 1
    if v.archived and lookup(v, v.archived) and not before(v, v.archived, s) then
      v.archivedrows = v.archivedrows - 1
    end
  end

  local function plan_retract(v)
    local seqs, seen = {}, {}
    for text in string.gmatch(op_arg, '%d+') do
      local s = tonumber(text)
      if #seqs == MAX_RETRACT then
        return bad_edit('retract: more than ' .. MAX_RETRACT .. ' seqs in one call')
      end
      if seen[s] then
        return bad_edit('retract: seq ' .. int(s) .. ' is given twice')
      end
      local problem = check_row(v, s, 'retract: seq')
      if problem then
        return problem
      end
      seqs[#seqs + 1], seen[s] = s, true
    end
    for _, s in ipairs(seqs) do
      remove_row(v, s)
    end
    return {'{"op":"retract","seqs":[' .. op_arg .. ']}', v, false, seqs}
  end

  local function plan_pop(v)
    local found = {}
    for pos = v.back, v.front, -1 do
      local lo, hi = seg_seqs(v, pos, last)
      if walk_down(STREAM, HIDDEN, lo, hi, 1, found, redactions(v)) == 0 then
        break
      end
    end
    if not found[1] then
      return nil
    end
    local s = tonumber(string.match(found[1][1], '^(%d+)'))
    remove_row(v, s)
    return {'{"op":"retract","seqs":[' .. int(s) .. ']}', v, false, {s}, found[1]}
  end

  local function plan_archive(v)
    local w = tonumber(op_arg)
    local problem = check_row(v, w, 'archive: seq')
    if problem then
      return problem
    end
    local after = v.archived and lookup(v, v.archived) and v.archived
    if after and not before(v, after, w) then
      return bad_edit('archive: seq ' .. int(w) .. ' is not after the archive watermark (seq ' ..
        int(after) .. '): the watermark only moves forward')
    end
    v.archivedrows = (after and v.archivedrows or 0) + rows_through(v, w, after or nil)
    v.archived = w
    return {'{"op":"archive","through":' .. int(w) .. '}', v, false, {}}
  end

  -- compact, or fork: a compaction of everything on an empty log
  local function plan_compact(v)
    local through = nil
    if op_arg ~= 'end' then
      through = tonumber(op_arg)
      if through ~= 0 then
        local problem = check_row(v, through, 'compact: seq')
        if problem then
          return problem
        end
      end
    end
    local removed = 0
    if through == nil then
      removed = v.total
    elseif through ~= 0 then
      removed = rows_through(v, through)
    end
    local watermark = v.archived and lookup(v, v.archived)
    if v.archived and (through == nil or (through ~= 0 and watermark and
        not before(v, through, v.archived))) then
      v.archived, v.archivedrows = nil, nil  -- the watermark row is replaced: none archived
    elseif watermark then  -- rows before the watermark replaced: their messages archived
      v.archivedrows = v.archivedrows - removed + n
    end
    v.total = v.total - removed  -- the rows up to this entry (its messages follow)
    compact_segments(v, through, last + 1, n)
    local marker = entry  -- a fork's: built by the client
    if op == 'compact' then
      local what = through and ('"through":' .. int(through) .. ',') or ''  -- none: everything
      marker = '{"op":"compact",' .. what .. '"count":' .. n .. '}'
    end
    return {marker, v, false, {}}
  end

  -- The view rows up to seq `through` (the rows a trim takes out of the view), and those
  -- of them up to the archive watermark: one step per segment starting at or below it and
  -- per hidden range in it.
  local function rows_up_to(v, through)
    local positions = {}
    if v.form == 'new' then
      for _, member in ipairs(redis.call('ZRANGEBYSCORE', HIDDEN, int(-through), '(0')) do
        positions[#positions + 1] = tonumber(string.match(member, '^@(%-?%d+)$') or '')
      end
    else
      for pos = v.front, v.back do
        positions[#positions + 1] = pos
      end
    end
    local wpos = v.archived and lookup(v, v.archived)
    local rows, archived = 0, 0
    for _, pos in ipairs(positions) do
      if not pos then
        fail(bad_view(HIDDEN, 'holds a member that is not a segment'))
      end
      local lo, hi = seg_seqs(v, pos, last)
      if lo <= through then
        local k = count_visible(HIDDEN, lo, math.min(hi, through))
        rows = rows + k
        if wpos and pos < wpos then
          archived = archived + k
        elseif wpos and pos == wpos then
          archived = archived + count_visible(HIDDEN, lo, math.min(hi, through, v.archived))
        end
      end
    end
    return rows, archived
  end

  -- trim: every entry up to seq `through` (a message) leaves the physical log (append.lua
  -- removes them after the checks); here, the checks and the view: those rows leave it.
  local function plan_trim(v)
    local through = tonumber(op_arg)
    local first = tonumber(redis.call('HGET', VIEW, 'first') or '1')
    local what = 'trim: seq ' .. int(through)
    if not first then
      return bad_view(VIEW, 'holds a first seq that is not a seq')
    end
    if through < first then
      return bad_edit(what .. ' is already trimmed (the log starts at seq ' .. int(first) ..
        '): a trim only moves forward')
    end
    if through > last then
      return bad_edit(what .. ' is not in the log (last seq ' .. int(last) .. ')')
    end
    if through - first + 1 > MAX_TRIM then
      return bad_edit(what .. ' would remove ' .. int(through - first + 1) .. ' entries, more ' ..
        'than ' .. MAX_TRIM .. ' in one call: trim in steps')
    end
    local found = redis.call('XRANGE', STREAM, int(through), int(through))
    if not found[1] and not is_redacted(through) then
      return bad_edit(what .. ' is missing from the stream (deleted by hand?)')
    end
    local fields = found[1] and found[1][2] or {}  -- a redacted row: a message
    for i = 1, #fields - 1, 2 do
      if fields[i] == 'edit' then
        return bad_edit(what .. ' is an edit entry: trim through a message')
      end
    end
    -- XTRIM runs after the first writes: a user the ACL refuses it is refused here, before
    -- anything is written (Redis 7+; acl_rules(deletions=True) grants it).
    if redis.acl_check_cmd and not (redis.acl_check_cmd('XTRIM', STREAM, 'MINID', '1') and
        may_rewrite()) then
      return {err = 'NOPERM this user has no permissions to trim (XTRIM, XDEL, XSETID) ' ..
        STREAM .. ': see acl_rules(deletions=True)'}
    end
    -- XTRIM only marks the trimmed entries of the node holding `through` deleted: their
    -- bytes stay until the node goes. So the entries kept after them are rewritten (all
    -- of them: an entry can only be added after the last), within the cap. A trim by age
    -- rewrites at most AGE_REWRITE_MAX, else trims without the rewrite: an append is
    -- neither refused nor made long for its retention.
    local marker = '{"op":"trim","through":' .. int(through) .. '}'
    local extra = #marker + 40
    for i = messages_from, #ARGV do
      extra = extra + #ARGV[i] + 40
    end
    local cap = by_age and math.min(REWRITE_MAX, AGE_REWRITE_MAX) or REWRITE_MAX
    local tail, size = tail_from(int(through + 1), nil, extra, cap)
    if not tail and not by_age then
      return too_big(what, size)
    end
    local removed, archived = rows_up_to(v, through)
    v.total = v.total - removed
    if v.archived and lookup(v, v.archived) then
      v.archivedrows = v.archivedrows - archived
    end
    return {marker, v, false, {}, nil, {first, through, tail and {int(through + 1), tail}}}
  end

  -- redact: the message at seq op_arg leaves the stream (XDEL, in append.lua) and its
  -- replacement (the client's JSON after the seq, or a marker built here) goes to the
  -- view hash as field "r:<seq>" = "<at> <row JSON>" (docs/lifecycle.md). The view's rows
  -- and counts do not change: the row stays where it was, redacted.
  local function plan_redact(v)
    local s_text, replacement = string.match(op_arg, '^(%d+) (.*)$')
    local s = tonumber(s_text)
    local what = 'redact: seq ' .. int(s)
    local first = tonumber(redis.call('HGET', VIEW, 'first') or '1')
    if not first then
      return bad_view(VIEW, 'holds a first seq that is not a seq')
    end
    if s < 1 or s > last then
      return bad_edit(what .. ' is not in the log (last seq ' .. int(last) .. ')')
    end
    if s < first then
      return bad_edit(what .. ' is trimmed (the log starts at seq ' .. int(first) .. ')')
    end
    if is_redacted(s) then
      return bad_edit(what .. ' is already redacted')
    end
    local found = redis.call('XRANGE', STREAM, int(s), int(s))
    if not found[1] then
      return bad_edit(what .. ' is missing from the stream (deleted by hand?)')
    end
    local id, fields = found[1][1], found[1][2]
    local at, body = string.match(id, '^%d+%-(%d+)$'), nil
    for i = 1, #fields - 1, 2 do
      if fields[i] == 'edit' then
        return bad_edit(what .. ' is an edit entry: redact a message')
      elseif fields[i] == 'msg' then
        body = fields[i + 1]
      elseif fields[i] == 'at' then
        at = fields[i + 1]  -- an earlier version's entry: the time in a field
      end
    end
    if not body or not at then
      return bad_edit(what .. ' is not an entry this library wrote')
    end
    -- XDEL runs after the first writes: a user the ACL refuses it is refused here, before
    -- anything is written (Redis 7+; acl_rules(deletions=True) grants it).
    if not may_rewrite() then
      return {err = 'NOPERM this user has no permissions to redact (XDEL, XSETID) in ' ..
        STREAM .. ': see acl_rules(deletions=True)'}
    end
    -- XDEL only marks an entry deleted in its node: the node goes when all its entries do.
    -- It holds at most NODE_ENTRIES, so from NODE_ENTRIES - 1 entries before this one, the
    -- stream is rewritten to its end (redact_lib.lua), within the cap.
    local node = redis.call('XREVRANGE', STREAM, id, '-', 'COUNT', NODE_ENTRIES)
    local from = node[#node][1]
    local tail, size = tail_from(from, id, #entry + 40, REWRITE_MAX)
    if not tail then
      return too_big(what, size)
    end
    if replacement == '' then  -- the marker: the role (and a tool result's call id) kept
      local role = string.match(body, '^{"role":"(%a+)"') or 'user'
      local call_id = role == 'tool' and string.match(body, '"toolCallId":"([^"\\]*)"')
      replacement = '{"role":"' .. role .. '","content":"[redacted]"' ..
        (call_id and (',"toolCallId":"' .. call_id .. '"') or '') .. ',"redacted":true}'
    end
    return {entry, v, false, {}, nil, nil, {s, id, body, at .. ' ' .. replacement, from, tail}}
  end

  -- The edit to make: {marker, view state, false, seqs to hide, popped, trim, redact}; nil
  -- for a pop of an empty view; or an error reply. (trim: {first seq, through}, the
  -- entries to remove, and the rewrite {from, tail} unless one by age is over the cap;
  -- redact: {seq, entry ID, original body, the view hash's value, from, tail}.)
  local function plan_edit()
    local v = open_view(VIEW, HIDDEN)
    if v.err then
      return v
    end
    ensure_counts(v, last)
    v.total = v.rows + last - v.version  -- the rows of the view now; saved as "rows"
    if op == 'attrs' then
      return {entry, v, false, {}}  -- changes attributes only: the view stays
    elseif op == 'retract' then
      return plan_retract(v)
    elseif op == 'pop' then
      return plan_pop(v)
    elseif op == 'archive' then
      return plan_archive(v)
    elseif op == 'trim' then
      return plan_trim(v)
    elseif op == 'redact' then
      return plan_redact(v)
    end
    return plan_compact(v)
  end

  return {plan = plan_edit, save = save_view, hide = hide, guarded = guarded}
end
