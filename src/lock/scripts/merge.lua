-- Redlock's phase 2 on one master: if the lock there is still the caller's, its fence counter
-- becomes at least T, the fencing token the quorum agreed on (and the acquisition goes into this
-- master's history). With rejoin, a master that lost the key (a restart) and where the lock is
-- free gets it back, together with the same fence merge.
-- The minimum hold (--min-hold) starts here too, not at phase 1: a failed attempt's leftovers
-- never keep the lock longer than its TTL.
-- KEYS: the lock's keys. ARGV: cfg, token, T, ttl_ms, rejoin (0/1), min_hold_ms (optional).
-- Returns {1, ...} when merged, {2, ...} when set again and merged, {0, ...} when the lock is not
-- the caller's there.
local token, fence, ttl, rejoin = ARGV[2], tonumber(ARGV[3]), ARGV[4], ARGV[5]
CALLER = id_of(token)
local owner = redis.call('GET', K.lock)
local result = CODE.merged
if owner ~= token then
  if owner or rejoin ~= '1' then return reply(CODE.not_held) end
  redis.call('SET', K.lock, token, 'PX', ttl)
  lock_written()
  redis.call('DEL', K.info)
  redis.call('HSET', K.info, INFO.id, CALLER, INFO.since, NOW, INFO.ttl, ttl, INFO.claimed, 1, INFO.expires,
             NOW + tonumber(ttl))
  redis.call('PEXPIRE', K.info, tonumber(ttl) + HISTORY)
  result = CODE.rejoined
end
local current = tonumber(redis.call('GET', K.fence) or '0')
if current < fence then redis.call('SET', K.fence, ARGV[3]) end
redis.call('PEXPIRE', K.fence, HISTORY)
redis.call('HSET', K.info, INFO.fence, ARGV[3])
if result == CODE.merged then
  local linger_until = min_hold_until(ARGV[6])
  if linger_until ~= '' then
    local px = tonumber(linger_until) - NOW
    if px > redis.call('PTTL', K.lock) then
      redis.call('PEXPIRE', K.lock, px)
      redis.call('HSET', K.info, INFO.expires, NOW + px)
      redis.call('PEXPIRE', K.info, px + HISTORY)
    end
    redis.call('HSET', K.info, INFO.linger_until, linger_until)
  end
  local v = hmget(K.info, INFO.host, INFO.pid, INFO.user, INFO.cmd, INFO.tick, INFO.tick_period)
  event(EVENT.acquired, {EV.host, v[INFO.host], EV.pid, v[INFO.pid], EV.user, v[INFO.user], EV.cmd, v[INFO.cmd],
                         EV.fence, ARGV[3], EV.waited, '0', EV.id, CALLER, EV.tick, v[INFO.tick],
                         EV.period, v[INFO.tick_period]})
end
return reply(result)
