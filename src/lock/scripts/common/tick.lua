-- Shared by every lock script (see call.lua): --once-per.

-- ---- --once-per.

-- (Exclusive holds only; d.tick is nil without it.) A contender's tick is when it fired, by the
-- server's clock: the time of the call less its age (how long ago it started, on its own monotonic
-- clock), so that no host's wall clock counts, nor where the schedule sits from the epoch. Two
-- fire times are one tick when they are less than half a period apart, counted from the tick that
-- last ran: ticks_after(t, d) is how many periods after tick t the contender fired, rounded to
-- the nearest (0: the same tick).
--
-- A tick is pending while the hold that took the lock for it has not started its command: that
-- is only :info's tk, which ends with the hold (a lapse, any give-back), and a contender of that
-- tick waits for the lock as any other (with -n: busy). It ran once its holder marked it, right
-- before it starts its command (tick_mark): :tick then records it, and every contender of that
-- tick, or of an earlier one, is refused (tick_refusal).
local function ticks_after(t, d)
  return math.floor((d.tick - t) / d.period + 0.5)
end

-- The refusal of a contender whose tick ran: the reply's payload {tick that ran, its host, when
-- (server ms), now, the contender's own tick}, and a busy event that says so; nil to go on.
local function tick_refusal(id, d)
  if not d.tick then return nil end
  local v = hmget(K.tick, TICK.tick, TICK.host, TICK.at, TICK.id)
  local ran = tonumber(v[TICK.tick] or '')
  if not ran or v[TICK.id] == id or ticks_after(ran, d) > 0 then return nil end
  event(EVENT.busy, who_event(d.who, {EV.tick, v[TICK.tick], EV.period, d.period, EV.by, v[TICK.host], EV.id, id}))
  -- The payload of the reply tick_done (AT.tick_done).
  return {v[TICK.tick], v[TICK.host] or '', v[TICK.at] or '', NOW, d.tick}
end

-- The holder's tick when the lock is held for an earlier tick than contender d's (the run of the
-- tick before still holds it: an overrun), else ''.
local function tick_overrun(d)
  if not d.tick or not lock_value() then return '' end
  local held = tonumber(redis.call('HGET', K.info, INFO.tick) or '')
  if held and ticks_after(held, d) > 0 then return held end
  return ''
end

-- A hold taken for a tick: pending, on the hold's own record.
local function tick_take(d)
  if d.tick then redis.call('HSET', K.info, INFO.tick, d.tick, INFO.tick_period, d.period) end
end

-- The holder id marks its tick run (its command starts now): :tick records it, with the record it
-- replaces; the waiters of that tick leave at their next full step (tick_refusal).
local function tick_mark(id)
  local held = hmget(K.info, INFO.tick, INFO.tick_period, INFO.host)
  if not held[INFO.tick] then return end
  local v = hmget(K.tick, TICK.tick, TICK.host, TICK.at, TICK.id)
  if v[TICK.id] ~= id then
    redis.call('HSET', K.tick, TICK.tick, held[INFO.tick], TICK.period, held[INFO.tick_period] or '', TICK.host,
               held[INFO.host] or '', TICK.at, NOW, TICK.id, id, TICK.previous, v[TICK.tick] or '',
               TICK.previous_host, v[TICK.host] or '', TICK.previous_at, v[TICK.at] or '')
  end
  redis.call('PEXPIRE', K.tick, G.history)
  redis.call('HSET', K.info, INFO.tick_ran, 1)
  changed('view')
end

-- The give-back of a hold that marked its tick and then proved that its command never started
-- (the guard refused it): the record it replaced is put back, unless a later hold replaced it.
-- Held or not: the hold's lease may have run out meanwhile, and no run of that tick can have
-- taken the lock since (the record refused it).
local function tick_return(id)
  local v = hmget(K.tick, TICK.id, TICK.previous, TICK.previous_host, TICK.previous_at)
  if v[TICK.id] ~= id then return end
  local previous = v[TICK.previous]
  if not previous or previous == '' then return redis.call('DEL', K.tick) end
  redis.call('HSET', K.tick, TICK.tick, previous, TICK.host, v[TICK.previous_host], TICK.at, v[TICK.previous_at],
             TICK.id, '', TICK.previous, '', TICK.previous_host, '', TICK.previous_at, '')
end
