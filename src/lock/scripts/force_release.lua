-- Removes every hold of the lock whoever has it (release --force), and hands it on; at most the
-- budget of shared or semaphore holds a call (more: call again).
-- KEYS: the lock's keys. ARGV: cfg. Returns {1, more, push, removed, exclusive holder info (flat
-- field/value list), number of shared or semaphore holds removed}.
local bad = check_types()
if bad then return bad end
local forced = {EV.by, 'release --force'}
local info = {}
local deleted = 0
if redis.call('EXISTS', K.lock) == 1 then
  info = redis.call('HGETALL', K.info)
  local v = hmget(K.info, INFO.host, INFO.pid, INFO.user, INFO.cmd, INFO.fence, INFO.since, INFO.id)
  local since = v[INFO.since]
  event(EVENT.released, {EV.host, v[INFO.host], EV.pid, v[INFO.pid], EV.user, v[INFO.user], EV.cmd, v[INFO.cmd],
                         EV.fence, v[INFO.fence], EV.held, since and tostring(NOW - tonumber(since)) or '',
                         EV.by, 'release --force', EV.id, v[INFO.id]})
  deleted = 1
end
redis.call('DEL', K.lock, K.info)
lock_written()
local removed = 0
for _, id in ipairs(redis.call('ZRANGE', K.h, 0, BUDGET - 1)) do
  if not spend() then break end
  holder_event(EVENT.released, id, forced)
  remove_holder(id)
  removed = removed + 1
end
if redis.call('ZCARD', K.h) > 0 then MORE = true end
if not MORE then advance() end
set_expiries()
return reply(CODE.forced, deleted + removed, info, removed)
