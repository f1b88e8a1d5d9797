-- Takes the lock, or a place in its queue, in one atomic step.
-- KEYS: the lock's keys (see common.lua). ARGV: cfg, then the contender (token ttl_ms host pid user
-- cmd mode limit options min_hold_ms tick; see contender()), then the tokens of enclosing holds.
-- Returns {1, more, push, fence, slot} when taken; {2, more, push, fence, pttl, i} when the
-- enclosing hold ARGV[12 + i] owns it (re-entry); {0, more, push, pttl, host, pid, cmd, since,
-- now, queue length, lingering, overrun} when busy (not queued); {4, more, push} when dead entries
-- were removed and the budget ran out before a decision (call again); {6, more, push, tick, host,
-- at, now, own} when its --once-per tick ran (see tick_refusal); or the waiting reply.
-- The common cases first, in the fewest commands and with little Lua: an exclusive contender
-- (no enclosing holds, no --once-per, no --min-hold, options none or q) that finds the lock free
-- with nothing else there (no queue, shared holder, semaphore, notice, nor :info: a holder to
-- record as expired, a lingering one), or, without q, finds another holder and nothing else. What
-- they do is what the full path below does in those cases; anything else goes there, having
-- written nothing (what it read of the lock's key is kept: LOCK_READ).
if #ARGV == 12 and ARGV[8] == 'x' and ARGV[12] == '' and (ARGV[10] == '' or ARGV[10] == 'q') and
   (ARGV[11] == '0' or ARGV[11] == '') then
  local token = ARGV[2]
  local info = KEYS[KEY.info]
  -- (How many of the queue's, the shared holders', the semaphore's and the notices' keys, and
  -- :info, exist.)
  local others = redis.call('EXISTS', KEYS[KEY.q], KEYS[KEY.wl], KEYS[KEY.h], KEYS[KEY.gone], KEYS[KEY.sem],
                            KEYS[KEY.free], info)
  -- Nothing there: SET NX takes the lock if its key is free too (any key there, of any type, is
  -- left as it was).
  if others == 0 and redis.call('SET', K.lock, token, 'NX', 'PX', ARGV[3]) then
    QUIET = true
    local id = string.sub(token, 1, 16)
    CALLER = id
    -- (Another program's data at :fence: the lock is given back, free as it was, and the error
    -- returned, as the full path returns it before it takes anything.)
    local counted = redis.pcall('INCR', K.fence)
    if type(counted) == 'table' then
      redis.call('DEL', K.lock)
      return redis.error_reply('RLOCKFOREIGN fence')
    end
    local fence = next_fence(counted)
    local ttl = ARGV[3]
    local px = tonumber(ttl)
    redis.call('HSET', info, INFO.id, id, INFO.host, ARGV[4], INFO.pid, ARGV[5], INFO.user, ARGV[6], INFO.cmd,
               ARGV[7], INFO.since, NOW_ARG, INFO.fence, fence, INFO.ttl, ttl, INFO.claimed, '1', INFO.expires,
               NOW + px, INFO.linger_until, '', INFO.preemptible, '0', INFO.joined, NOW_ARG, INFO.history,
               keep_history())
    redis.call('PEXPIRE', info, px + HISTORY)
    event(EVENT.acquired, {EV.host, ARGV[4], EV.pid, ARGV[5], EV.user, ARGV[6], EV.cmd, ARGV[7], EV.fence, fence,
                           EV.waited, '0', EV.id, id})
    return {CODE.taken, 0, PUSH, fence, ''}
  end
  local value = redis.pcall('GET', K.lock)
  if type(value) ~= 'table' then LOCK_READ, LOCK_VALUE = true, value end
  if others == 0 then QUIET = true end
  -- Another holder, and nothing else but its :info (the one key counted, if HMGET found it).
  if ARGV[10] == '' and type(value) == 'string' and value ~= token and lock_value_ours(value) and
     (others == 0 or (others == 1 and VIEW.info[INFO.id])) then
    QUIET = true
    local id = string.sub(token, 1, 16)
    CALLER = id
    local v = VIEW.info
    local host, pid, cmd = v[INFO.host] or '', v[INFO.pid] or '', v[INFO.cmd] or ''
    local lingering = v[INFO.lingering] == '1'
    event(EVENT.busy, {EV.host, ARGV[4], EV.pid, ARGV[5], EV.user, ARGV[6], EV.cmd, ARGV[7], EV.id, id,
                       EV.holder_host, host, EV.holder_pid, pid, EV.holder_cmd, cmd, EV.lingering,
                       lingering and '1' or '0'})
    return {CODE.busy, 0, PUSH, VIEW.pttl, host, pid, cmd, v[INFO.since] or '', NOW, 0, lingering and 1 or 0, ''}
  end
end

local d, id, limit, bad = prologue()
if bad then return bad end

-- Our own token: an earlier attempt whose answer was lost took it, or queued it.
local ours, fence, slot, claimed = held_by(d.t, id, d.m)
if ours then
  if not claimed then claim(id, d.m, d.ttl, d) end
  set_expiries()
  return reply(CODE.taken, fence, slot)
end
if not quiet() and redis.call('ZSCORE', K.q, id) then
  redis.call('ZADD', K.wl, NOW + LEASE, id)
  set_expiries()
  return waiting(id)
end

-- Re-entry: the lock is held by an enclosing hold of the caller's process tree.
local owner = #ARGV >= 13 and lock_value()
for i = 13, #ARGV do
  local tok = ARGV[i]
  local hid = id_of(tok)
  if (owner and owner == tok) or (not owner and redis.call('HGET', K.hi, hid .. '.' .. HOLDER.token) == tok and
                                  redis.call('ZSCORE', K.h, hid)) then
    -- A shared hold cannot become exclusive inside itself: the inner request would wait for ever.
    if d.m == 'x' and not owner then return redis.error_reply('RLOCKUPGRADE shared hold') end
    local f = owner and redis.call('HGET', K.info, INFO.fence) or redis.call('HGET', K.hi, hid .. '.' .. HOLDER.fence)
    local pttl = owner and redis.call('PTTL', K.lock) or
                 math.floor(tonumber(redis.call('ZSCORE', K.h, hid)) - NOW)
    return reply(CODE.reentered, tonumber(f or '0'), pttl, i - 12)
  end
end

local done = tick_refusal(id, d)
if done then return reply(CODE.tick_done, unpack(done)) end

-- Nobody may jump the queue: the lock is taken at once only when no live waiter waits for it.
advance()
if MORE then
  set_expiries()
  return reply(CODE.again)
end
if (quiet() or redis.call('ZCARD', K.q) == 0) and can_take(d.m, limit) then
  d.js = NOW
  fence, slot = grant(id, d, true, limit)
  if not string.find(d.o, 'r', 1, true) then
    event(EVENT.acquired, {EV.host, d.h, EV.pid, d.p, EV.user, d.u, EV.cmd, d.c, EV.fence, fence, EV.waited, '0',
                           EV.id, id, EV.tick, d.tk or false, EV.period, d.tp or false})
  end
  set_expiries()
  return reply(CODE.taken, fence, slot)
end
-- A preemptor is served next: at the front of the queue (behind earlier preemptors), whoever
-- holds the lock; a --preemptible holder is asked to stop. Without the queue (-n), it still asks
-- a --preemptible holder when no other preemptor waits, and waits for it (the caller bounds that).
local preemptor = string.find(d.o, 'p', 1, true) ~= nil and d.m == 'x'
local queue = string.find(d.o, 'q', 1, true) ~= nil
if not queue and preemptor and lock_value() and redis.call('HGET', K.info, INFO.preemptible) == '1' and
   not first_preemptor() then
  queue = true
end
if queue then
  enqueue(id, d, preemptor)
  if preemptor and preempt(d, id) then
    advance()
    ours, fence, slot = held_by(d.t, id, d.m)
    if ours then
      claim(id, d.m, d.ttl, d)
      set_expiries()
      return reply(CODE.taken, fence, slot)
    end
  end
  set_expiries()
  return waiting(id)
end
tidy_limit()
local host, pid, cmd, since, lingering, left = holder_view(current_view())
local queued = quiet() and 0 or redis.call('ZCARD', K.q)
-- (--once-per: a run of the tick before still holds the lock, and this tick is skipped.)
local overrun = tick_overrun(d)
event(overrun == '' and EVENT.busy or EVENT.overrun,
      {EV.host, d.h, EV.pid, d.p, EV.user, d.u, EV.cmd, d.c, EV.id, id, EV.holder_host, host, EV.holder_pid, pid,
       EV.holder_cmd, cmd, EV.lingering, lingering, EV.tick, d.tk or false, EV.period, d.tp or false})
set_expiries()
return reply(CODE.busy, left, host, pid, cmd, since, NOW, queued, lingering, overrun)
