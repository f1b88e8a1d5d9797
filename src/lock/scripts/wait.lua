-- One step of a waiter, run right after its BLPOP wakes or times out (the heartbeat): leaves if
-- it was superseded, claims the lock if it was granted, else renews the waiter's lease in the
-- queue (joining it again at the end if a failover or a restart lost it), hands the lock on if its
-- holder is gone, and says whom to watch next.
-- KEYS: the lock's keys. ARGV: protocol.txt, call wait: the contender (as for acquire), then the
-- far lease (ms; '' for none: a preemptor): the lease of a waiter behind others, whose heartbeat
-- is longer (see Timing::far_heartbeat). Whether it is behind others is decided before the
-- hand-on: a waiter that is behind others in the reply has the far lease. Then, for a waiter
-- whose place, if it is gone, was lost by the server (a failover, a restart) rather than lapsed:
-- the arrival its place had (the waiting reply's) and how long it has waited (ms, its own clock);
-- it joins again there (rejoin_at in common/take.lua), else ('') at the end.
-- Returns {1, more, push, fence, slot} when the lock is ours now; {5, more, push, reason, by} when
-- the waiter must leave (reason "superseded", by "host\tpid\tuser\tcmd"); {4, more, push} when
-- the budget ran out (call again); {6, more, push, tick, host, at, now, own} when its --once-per
-- tick ran (the caller then leaves: cancel.lua); else the waiting reply of common/waiting.lua. (A
-- heartbeat that only renews the place, while the waiter's view holds, is beat.lua's.)
local a = A.wait

-- Asked to stop while only granted (asked: :info's pb and ps): its mailbox is pushed again, for
-- the watch that its run starts with the command (the push at the request woke this step).
local function wake_if_asked(asked)
  if asked[INFO.preempt_by] and asked[INFO.preempt_seen] ~= '1' then wake(K.mb) end
end

-- The hand-off first, in a few commands: an exclusive waiter (no preemptor, no --once-per) that
-- finds the lock granted to it and not yet claimed claims it, as the full path below does then
-- (claim), without the queue's bookkeeping (reaping, expiries: the queue is left as it was, for
-- the next full step or release). Anything else goes there, having written nothing (what it read
-- of the lock's key is kept).
local held = redis.pcall('GET', K.lock)
if type(held) ~= 'table' then C.lock_read, C.lock_value = true, held end
if held == arg(a.token) and arg(a.mode) == 'x' and arg(a.tick) == '' and not has(arg(a.options), OPT.preempt) then
  local v = hmget(K.info, INFO.claimed, INFO.fence, INFO.joined, INFO.preempt_by, INFO.preempt_seen, INFO.history)
  if v[INFO.claimed] == '0' then
    C.caller = id_of(held)
    history_known(v[INFO.history])
    claim(C.caller, contender(a), v)
    wake_if_asked(v)
    return reply(CODE.taken, tonumber(v[INFO.fence] or '0'), '')
  end
end

local d, id, _, bad = prologue(a)
if bad then return bad end

local by = redis.call('HGET', K.w, id .. '.' .. WAITER.superseded_by)
if by then
  redis.call('HDEL', K.w, id .. '.' .. WAITER.superseded_by)
  redis.call('ZREM', K.gone, id)
  set_expiries()
  return reply(CODE.leave, 'superseded', by)
end

-- A preemptor keeps its intent while it waits: at every step it asks a --preemptible holder
-- (one granted since, or one that has not yet seen the request) to stop.
local preemptor = has(d.options, OPT.preempt) and d.mode == 'x'
local ours, fence, slot, claimed = held_by(d.token, id, d.mode)
local done = not claimed and tick_refusal(id, d)
if done then return reply(CODE.tick_done, unpack(done)) end
if not ours then
  local far = tonumber(arg(a.far_lease) or '')
  local rank = redis.call('ZRANK', K.q, id)
  if rank then
    redis.call('ZADD', K.wl, NOW + ((far and rank > 0) and far or G.lease), id)
  else
    enqueue(id, d, preemptor, rejoin_at(arg(a.arrival), arg(a.waited), preemptor))
    if far and redis.call('ZRANK', K.q, id) > 0 then redis.call('ZADD', K.wl, NOW + far, id) end
  end
  if preemptor then preempt(d, id) end
  advance()
  ours, fence, slot, claimed = held_by(d.token, id, d.mode)
end
if ours then
  if not claimed then
    claim(id, d)
    if d.mode == 'x' then wake_if_asked(hmget(K.info, INFO.preempt_by, INFO.preempt_seen)) end
  end
  set_expiries()
  return reply(CODE.taken, fence, slot)
end
set_expiries()
if C.more then return reply(CODE.again) end
return waiting(id)
