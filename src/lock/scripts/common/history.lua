-- Shared by every lock script (see call.lua): the history, the summary and their expiry.

-- ---- The history's expiry.

-- The history (K.log) and the summary (K.sum) expire HISTORY after the last event, give or take
-- its slack (keep, CFG.keep: the history plus a sixteenth of it, at most an hour): an event whose
-- keys are known to last that long already (history_until, from :info's hx, which the grant that
-- set it made true) does not set their expiries again. Each expiry set is keep, so that they only
-- ever move later: the keys last at least HISTORY, at most keep, after the last event. A key an
-- event creates gets its expiry then.
local function history_known(until_ms)
  local at = tonumber(until_ms or '')
  local c = C
  if at and (not c.history_until or at > c.history_until) then c.history_until = at end
end

local function history_kept()
  local c = C
  return c.history_until ~= nil and c.history_until >= NOW + G.history
end

local function keep_history_key(key)
  redis.call('PEXPIRE', key, G.keep)
end

-- Makes the history and the summary last at least HISTORY from now; returns until when (for hx).
local function keep_history()
  local c = C
  if not history_kept() then
    keep_history_key(K.log)
    keep_history_key(K.sum)
    c.history_until = NOW + tonumber(G.keep)
  end
  return c.history_until
end

-- ---- The history and the summary.

-- Keeps the lock's summary (K.sum), for rlock check and metrics, even without a history: a count
-- per kind of event (n.KIND); the last start (s, sh, si: when, host, id); the last end of a hold
-- (e, ek kind, eh host, ex exit status, ed ms held, ei id, eo outcome: how its holder said it
-- ended); the last success, a release (not forced) whose holder said it succeeded, outcome ok
-- (ok, okh, okx, okd); since then, the holds lost (sl: lost or expired) and the holds that ended
-- without success (sf: failures in a row; a preempted hold is neither). A hold given back unused
-- (returned) that was the last start puts the last start back to the start of the last hold that
-- ended (for an exclusive lock, the one before it). Fixed fields; it expires with the history.
-- Calls that only clean up after a failed attempt (summary off) leave it alone, and so does
-- another program's data at its key. at: the event's time (ms, a string), the one its history
-- entry has (the entry's id is taken when the XADD runs, a millisecond or so after the call's
-- clock was read). counted: the hold's end is in the summary's counts already (its expiry,
-- recorded by the next holder, and now its holder's own record of the loss): the last end takes
-- its details, the counts of holds do not move.
local function summarize(kind, ev, at, counted)
  if not G.summary then return end
  local count = redis.pcall('HINCRBY', K.sum, SUM.count .. kind, '1')
  if type(count) == 'table' then return end
  -- (The fields it reads, without a table of them: an event has a few; their names looked up
  -- once, not at each field.)
  local host, exit, held, by, id, outcome = '', '', '', '', '', ''
  local f_host, f_exit, f_held, f_by, f_id, f_outcome = EV.host, EV.exit, EV.held, EV.by, EV.id, EV.outcome
  for i = 1, #ev, 2 do
    local f = ev[i]
    if f == f_host then host = ev[i + 1] or ''
    elseif f == f_exit then exit = ev[i + 1] or ''
    elseif f == f_held then held = ev[i + 1] or ''
    elseif f == f_by then by = ev[i + 1] or ''
    elseif f == f_id then id = ev[i + 1] or ''
    elseif f == f_outcome then outcome = ev[i + 1] or '' end
  end
  if kind == EVENT.acquired then
    redis.call('HSET', K.sum, SUM.started, at, SUM.started_host, host, SUM.started_id, id)
  elseif kind == EVENT.returned then
    local v = hmget(K.sum, SUM.started_id, SUM.ended, SUM.ended_held, SUM.ended_host)
    if v[SUM.started_id] == id and id ~= '' then
      local ended, ended_held = tonumber(v[SUM.ended] or ''), tonumber(v[SUM.ended_held] or '') or 0
      if ended then
        redis.call('HSET', K.sum, SUM.started, string.format('%d', ended - ended_held), SUM.started_host,
                   v[SUM.ended_host] or '', SUM.started_id, '')
      else
        redis.call('HDEL', K.sum, SUM.started, SUM.started_host, SUM.started_id)
      end
    end
  elseif kind == EVENT.released or kind == EVENT.lost or kind == EVENT.preempted or kind == EVENT.expired then
    if kind == EVENT.released and outcome == OUTCOME.success and by == '' then
      redis.call('HSET', K.sum, SUM.ended, at, SUM.ended_kind, kind, SUM.ended_host, host, SUM.ended_exit, exit,
                 SUM.ended_held, held, SUM.ended_id, id, SUM.ended_outcome, outcome, SUM.success, at,
                 SUM.success_host, host, SUM.success_exit, exit, SUM.success_held, held, SUM.lost_since_success, '0',
                 SUM.failed_since_success, '0')
    else
      redis.call('HSET', K.sum, SUM.ended, at, SUM.ended_kind, kind, SUM.ended_host, host, SUM.ended_exit, exit,
                 SUM.ended_held, held, SUM.ended_id, id, SUM.ended_outcome, outcome)
      if not counted then
        if kind == EVENT.lost or kind == EVENT.expired then
          redis.call('HINCRBY', K.sum, SUM.lost_since_success, '1')
        end
        if kind ~= EVENT.preempted and outcome ~= OUTCOME.preempted then
          redis.call('HINCRBY', K.sum, SUM.failed_since_success, '1')
        end
      end
    end
  end
  -- (A count of 1: the key may be new.)
  if count == 1 or not history_kept() then keep_history_key(K.sum) end
end

-- How the end of the hold id was recorded, if it was: the kind of its end (released, lost,
-- preempted or expired), as the summary's last end or one of the history's last 16 events says.
local function recorded_end(id)
  local v = redis.pcall('HMGET', K.sum, SUM.ended_id, SUM.ended_kind)
  if type(v) == 'table' and not v.err and v[1] == id then return v[2] end
  if G.log_length == 0 then return nil end
  local entries = redis.pcall('XREVRANGE', K.log, '+', '-', 'COUNT', 16)
  if type(entries) ~= 'table' or entries.err then return nil end
  for _, entry in ipairs(entries) do
    local f, kind, who = entry[2], nil, nil
    for i = 1, #f, 2 do
      if f[i] == EV.kind then kind = f[i + 1] elseif f[i] == EV.id then who = f[i + 1] end
    end
    if who == id and (kind == EVENT.released or kind == EVENT.lost or kind == EVENT.preempted or
                      kind == EVENT.expired) then
      return kind
    end
  end
  return nil
end

-- Appends one event to the lock's history (0: no history). ev: field list (a value that is false,
-- or empty, is left out), the caller's to give: the event takes it (its pairs with a value are
-- moved to its front, the rest cleared, and sent as they are: no second list). The stream keeps
-- at least log_length events: MAXLEN ~ trims whole nodes of the stream (up to about 100 events
-- more), where an exact MAXLEN would cut inside a node on every append, at several times the
-- cost. counted: see summarize.
local function event(kind, ev, counted)
  local c = C
  if G.log_length == 0 then return summarize(kind, ev, c.now_arg, counted) end
  local n, last = 0, #ev
  for i = 1, last, 2 do
    local x = ev[i + 1]
    if x and x ~= '' then
      ev[n + 1], ev[n + 2] = ev[i], x
      n = n + 2
    end
  end
  for i = n + 1, last do ev[i] = nil end
  -- NOMKSTREAM: an XADD that would create the stream says so (nil), and is made again without it.
  local added = redis.pcall('XADD', K.log, 'NOMKSTREAM', 'MAXLEN', '~', G.log_length_arg, '*', EV.kind, kind,
                            unpack(ev, 1, n))
  if type(added) == 'table' then
    if added.err and not string.find(added.err, 'WRONGTYPE', 1, true) then
      added = false  -- a server without NOMKSTREAM (before 6.2)
    elseif added.err then
      error(added)
    end
  end
  if not added then
    added = redis.call('XADD', K.log, 'MAXLEN', '~', G.log_length_arg, '*', EV.kind, kind, unpack(ev, 1, n))
    keep_history_key(K.log)
  elseif not history_kept() then
    keep_history_key(K.log)
  end
  summarize(kind, ev, string.match(added, '^%d+') or c.now_arg, counted)
end

-- An event's fields for who: its record, then the pairs of more.
local function who_event(who, more)
  return RECORD.who.list.event_field(who, unpack(more))
end
