-- Redlock's phase 2 on one master: if the lock there is still the caller's, its fence counter
-- becomes at least T, the fencing token the quorum agreed on (and the acquisition goes into this
-- master's history). With rejoin, a master that lost the key (a restart) and where the lock is
-- free gets it back, together with the same fence merge.
-- The minimum hold (--min-hold) starts here too, not at phase 1: a failed attempt's leftovers
-- never keep the lock longer than its TTL.
-- KEYS: the lock's keys. ARGV: protocol.txt, call merge: the token, T, the TTL (ms), rejoin (0/1),
-- the minimum hold (ms; optional).
-- Returns {1, ...} when merged, {2, ...} when set again and merged, {0, ...} when the lock is not
-- the caller's there.
local a = A.merge
local token, fence, ttl, rejoin = arg(a.token), tonumber(arg(a.fence)), arg(a.ttl), arg(a.rejoin)
C.caller = id_of(token)
local owner = redis.call('GET', K.lock)
local result = CODE.merged
if owner ~= token then
  if owner or rejoin ~= '1' then return reply(CODE.not_held) end
  redis.call('SET', K.lock, token, 'PX', ttl)
  wrote('lock', token, 'view')
  redis.call('DEL', K.info)
  redis.call('HSET', K.info, INFO.id, C.caller, INFO.version, VERSION, INFO.since, NOW, INFO.ttl, ttl, INFO.claimed, 1,
             INFO.expires, NOW + tonumber(ttl))
  redis.call('PEXPIRE', K.info, tonumber(ttl) + G.history)
  result = CODE.rejoined
end
local current = tonumber(redis.call('GET', K.fence) or '0')
if current < fence then redis.call('SET', K.fence, arg(a.fence)) end
redis.call('PEXPIRE', K.fence, G.history)
redis.call('HSET', K.info, INFO.fence, arg(a.fence))
if result == CODE.merged then
  local linger_until = min_hold_until(arg(a.min_hold))
  if linger_until ~= '' then
    local px = tonumber(linger_until) - NOW
    if px > redis.call('PTTL', K.lock) then
      redis.call('PEXPIRE', K.lock, px)
      wrote('lease')
      redis.call('HSET', K.info, INFO.expires, NOW + px)
      redis.call('PEXPIRE', K.info, px + G.history)
    end
    redis.call('HSET', K.info, INFO.linger_until, linger_until)
  end
  local v = hmget_list(K.info, with_record(RECORD.who, 'info', INFO.tick, INFO.tick_period))
  event(EVENT.acquired, who_event(record_from(RECORD.who, 'info', v),
                                  {EV.fence, arg(a.fence), EV.waited, '0', EV.id, C.caller, EV.tick, v[INFO.tick],
                                   EV.period, v[INFO.tick_period]}))
end
return reply(result)
