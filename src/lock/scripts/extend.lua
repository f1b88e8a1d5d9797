-- Resets the lease only if the token still holds the lock (renewal and extend).
-- KEYS: the lock's keys. ARGV: token ttl_ms ('' for the TTL it was taken with), and for a keeper
-- (acquire --keepalive) its pid and the pid it watches, recorded for status.
-- Returns {pttl_before, ttl_ms} when extended, 0 when the token no longer holds the lock.
-- pttl_before lets the caller see a lease that ran short (the server's clock stepped forward).
local token, ttl = ARGV[1], ARGV[2]
local id = id_of(token)
if redis.call('GET', KEYS[K_LOCK]) == token then
  if ttl == '' then ttl = redis.call('HGET', KEYS[K_INFO], 'ttl') or '30000' end
  local before = redis.call('PTTL', KEYS[K_LOCK])
  redis.call('PEXPIRE', KEYS[K_LOCK], ttl)
  redis.call('HSET', KEYS[K_INFO], 'ttl', ttl, 'claimed', 1)
  if ARGV[3] then redis.call('HSET', KEYS[K_INFO], 'keeper', ARGV[3], 'watch', ARGV[4]) end
  redis.call('PEXPIRE', KEYS[K_INFO], ttl)
  return {before, tonumber(ttl)}
end
local expiry = redis.call('ZSCORE', KEYS[K_H], id)
if not expiry or tonumber(expiry) <= NOW or redis.call('HGET', KEYS[K_HI], id .. '.t') ~= token then return 0 end
if ttl == '' then ttl = redis.call('HGET', KEYS[K_HI], id .. '.ttl') or '30000' end
redis.call('ZADD', KEYS[K_H], 'XX', NOW + tonumber(ttl), id)
redis.call('HSET', KEYS[K_HI], id .. '.ttl', ttl, id .. '.k', 1)
if ARGV[3] then redis.call('HSET', KEYS[K_HI], id .. '.kp', ARGV[3], id .. '.kw', ARGV[4]) end
return {math.floor(tonumber(expiry) - NOW), tonumber(ttl)}
