-- Removes every hold of the lock whoever has it (release --force), and hands it on; at most the
-- budget of shared or semaphore holds a call (more: call again).
-- KEYS: the lock's keys. ARGV: protocol.txt, call force_release: the configuration alone.
-- Returns {1, more, push, removed, exclusive holder info (flat field/value list), number of shared
-- or semaphore holds removed}.
local bad = check_types()
if bad then return refuse(bad) end
local forced = {EV.by, 'release --force'}
local info = {}
local deleted = 0
if redis.call('EXISTS', K.lock) == 1 then
  info = redis.call('HGETALL', K.info)
  local v = hmget_list(K.info, with_record(RECORD.who, 'info', INFO.fence, INFO.since, INFO.id))
  local since = v[INFO.since]
  local held = since and tostring(NOW - tonumber(since)) or ''
  event(EVENT.released, who_event(record_from(RECORD.who, 'info', v),
                                  put({EV.fence, v[INFO.fence], EV.held, held, EV.id, v[INFO.id]}, forced)))
  deleted = 1
end
redis.call('DEL', K.lock, K.info)
wrote('lock', false, 'view')
local removed = 0
for _, id in ipairs(redis.call('ZRANGE', K.h, 0, BUDGET - 1)) do
  if not spend() then break end
  holder_event(EVENT.released, id, forced)
  remove_holder(id)
  removed = removed + 1
end
if redis.call('ZCARD', K.h) > 0 then C.more = true end
if not C.more then advance() end
set_expiries()
return reply(CODE.forced, deleted + removed, info, removed)
