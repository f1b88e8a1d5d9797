-- Resets the lease only if the token still holds the lock (renewal and extend).
-- KEYS: the lock's keys. ARGV: cfg, token, ttl_ms ('' for the TTL it was taken with), the TTL to
-- assume when the lease recorded none (rlock's default), and for a keeper (acquire --keepalive)
-- its pid and the pid it watches, recorded for status.
-- Returns {1, more, push, pttl_before, ttl_ms, preempted_by} when extended ("" when nobody asked
-- the holder to stop, or when the preemptor no longer waits: its request is withdrawn; once
-- returned, the request is marked seen), {0, more, push} when the token no longer holds the lock.
-- pttl_before lets the caller see a lease that ran short (the server's clock stepped forward).
local token, ttl = ARGV[2], ARGV[3]
local id = id_of(token)
CALLER = id
if redis.call('GET', K.lock) == token then
  local v = redis.call('HMGET', K.info, 'ttl', 'lu', 'pb')
  if ttl == '' then ttl = v[1] or ARGV[4] end
  local before = redis.call('PTTL', K.lock)
  local px = lease_ms(ttl, v[2])
  redis.call('PEXPIRE', K.lock, px)
  redis.call('HSET', K.info, 'ttl', ttl, 'claimed', 1, 'exp', NOW + px)
  if ARGV[5] then redis.call('HSET', K.info, 'keeper', ARGV[5], 'watch', ARGV[6]) end
  local by = v[3] or ''
  if by ~= '' and redis.call('HGET', K.info, 'ps') ~= '1' then
    local asker = redis.call('HGET', K.info, 'pi')
    if asker and still_waiting(asker) then
      redis.call('HSET', K.info, 'ps', 1)
    else
      redis.call('HDEL', K.info, 'pb', 'pi')
      by = ''
    end
  end
  redis.call('PEXPIRE', K.info, px + HISTORY)
  return reply(1, before, tonumber(ttl), by)
end
local bad = check_types(token)
if bad then return bad end
local expiry = redis.call('ZSCORE', K.h, id)
if not expiry or tonumber(expiry) <= NOW or redis.call('HGET', K.hi, id .. '.t') ~= token then return reply(0) end
local v = redis.call('HMGET', K.hi, id .. '.ttl', id .. '.lu')
if ttl == '' then ttl = v[1] or ARGV[4] end
redis.call('ZADD', K.h, 'XX', NOW + lease_ms(ttl, v[2]), id)
redis.call('HSET', K.hi, id .. '.ttl', ttl, id .. '.k', 1)
if ARGV[5] then redis.call('HSET', K.hi, id .. '.kp', ARGV[5], id .. '.kw', ARGV[6]) end
set_expiries()
return reply(1, math.floor(tonumber(expiry) - NOW), tonumber(ttl), '')
