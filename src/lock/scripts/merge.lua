-- Redlock's phase 2 on one master: if the lock there is still the caller's, its fence counter
-- becomes at least T, the fencing token the quorum agreed on. With rejoin, a master that lost the
-- key (a restart) and where the lock is free gets it back, together with the same fence merge.
-- KEYS: the lock's keys. ARGV: token T ttl_ms rejoin(0/1).
-- Returns 1 when merged, 2 when set again and merged, 0 when the lock is not the caller's there.
local token, fence, ttl, rejoin = ARGV[1], tonumber(ARGV[2]), ARGV[3], ARGV[4]
local owner = redis.call('GET', KEYS[K_LOCK])
local result = 1
if owner ~= token then
  if owner or rejoin ~= '1' then return 0 end
  redis.call('SET', KEYS[K_LOCK], token, 'PX', ttl)
  redis.call('DEL', KEYS[K_INFO])
  redis.call('HSET', KEYS[K_INFO], 'id', id_of(token), 'since', NOW, 'ttl', ttl, 'claimed', 1)
  redis.call('PEXPIRE', KEYS[K_INFO], ttl)
  result = 2
end
local current = tonumber(redis.call('GET', KEYS[K_FENCE]) or '0')
if current < fence then redis.call('SET', KEYS[K_FENCE], ARGV[2]) end
redis.call('HSET', KEYS[K_INFO], 'fence', ARGV[2])
return result
