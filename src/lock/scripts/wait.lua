-- One step of a waiter, run right after its BLPOP wakes or times out (the heartbeat): claims the
-- lock if it was granted, else renews the waiter's lease in the queue (joining it again at the
-- end if a failover or a restart lost it), hands the lock on if its holder is gone, and says
-- whom to watch next.
-- KEYS: the lock's keys. ARGV: token ttl_ms host pid user cmd mode limit.
-- Returns {1, fence, slot} when the lock is ours now, else the waiting reply of common.lua.
local d, id, limit, bad = prologue()
if bad then return bad end

local ours, fence, slot, claimed = held_by(d.t, id, d.m)
if not ours then
  if redis.call('ZSCORE', KEYS[K_Q], id) then
    redis.call('ZADD', KEYS[K_WL], NOW + LEASE_MS, id)
  else
    if d.m == 'n' then redis.call('SET', KEYS[K_LIMIT], limit) end
    enqueue(id, d)
  end
  advance()
  ours, fence, slot, claimed = held_by(d.t, id, d.m)
end
if ours then
  if not claimed then claim(id, d.m, d.ttl) end
  return {1, fence, slot}
end
return waiting(id)
