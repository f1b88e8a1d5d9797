-- A waiter gives up (--wait ran out, a signal): it leaves the queue, or gives back a grant it has
-- not claimed, and wakes whoever watched it.
-- KEYS: the lock's keys. ARGV: token. Returns 1.
local token = ARGV[1]
local id = id_of(token)
if redis.call('ZSCORE', KEYS[K_Q], id) then
  remove_waiter(id)
else
  local mode = hold_kind(token, id) or 'x'
  local ours, _, _, claimed = held_by(token, id, mode)
  if ours and not claimed then
    if mode == 'x' then
      redis.call('DEL', KEYS[K_LOCK], KEYS[K_INFO])
    else
      remove_holder(id)
    end
  end
end
wake(KEYS[K_MB])
advance()
return 1
