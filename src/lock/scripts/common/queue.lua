-- Shared by every lock script (see call.lua): fences, mailboxes and the queue's entries.

-- ---- Fences, mailboxes and the queue's entries.

-- The next fencing token. A missing counter (never used, idle past HISTORY, or lost to a restart)
-- starts from the server's clock in microseconds: above every value it handed out before.
--
-- One INCR in the common case. The counter is set (with its expiry) when INCR created it. Its
-- value tells its age: it started from the clock and goes up by one a grant, far slower than the
-- clock. Its expiry is set again only when it is older than HISTORY / 2 by that measure, or ahead
-- of the clock (a Redlock merge from a master whose clock is ahead, a clock stepped back), or set
-- by hand: it is kept at least HISTORY / 2 past its last use (a missing one resumes above anyway).
-- counted: what the caller's INCR gave (a number), if it sent it.
local function next_fence(counted)
  local fence = counted or redis.pcall('INCR', K.fence)
  -- Another program's data (a hash, a word): say which of the lock's keys it is.
  if type(fence) == 'table' and fence.err then error(refuse(redis.error_reply('RLOCKFOREIGN fence'))) end
  local now_us = tonumber(C.now_us)
  local history = G.history
  if fence == 1 then
    fence = now_us + 1
    redis.call('SET', K.fence, string.format('%.0f', fence), 'PX', history)
  elseif fence > now_us or now_us - fence > history * 500 then
    redis.call('PEXPIRE', K.fence, history)
  end
  return fence
end

local function wake(mailbox)
  redis.call('LPUSH', mailbox, '1')
  redis.call('LTRIM', mailbox, 0, 0)
  redis.call('PEXPIRE', mailbox, G.mailbox)
end

local preempt_next  -- asks the holder to stop for the first preemptor still waiting (defined below)

-- Whether id waits in the queue and is alive (its lease there has not run out).
local function still_waiting(id)
  local lease = redis.call('ZSCORE', K.wl, id)
  return lease and tonumber(lease) > NOW
end

-- Takes waiter id out of the queue; granted: to hand it the lock (waiters see only a new head,
-- see changed). A preemptor that leaves withdraws its request to the holder, unless the holder has
-- seen it (ps: it is stopping); the next preemptor, if any, asks instead.
local function remove_waiter(id, granted)
  changed(granted and 'due' or 'view')
  redis.call('ZREM', K.q, id)
  redis.call('ZREM', K.wl, id)
  redis.call('ZREM', K.sq, id)
  redis.call('HDEL', K.w, unpack(fields_of(id, WAITER_ALL)))
  -- (A clean :info names no preemptor.)
  if C.info_clean then return end
  local asked = hmget(K.info, INFO.preemptor, INFO.preempt_seen)
  if asked[INFO.preemptor] == id and asked[INFO.preempt_seen] ~= '1' then
    redis.call('HDEL', K.info, INFO.preempt_by, INFO.preemptor)
    changed('view')
    preempt_next()
  end
end

local function semaphore_limit()
  return tonumber(redis.call('HGET', K.sem, SEM.limit) or '1')
end

local function take_slot(limit)
  local given = redis.call('ZPOPMIN', K.free)
  if given[1] then return given[1] end
  local n = redis.call('HINCRBY', K.sem, SEM.next, 1)
  if n <= limit then return tostring(n) end
  return ''
end

local function remove_holder(id)
  changed('view')
  redis.call('ZREM', K.h, id)
  local slot = redis.call('HGET', K.hi, id .. '.' .. HOLDER.slot)
  if slot and slot ~= '' then
    redis.call('ZADD', K.free, slot, slot)
    wrote('slots')
  end
  redis.call('HDEL', K.hi, unpack(fields_of(id, HOLDER_ALL)))
end

local function holder_event(kind, id, extra)
  local v = hmget_of(K.hi, id, with_record(RECORD.who, 'holder', HOLDER.fence, HOLDER.since))
  local ev = who_event(record_from(RECORD.who, 'holder', v), {EV.fence, v[HOLDER.fence], EV.id, id})
  if v[HOLDER.since] then put(ev, {EV.held, tostring(NOW - tonumber(v[HOLDER.since]))}) end
  event(kind, put(ev, extra or {}))
end

-- The exclusive holder whose lease ran out without a release (it died, or was cut off): its
-- lock is handed on; the history says so. `info` outlives the lock for that.
local function note_expired()
  local c = C
  if c.noted then return end
  if lock_value() then return end
  c.noted = true
  local v = hmget_list(K.info, with_record(RECORD.who, 'info', INFO.id, INFO.fence, INFO.since, INFO.expires,
                                           INFO.claimed, INFO.lingering, INFO.preempt_by, INFO.preemptor,
                                           INFO.preempt_seen, INFO.keeper, INFO.watched, INFO.tick,
                                           INFO.tick_period))
  if not v[INFO.id] then
    -- (What a grant does not overwrite: none of it is there, so the grant need not delete :info.)
    c.info_clean = not (v[INFO.lingering] or v[INFO.preempt_by] or v[INFO.preemptor] or v[INFO.preempt_seen] or
                        v[INFO.keeper] or v[INFO.watched] or v[INFO.tick])
    return
  end
  if v[INFO.claimed] == '1' and v[INFO.lingering] ~= '1' then
    local held = ''
    if v[INFO.since] and v[INFO.expires] then held = tostring(tonumber(v[INFO.expires]) - tonumber(v[INFO.since])) end
    event(EVENT.expired, who_event(record_from(RECORD.who, 'info', v),
                                   {EV.fence, v[INFO.fence], EV.held, held, EV.id, v[INFO.id], EV.tick, v[INFO.tick],
                                    EV.period, v[INFO.tick_period]}))
  end
  redis.call('DEL', K.info)
  wrote('info', true)
end

-- Removes dead entries, at most the budget: waiters whose lease ran out, holders whose lease ran
-- out (a claimed one's end goes into the history), and notices nobody came for.
local function reap()
  local c = C
  if c.reaped or quiet() then return end
  if c.work >= BUDGET then c.more = true return end
  for _, id in ipairs(redis.call('ZRANGEBYSCORE', K.wl, '-inf', NOW, 'LIMIT', 0, BUDGET - c.work)) do
    spend()
    remove_waiter(id)
  end
  if c.work >= BUDGET then c.more = true return end
  for _, id in ipairs(redis.call('ZRANGEBYSCORE', K.h, '-inf', NOW, 'LIMIT', 0, BUDGET - c.work)) do
    spend()
    local v = hmget_of(K.hi, id, {HOLDER.claimed, HOLDER.lingering})
    if v[HOLDER.claimed] == '1' and v[HOLDER.lingering] ~= '1' then holder_event(EVENT.expired, id) end
    remove_holder(id)
  end
  if c.work >= BUDGET then c.more = true return end
  for _, id in ipairs(redis.call('ZRANGEBYSCORE', K.gone, '-inf', NOW, 'LIMIT', 0, BUDGET - c.work)) do
    spend()
    redis.call('ZREM', K.gone, id)
    redis.call('HDEL', K.w, id .. '.' .. WAITER.superseded_by)
  end
  c.reaped = c.work < BUDGET
end

-- The semaphore's N stays only while someone holds or waits.
local function tidy_limit()
  local c = C
  if quiet() or c.no_sem then return end
  if redis.call('EXISTS', K.sem, K.free) == 0 then
    c.no_sem = true
    return
  end
  if redis.call('ZCARD', K.h) == 0 and redis.call('ZCARD', K.q) == 0 then
    redis.call('DEL', K.sem, K.free)
    c.no_sem = true
  end
end

-- Every structure expires when nothing in it can matter any more: the holders' after the last
-- lease, the queue's after the last waiter's lease; nothing stays behind an unused lock.
local function set_expiries()
  if quiet() then return end
  local margin = G.lease + G.claim
  local held = redis.call('ZRANGE', K.h, -1, -1, 'WITHSCORES')[2]
  local waited = redis.call('ZRANGE', K.wl, -1, -1, 'WITHSCORES')[2]
  local notice = redis.call('ZRANGE', K.gone, -1, -1, 'WITHSCORES')[2]
  if held then
    local at = tonumber(held) + margin
    redis.call('PEXPIREAT', K.h, at)
    redis.call('PEXPIREAT', K.hi, at)
  end
  local queue_end = waited and tonumber(waited) + margin or nil
  if queue_end then
    redis.call('PEXPIREAT', K.q, queue_end)
    redis.call('PEXPIREAT', K.wl, queue_end)
    redis.call('PEXPIREAT', K.sq, queue_end)
  end
  local w_end = queue_end
  if notice and (not w_end or tonumber(notice) > w_end) then w_end = tonumber(notice) end
  if w_end then redis.call('PEXPIREAT', K.w, w_end) end
  if notice then redis.call('PEXPIREAT', K.gone, tonumber(notice)) end
  local sem_end = held and tonumber(held) + margin or nil
  if queue_end and (not sem_end or queue_end > sem_end) then sem_end = queue_end end
  if sem_end and not C.no_sem then
    redis.call('PEXPIREAT', K.sem, sem_end)
    redis.call('PEXPIREAT', K.free, sem_end)
  end
end

-- Refuses a contender whose kind of hold (x exclusive, s shared, n a semaphore of limit) does not
-- fit the lock as others use it.
local function check_mode(mode, limit)
  -- Dead holders and waiters first: a semaphore whose holders all died is no semaphore any more.
  reap()
  note_expired()
  tidy_limit()
  local stored = not quiet() and not C.no_sem and redis.call('HGET', K.sem, SEM.limit)
  if mode == 'n' then
    if stored and tonumber(stored) ~= limit then
      return refuse(redis.error_reply('RLOCKLIMIT ' .. stored .. ' ' .. limit))
    end
    if not stored and (lock_value() or
                       (not quiet() and (redis.call('ZCARD', K.h) > 0 or redis.call('ZCARD', K.q) > 0))) then
      return refuse(redis.error_reply('RLOCKLIMIT 1 ' .. limit))
    end
  elseif stored then
    return refuse(redis.error_reply('RLOCKLIMIT ' .. stored .. ' 1'))
  end
  return nil
end

-- Whether a contender of this kind could hold the lock now (the queue aside).
local function can_take(mode, limit)
  if mode == 'n' then return quiet() or redis.call('ZCARD', K.h) < limit end
  if lock_value() then return false end
  return mode == 's' or quiet() or redis.call('ZCARD', K.h) == 0
end

-- Until when a hold claimed now is kept at least with --min-hold (ms): '' for none. The lease
-- lasts that long (a holder that dies keeps the lock so long); the lingering after a release is
-- the release's to say (scripts/release.lua).
local function min_hold_until(min_hold)
  if min_hold and tonumber(min_hold) and tonumber(min_hold) > 0 then return tostring(NOW + tonumber(min_hold)) end
  return ''
end

-- The lease to set: the TTL, or longer when --min-hold keeps the lock until linger_until.
local function lease_ms(ttl, linger_until)
  local px = tonumber(ttl)
  if linger_until and linger_until ~= '' and tonumber(linger_until) - NOW > px then
    px = tonumber(linger_until) - NOW
  end
  return px
end
