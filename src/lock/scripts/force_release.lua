-- Deletes the lock whoever holds it (release --force).
-- KEYS: lock, info. Returns {deleted, info as a flat field/value list}.
local kind = redis.call('TYPE', KEYS[1])['ok']
if kind ~= 'none' and kind ~= 'string' then
  return redis.error_reply('WRONGTYPE ' .. KEYS[1] .. ' holds a ' .. kind .. ', not an rlock lock')
end
local info = redis.call('HGETALL', KEYS[2])
local deleted = redis.call('DEL', KEYS[1])
redis.call('DEL', KEYS[2])
return {deleted, info}
