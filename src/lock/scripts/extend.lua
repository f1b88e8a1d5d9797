-- Resets the lease only if the token still holds the lock (renewal and extend).
-- KEYS: the lock's keys. ARGV: protocol.txt, call extend: the token, the TTL ('' for the TTL it
-- was taken with), the TTL to assume when the lease recorded none (rlock's default), for a keeper
-- (acquire --keepalive) its pid and the pid it watches, recorded for status ('' for none), and
-- tick_ran '1' when the holder's command starts now: its --once-per tick ran (tick_mark).
-- Returns {1, more, push, pttl_before, ttl_ms, preempted_by} when extended ("" when nobody asked
-- the holder to stop, or when the preemptor no longer waits: its request is withdrawn; once
-- returned, the request is marked seen), {0, more, push} when the token no longer holds the lock.
-- pttl_before lets the caller see a lease that ran short (the server's clock stepped forward).
local a = A.extend
local token, ttl, keeper = arg(a.token), arg(a.ttl), arg(a.keeper) or ''
local id = id_of(token)
C.caller = id
if redis.call('GET', K.lock) == token then
  local v = hmget(K.info, INFO.ttl, INFO.linger_until, INFO.preempt_by)
  if ttl == '' then ttl = v[INFO.ttl] or arg(a.default_ttl) end
  local before = redis.call('PTTL', K.lock)
  local px = lease_ms(ttl, v[INFO.linger_until])
  -- (The TTL as given when it is the lease: a string, not formatted again.)
  redis.call('PEXPIRE', K.lock, px == tonumber(ttl) and ttl or px)
  -- A lease cut short ends before the time the waiters' light heartbeats count on.
  if before < 0 or px < before then changed('view') end
  if keeper ~= '' then
    redis.call('HSET', K.info, INFO.ttl, ttl, INFO.claimed, '1', INFO.expires, NOW + px, INFO.keeper, keeper,
               INFO.watched, arg(a.watched))
  else
    redis.call('HSET', K.info, INFO.ttl, ttl, INFO.claimed, '1', INFO.expires, NOW + px)
  end
  local by = v[INFO.preempt_by] or ''
  if by ~= '' and redis.call('HGET', K.info, INFO.preempt_seen) ~= '1' then
    local asker = redis.call('HGET', K.info, INFO.preemptor)
    if asker and still_waiting(asker) then
      redis.call('HSET', K.info, INFO.preempt_seen, 1)
    else
      redis.call('HDEL', K.info, INFO.preempt_by, INFO.preemptor)
      by = ''
    end
  end
  redis.call('PEXPIRE', K.info, px + G.history)
  if arg(a.tick_ran) == '1' then tick_mark(id) end
  return reply(CODE.extended, before, tonumber(ttl), by)
end
local bad = check_types(token)
if bad then return refuse(bad) end
local expiry = redis.call('ZSCORE', K.h, id)
if not expiry or tonumber(expiry) <= NOW or redis.call('HGET', K.hi, id .. '.' .. HOLDER.token) ~= token then
  return reply(CODE.not_held)
end
local v = hmget_of(K.hi, id, {HOLDER.ttl, HOLDER.linger_until})
if ttl == '' then ttl = v[HOLDER.ttl] or arg(a.default_ttl) end
redis.call('ZADD', K.h, 'XX', NOW + lease_ms(ttl, v[HOLDER.linger_until]), id)
redis.call('HSET', K.hi, id .. '.' .. HOLDER.ttl, ttl, id .. '.' .. HOLDER.claimed, 1)
if keeper ~= '' then
  redis.call('HSET', K.hi, id .. '.' .. HOLDER.keeper, keeper, id .. '.' .. HOLDER.watched, arg(a.watched))
end
set_expiries()
return reply(CODE.extended, math.floor(tonumber(expiry) - NOW), tonumber(ttl), '')
