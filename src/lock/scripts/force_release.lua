-- Removes every hold of the lock whoever has it (release --force), and hands it on.
-- KEYS: the lock's keys. Returns {removed, exclusive holder info (flat field/value list),
-- number of shared or semaphore holds removed}.
local bad = check_types()
if bad then return bad end
local info = redis.call('HGETALL', KEYS[K_INFO])
local deleted = redis.call('DEL', KEYS[K_LOCK])
redis.call('DEL', KEYS[K_INFO])
local members = redis.call('ZRANGE', KEYS[K_H], 0, -1)
for _, id in ipairs(members) do remove_holder(id) end
advance()
return {deleted + #members, info, #members}
