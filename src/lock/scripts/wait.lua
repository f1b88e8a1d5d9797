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
  local info = redis.call('HMGET', K.info, 'id', 'host', 'pid', 'cmd', 'since', 'lg', 'claimed')
  if info[1] ~= holder or info[7] ~= '1' or redis.call('PTTL', K.lock) < 0 then return nil end
  local id = id_of(token)
  local w = redis.call('HMGET', K.w, id .. '.t', id .. '.g', id .. '.s', id .. '.wt')
  if w[1] ~= token or w[2] then return nil end
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
  if before ~= w[4] then redis.call('HSET', K.w, id .. '.wt', before) end
  return {3, 0, {}, rank + 1, redis.call('ZCARD', K.q), w[3] or '', NOW, info[2] or '', info[3] or '', info[4] or '',
          info[5] or '', info[6] == '1' and 1 or 0, -1, before}
end
local beat = heartbeat()
if beat then return beat end

local d, id, limit, bad = prologue()
if bad then return bad end

local by = redis.call('HGET', K.w, id .. '.g')
if by then
  redis.call('HDEL', K.w, id .. '.g')
  redis.call('ZREM', K.gone, id)
  set_expiries()
  return reply(5, 'superseded', by)
end

-- A preemptor keeps its intent while it waits: at every step it asks a --preemptible holder
-- (one granted since, or one that has not yet seen the request) to stop.
local preemptor = string.find(d.o, 'p', 1, true) ~= nil and d.m == 'x'
local ours, fence, slot, claimed = held_by(d.t, id, d.m)
local done = not claimed and tick_refusal(id, d)
if done then return reply(6, unpack(done)) end
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
    if d.m == 'x' and redis.call('HGET', K.info, 'pb') and redis.call('HGET', K.info, 'ps') ~= '1' then wake(K.mb) end
  end
  set_expiries()
  return reply(1, fence, slot)
end
set_expiries()
if MORE then return reply(4) end
return waiting(id)
