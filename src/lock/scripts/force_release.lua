-- Removes every hold of the lock whoever has it (release --force), and hands it on; at most the
-- budget of shared or semaphore holds a call (more: call again).
-- KEYS: the lock's keys. ARGV: cfg. Returns {1, more, push, removed, exclusive holder info (flat
-- field/value list), number of shared or semaphore holds removed}.
local bad = check_types()
if bad then return bad end
local forced = {'by', 'release --force'}
local info = {}
local deleted = 0
if redis.call('EXISTS', K.lock) == 1 then
  info = redis.call('HGETALL', K.info)
  local v = redis.call('HMGET', K.info, 'host', 'pid', 'user', 'cmd', 'fence', 'since', 'id')
  event('released', {'h', v[1], 'p', v[2], 'u', v[3], 'c', v[4], 'f', v[5],
                     'd', v[6] and tostring(NOW - tonumber(v[6])) or '', 'by', 'release --force', 'id', v[7]})
  deleted = 1
end
redis.call('DEL', K.lock, K.info)
lock_written()
local removed = 0
for _, id in ipairs(redis.call('ZRANGE', K.h, 0, BUDGET - 1)) do
  if not spend() then break end
  holder_event('released', id, forced)
  remove_holder(id)
  removed = removed + 1
end
if redis.call('ZCARD', K.h) > 0 then MORE = true end
if not MORE then advance() end
set_expiries()
return reply(1, deleted + removed, info, removed)
