-- One step of a waiter, run right after its BLPOP wakes or times out (the heartbeat): leaves if
-- it was superseded, claims the lock if it was granted, else renews the waiter's lease in the
-- queue (joining it again at the end if a failover or a restart lost it), hands the lock on if its
-- holder is gone, and says whom to watch next.
-- KEYS: the lock's keys. ARGV: cfg, then the contender (as for acquire).
-- Returns {1, more, push, fence, slot} when the lock is ours now; {5, more, push, reason, by} when
-- the waiter must leave (reason "superseded", by "host\tpid\tuser\tcmd"); {4, more, push} when
-- the budget ran out (call again); {6, more, push, tick, host, at, now} when its --once-per tick was
-- done (the caller then leaves: cancel.lua); else the waiting reply of common.lua.
-- The heartbeat of a waiter behind others while the lock is held exclusively, when nothing is
-- due (no waiter's lease has run out, the waiter was not told to leave, it is no preemptor): it
-- renews its place and says whom to watch, in a few commands. Everything else takes the full step.
local function heartbeat()
  local token = ARGV[2]
  if string.find(ARGV[10] or '', 'p', 1, true) then return nil end
  local value = redis.pcall('GET', K.lock)
  if type(value) ~= 'string' or value == token then return nil end
  local holder
  if #value == 48 and not string.find(value, '[^0-9a-f]') then
    holder = string.sub(value, 1, 16)
  elseif #value == 17 and string.sub(value, 1, 1) == '~' and not string.find(value, '[^0-9a-f]', 2) then
    holder = string.sub(value, 2)
  else
    return nil
  end
  local info = hmget(K.info, INFO.id, INFO.host, INFO.pid, INFO.cmd, INFO.since, INFO.lingering, INFO.claimed)
  if info[INFO.id] ~= holder or info[INFO.claimed] ~= '1' or redis.call('PTTL', K.lock) < 0 then return nil end
  local id = id_of(token)
  local w = hmget_of(K.w, id, WAITER.token, WAITER.superseded_by, WAITER.since, WAITER.watching)
  if w[WAITER.token] ~= token or w[WAITER.superseded_by] then return nil end
  local rank = redis.call('ZRANK', K.q, id)
  if not rank or rank == 0 then return nil end
  local first = redis.call('ZRANGE', K.wl, 0, 0, 'WITHSCORES')
  if not first[2] or tonumber(first[2]) <= NOW then return nil end
  redis.call('ZADD', K.wl, 'XX', NOW + LEASE, id)
  -- The queue's keys outlive every lease by LEASE + CLAIM: set again only when that runs short
  -- (as set_expiries does, from the last lease and notice).
  if redis.call('PTTL', K.q) < LEASE + CLAIM then
    local queue_end = tonumber(redis.call('ZRANGE', K.wl, -1, -1, 'WITHSCORES')[2]) + LEASE + CLAIM
    redis.call('PEXPIREAT', K.q, queue_end)
    redis.call('PEXPIREAT', K.wl, queue_end)
    redis.call('PEXPIREAT', K.sq, queue_end)
    local notice = redis.call('ZRANGE', K.gone, -1, -1, 'WITHSCORES')[2]
    if notice and tonumber(notice) > queue_end then queue_end = tonumber(notice) end
    redis.call('PEXPIREAT', K.w, queue_end)
  end
  local before = redis.call('ZRANGE', K.q, rank - 1, rank - 1)[1]
  if before ~= w[WAITER.watching] then redis.call('HSET', K.w, id .. '.' .. WAITER.watching, before) end
  local r, at = {}, AT.waiting
  r[AT.header.code], r[AT.header.more], r[AT.header.push] = CODE.waiting, 0, {}
  r[at.position], r[at.queued], r[at.since], r[at.now] = rank + 1, redis.call('ZCARD', K.q), w[WAITER.since] or '', NOW
  r[at.host], r[at.pid], r[at.cmd] = info[INFO.host] or '', info[INFO.pid] or '', info[INFO.cmd] or ''
  r[at.held_since], r[at.lingering] = info[INFO.since] or '', info[INFO.lingering] == '1' and 1 or 0
  r[at.left], r[at.watch] = -1, before
  return r
end
local beat = heartbeat()
if beat then return beat end

local d, id, limit, bad = prologue()
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
local preemptor = string.find(d.o, 'p', 1, true) ~= nil and d.m == 'x'
local ours, fence, slot, claimed = held_by(d.t, id, d.m)
local done = not claimed and tick_refusal(id, d)
if done then return reply(CODE.tick_done, unpack(done)) end
if not ours then
  if redis.call('ZSCORE', K.q, id) then
    redis.call('ZADD', K.wl, NOW + LEASE, id)
  else
    enqueue(id, d, preemptor)
  end
  if preemptor then preempt(d, id) end
  advance()
  ours, fence, slot, claimed = held_by(d.t, id, d.m)
end
if ours then
  if not claimed then
    claim(id, d.m, d.ttl, d)
    -- Asked to stop while only granted: its mailbox is pushed again, for the watch that its run
    -- starts with the command (the push at the request woke this step).
    if d.m == 'x' and redis.call('HGET', K.info, INFO.preempt_by) and
       redis.call('HGET', K.info, INFO.preempt_seen) ~= '1' then
      wake(K.mb)
    end
  end
  set_expiries()
  return reply(CODE.taken, fence, slot)
end
set_expiries()
if MORE then return reply(CODE.again) end
return waiting(id)
