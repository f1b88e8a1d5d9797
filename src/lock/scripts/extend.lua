-- Resets the lock's TTL only if the token still owns it (renewal and extend).
-- KEYS: lock, info. ARGV: token, ttl_ms. Returns 1 when extended, 0 when the token no longer owns the lock.
if redis.call('GET', KEYS[1]) == ARGV[1] then
  redis.call('PEXPIRE', KEYS[1], ARGV[2])
  redis.call('HSET', KEYS[2], 'ttl', ARGV[2])
  redis.call('PEXPIRE', KEYS[2], ARGV[2])
  return 1
end
return 0
