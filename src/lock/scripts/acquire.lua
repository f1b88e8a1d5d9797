-- Takes the lock, or a place in its queue, in one atomic step.
-- KEYS: the lock's keys (see common/call.lua). ARGV: protocol.txt, call acquire: the contender (see
-- contender()), then the tokens of enclosing holds.
-- Returns {1, more, push, fence, slot} when taken; {2, more, push, fence, pttl, i} when the
-- enclosing hold i (1 for the first given) owns it (re-entry); {0, more, push, pttl, host, pid,
-- cmd, since, now, queue length, lingering, overrun, job, note} when busy (not queued); {4, more,
-- push} when dead entries were removed and the budget ran out before a decision (call again);
-- {6, more, push, tick, host, at, now, own} when its --once-per tick ran (see tick_refusal); or
-- the waiting reply.
local a = A.acquire

-- The common cases first, in the fewest commands: an exclusive contender (no enclosing holds, no
-- --once-per, no --min-hold, options none or queue) that finds the lock free with nothing else there
-- (no queue, shared holder, semaphore, notice, nor :info: a holder to record as expired, a
-- lingering one), or, without the queue, finds another holder and nothing else. They write what
-- the full path below writes in those cases, by the same functions (write_info, event); anything
-- else goes there, having written nothing (what it read of the lock's key is kept).
local options = arg(a.options)
if #ARGV == a.enclosing - 1 and arg(a.mode) == 'x' and arg(a.tick) == '' and (options == '' or options == OPT.queue) and
   (arg(a.min_hold) == '0' or arg(a.min_hold) == '') then
  local token = arg(a.token)
  -- (How many of the queue's, the shared holders', the semaphore's and the notices' keys, and
  -- :info, exist.)
  local others = redis.call('EXISTS', K.q, K.wl, K.h, K.gone, K.sem, K.free, K.info)
  -- Nothing there: SET NX takes the lock if its key is free too (any key there, of any type, is
  -- left as it was).
  if others == 0 and redis.call('SET', K.lock, token, 'NX', 'PX', arg(a.ttl)) then
    C.quiet = true
    local id = id_of(token)
    C.caller = id
    -- (Another program's data at :fence: the lock is given back, free as it was, and the error
    -- returned, as the full path returns it before it takes anything.)
    local counted = redis.pcall('INCR', K.fence)
    if type(counted) == 'table' then
      redis.call('DEL', K.lock)
      return redis.error_reply('RLOCKFOREIGN fence')
    end
    local fence = next_fence(counted)
    local d = contender(a)
    write_info(id, d, fence, tonumber(d.ttl), 1, '')
    event(EVENT.acquired, who_event(d.who, {EV.fence, fence, EV.waited, '0', EV.id, id}))
    return reply(CODE.taken, fence, '')
  end
  local value = redis.pcall('GET', K.lock)
  if type(value) ~= 'table' then C.lock_read, C.lock_value = true, value end
  if others == 0 then C.quiet = true end
  -- Another holder, and nothing else but its :info (the one key counted, if HMGET found it).
  if options == '' and type(value) == 'string' and value ~= token and lock_value_ours(value) and
     (others == 0 or (others == 1 and C.view.info[INFO.id])) then
    C.quiet = true
    local id = id_of(token)
    C.caller = id
    local view = C.view
    local holder, lingering = view.who, view.info[INFO.lingering] == '1'
    event(EVENT.busy, who_event(record_args(RECORD.who, a.who),
                                {EV.id, id, EV.holder_host, holder.host, EV.holder_pid, holder.pid, EV.holder_cmd,
                                 holder.cmd, EV.lingering, lingering and '1' or '0'}))
    return reply(CODE.busy, view.pttl, holder.host, holder.pid, holder.cmd, view.info[INFO.since] or '', NOW, 0,
                 lingering and 1 or 0, '', holder.job, holder.note)
  end
end

local d, id, limit, bad = prologue(a)
if bad then return bad end

-- Our own token: an earlier attempt whose answer was lost took it, or queued it.
local ours, fence, slot, claimed = held_by(d.token, id, d.mode)
if ours then
  if not claimed then claim(id, d) end
  set_expiries()
  return reply(CODE.taken, fence, slot)
end
if not quiet() and redis.call('ZSCORE', K.q, id) then
  redis.call('ZADD', K.wl, NOW + G.lease, id)
  set_expiries()
  return waiting(id)
end

-- Re-entry: the lock is held by an enclosing hold of the caller's process tree.
local owner = #ARGV >= a.enclosing and lock_value()
for i = a.enclosing, #ARGV do
  local tok = arg(i)
  local hid = id_of(tok)
  if (owner and owner == tok) or (not owner and redis.call('HGET', K.hi, hid .. '.' .. HOLDER.token) == tok and
                                  redis.call('ZSCORE', K.h, hid)) then
    -- A shared hold cannot become exclusive inside itself: the inner request would wait for ever.
    if d.mode == 'x' and not owner then return refuse(redis.error_reply('RLOCKUPGRADE shared hold')) end
    local f = owner and redis.call('HGET', K.info, INFO.fence) or redis.call('HGET', K.hi, hid .. '.' .. HOLDER.fence)
    local pttl = owner and redis.call('PTTL', K.lock) or
                 math.floor(tonumber(redis.call('ZSCORE', K.h, hid)) - NOW)
    return reply(CODE.reentered, tonumber(f or '0'), pttl, i - a.enclosing + 1)
  end
end

local done = tick_refusal(id, d)
if done then return reply(CODE.tick_done, unpack(done)) end

-- Nobody may jump the queue: the lock is taken at once only when no live waiter waits for it.
advance()
if C.more then
  set_expiries()
  return reply(CODE.again)
end
if (quiet() or redis.call('ZCARD', K.q) == 0) and can_take(d.mode, limit) then
  d.joined = NOW
  fence, slot = grant(id, d, true, limit)
  if not has(d.options, OPT.redlock) then
    event(EVENT.acquired, who_event(d.who, {EV.fence, fence, EV.waited, '0', EV.id, id, EV.tick, d.tick or false,
                                            EV.period, d.period or false}))
  end
  set_expiries()
  return reply(CODE.taken, fence, slot)
end
-- A preemptor is served next: at the front of the queue (behind earlier preemptors), whoever
-- holds the lock; a --preemptible holder is asked to stop. Without the queue (-n), it still asks
-- a --preemptible holder when no other preemptor waits, and waits for it (the caller bounds that).
local preemptor = has(d.options, OPT.preempt) and d.mode == 'x'
local queue = has(d.options, OPT.queue)
if not queue and preemptor and lock_value() and redis.call('HGET', K.info, INFO.preemptible) == '1' and
   not first_preemptor() then
  queue = true
end
if queue then
  enqueue(id, d, preemptor)
  if preemptor and preempt(d, id) then
    advance()
    ours, fence, slot = held_by(d.token, id, d.mode)
    if ours then
      claim(id, d)
      set_expiries()
      return reply(CODE.taken, fence, slot)
    end
  end
  set_expiries()
  return waiting(id)
end
tidy_limit()
local who, since, lingering, left = holder_view(current_view())
local queued = quiet() and 0 or redis.call('ZCARD', K.q)
-- (--once-per: a run of the tick before still holds the lock, and this tick is skipped.)
local overrun = tick_overrun(d)
event(overrun == '' and EVENT.busy or EVENT.overrun,
      who_event(d.who, {EV.id, id, EV.holder_host, who.host, EV.holder_pid, who.pid, EV.holder_cmd, who.cmd,
                        EV.lingering, lingering, EV.tick, d.tick or false, EV.period, d.period or false}))
set_expiries()
return reply(CODE.busy, left, who.host, who.pid, who.cmd, since, NOW, queued, lingering, overrun, who.job, who.note)
