-- Gives the lock back only if the token still holds it, and hands it to the next waiter.
-- KEYS: the lock's keys. ARGV: token. Returns 1 when released, 0 when the token no longer holds
-- the lock.
local token = ARGV[1]
local id = id_of(token)
local kind = hold_kind(token, id)
if not kind then return 0 end
if kind == 'x' then
  redis.call('DEL', KEYS[K_LOCK], KEYS[K_INFO])
else
  remove_holder(id)
end
wake(KEYS[K_MB])
advance()
return 1
