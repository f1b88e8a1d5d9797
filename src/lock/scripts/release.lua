-- Deletes the lock only if the token still owns it.
-- KEYS: lock, info. ARGV: token. Returns 1 when released, 0 when the token no longer owns the lock.
if redis.call('GET', KEYS[1]) == ARGV[1] then
  redis.call('DEL', KEYS[1], KEYS[2])
  return 1
end
return 0
