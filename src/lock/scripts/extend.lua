-- Resets the lock's TTL only if the token still owns it (renewal and extend).
-- KEYS: lock, info. ARGV: token, ttl_ms ('' for the TTL the lock was taken with).
-- Returns {pttl_before, ttl_ms} when extended, 0 when the token no longer owns the lock.
-- pttl_before lets the caller see a lease that ran short (the server's clock stepped forward).
if redis.call('GET', KEYS[1]) ~= ARGV[1] then
  return 0
end
local ttl = ARGV[2]
if ttl == '' then
  ttl = redis.call('HGET', KEYS[2], 'ttl') or '30000'
end
local before = redis.call('PTTL', KEYS[1])
redis.call('PEXPIRE', KEYS[1], ttl)
redis.call('HSET', KEYS[2], 'ttl', ttl)
redis.call('PEXPIRE', KEYS[2], ttl)
return {before, tonumber(ttl)}
