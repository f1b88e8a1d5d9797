-- Shared by every lock script (see call.lua): what waiters see, and the contender.

-- ---- What waiters see.

-- The holder as the others see it: its who (record who: host, pid, user, cmd, job, note; all
-- empty when nobody holds it), since, lingering (0/1), ms until its lease (or the earliest of the
-- shared ones) ends, or -1.
--
-- view: what check_types read (current_view), when nothing the holder's view shows has been
-- written since.
local function holder_view(view)
  local value = lock_value()
  if value and view and view.value == value then
    local v = view.info
    return view.who, v[INFO.since] or '', v[INFO.lingering] == '1' and 1 or 0, view.pttl
  end
  if value then
    local v = hmget_list(K.info, with_record(RECORD.who, 'info', INFO.since, INFO.lingering))
    return record_from(RECORD.who, 'info', v), v[INFO.since] or '', v[INFO.lingering] == '1' and 1 or 0,
           redis.call('PTTL', K.lock)
  end
  local first = redis.call('ZRANGE', K.h, 0, 0, 'WITHSCORES')
  if first[1] then
    local v = hmget_of(K.hi, first[1], with_record(RECORD.who, 'holder', HOLDER.since, HOLDER.lingering))
    return record_from(RECORD.who, 'holder', v), v[HOLDER.since] or '', v[HOLDER.lingering] == '1' and 1 or 0,
           math.max(0, math.floor(tonumber(first[2]) - NOW))
  end
  return record_from(RECORD.who, 'info', {}), '', 0, -1
end

-- The epoch the caller's view belongs to, as this full step leaves it (see epoch_due): a new one
-- after a change of the view, else the one K.ep has (with the head named after a hand-off, unless
-- it is the caller, whose full step this is).
local function view_epoch()
  local c = C
  local how = c.change
  c.change = nil
  local epoch, head = nil, nil
  if how ~= 'view' then epoch, head = current_epoch() end
  if not epoch then epoch, head = c.now_us, nil end
  if how == 'due' then head = redis.call('ZRANGE', K.q, 0, 0)[1] end
  if head == c.caller then head = nil end
  set_epoch(epoch, epoch_due(), head)
  return epoch
end

-- What a waiter needs to go on waiting: {3, more, push, position, queue length, since (server
-- ms), now, holder host, pid, cmd, holder since, lingering, ms left of the holder's lease (-1:
-- none; the head waits no longer than that), the epoch (view_epoch), the arrival, the holder's
-- job and note, then the ids whose mailboxes to watch}. The watched id is recorded, so that a
-- grant after it was dropped pushes the waiter's own mailbox. A preemptor does not watch a
-- --preemptible exclusive holder that has not yet seen its request, as its steps push that
-- mailbox: its grant pushes its own.
local function waiting(id)
  local rank = redis.call('ZRANK', K.q, id)
  local watch = {}
  local view = current_view()
  local who, since, lingering, left = holder_view(view)
  if rank > 0 then
    watch[1] = redis.call('ZRANGE', K.q, rank - 1, rank - 1)[1]
    left = -1
  else
    local holder = lock_value() and ((view and view.info[INFO.id]) or redis.call('HGET', K.info, INFO.id))
    if holder and has(redis.call('HGET', K.w, id .. '.' .. WAITER.options), OPT.preempt) then
      local asked = hmget(K.info, INFO.preemptible, INFO.preempt_seen)
      if asked[INFO.preemptible] == '1' and asked[INFO.preempt_seen] ~= '1' then holder = nil end
    end
    if holder then watch[#watch + 1] = holder end
    for _, h in ipairs(redis.call('ZRANGE', K.h, 0, 63)) do watch[#watch + 1] = h end
  end
  redis.call('HSET', K.w, id .. '.' .. WAITER.watching, watch[1] or '')
  local epoch = view_epoch()
  local out = reply(CODE.waiting)
  local at = AT.waiting
  out[at.position], out[at.queued] = rank + 1, redis.call('ZCARD', K.q)
  out[at.since], out[at.now] = redis.call('HGET', K.w, id .. '.' .. WAITER.since) or '', NOW
  out[at.host], out[at.pid], out[at.cmd], out[at.held_since] = who.host, who.pid, who.cmd, since
  out[at.lingering], out[at.left] = lingering, left
  out[at.epoch] = epoch
  out[at.arrival] = C.joined and string.format('%.0f', C.joined) or ''
  out[at.job], out[at.note] = who.job, who.note
  for i, x in ipairs(watch) do out[at.watch + i - 1] = x end
  return out
end

-- ---- The contender of acquire and wait.

-- The contender its arguments describe (a: A.acquire or A.wait; protocol.txt: call acquire, call
-- wait): its tick is "PERIOD AGE" in ms, AGE how long ago it fired on its own clock (negative in
-- tests), and d.tick the server's time it fired then (see ticks_after).
local function contender(a)
  local d = {token = arg(a.token), ttl = arg(a.ttl), who = record_args(RECORD.who, a.who), mode = arg(a.mode),
             options = arg(a.options), min_hold = arg(a.min_hold)}
  local period, age = string.match(arg(a.tick) or '', '^(%d+) (%-?%d+)$')
  if period and tonumber(period) > 0 then d.period, d.tick = tonumber(period), NOW - tonumber(age) end
  return d, tonumber(arg(a.limit))
end

-- What acquire and wait start with: the contender, its id and limit, once the lock's keys hold
-- rlock's data and its kind of hold fits; else the error to return.
local function prologue(a)
  local d, limit = contender(a)
  local bad = check_types(d.token)
  if bad then return nil, nil, nil, bad end
  C.caller = id_of(d.token)
  bad = check_mode(d.mode, limit)
  return d, C.caller, limit, bad
end
