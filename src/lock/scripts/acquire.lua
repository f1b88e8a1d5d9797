-- Takes the lock, or a place in its queue, in one atomic step.
-- KEYS: the lock's keys (see common.lua). ARGV: token ttl_ms host pid user cmd mode limit queue
-- (1: join the queue when it cannot be taken now; 0: -n), then the tokens of enclosing holds.
-- Returns {1, fence, slot} when taken; {2, fence, pttl, i} when the enclosing hold ARGV[9 + i]
-- owns it (re-entry); {0, pttl, host, pid, cmd, since, now, queue length} when busy (-n);
-- or the waiting reply of common.lua once queued.
local d, id, limit, bad = prologue()
if bad then return bad end

-- Our own token: an earlier attempt whose answer was lost took it, or queued it.
local ours, fence, slot, claimed = held_by(d.t, id, d.m)
if ours then
  if not claimed then claim(id, d.m, d.ttl) end
  return {1, fence, slot}
end
if redis.call('ZSCORE', KEYS[K_Q], id) then
  redis.call('ZADD', KEYS[K_WL], NOW + LEASE_MS, id)
  return waiting(id)
end

-- Re-entry: the lock is held by an enclosing hold of the caller's process tree.
local owner = redis.call('GET', KEYS[K_LOCK])
for i = 10, #ARGV do
  local tok = ARGV[i]
  local hid = id_of(tok)
  if (owner and owner == tok) or (not owner and redis.call('HGET', KEYS[K_HI], hid .. '.t') == tok and
                                  redis.call('ZSCORE', KEYS[K_H], hid)) then
    -- A shared hold cannot become exclusive inside itself: the inner request would wait for ever.
    if d.m == 'x' and not owner then return redis.error_reply('RLOCKUPGRADE shared hold') end
    local f = owner and redis.call('HGET', KEYS[K_INFO], 'fence') or redis.call('HGET', KEYS[K_HI], hid .. '.f')
    local pttl = owner and redis.call('PTTL', KEYS[K_LOCK]) or
                 math.floor(tonumber(redis.call('ZSCORE', KEYS[K_H], hid)) - NOW)
    return {2, tonumber(f or '0'), pttl, i - 9}
  end
end

-- Nobody may jump the queue: the lock is taken at once only when no one waits for it.
advance()
if redis.call('ZCARD', KEYS[K_Q]) == 0 and can_take(d.m, limit) then
  fence, slot = grant(id, d, true, limit)
  return {1, fence, slot}
end
if ARGV[9] == '1' then
  if d.m == 'n' then redis.call('SET', KEYS[K_LIMIT], limit) end
  enqueue(id, d)
  return waiting(id)
end
tidy_limit()
local info = redis.call('HMGET', KEYS[K_INFO], 'host', 'pid', 'cmd', 'since')
local pttl = redis.call('PTTL', KEYS[K_LOCK])
if not info[1] then
  local first = redis.call('ZRANGE', KEYS[K_H], 0, 0)
  if first[1] then
    info = redis.call('HMGET', KEYS[K_HI], first[1] .. '.h', first[1] .. '.p', first[1] .. '.c', first[1] .. '.s')
    pttl = math.floor(tonumber(redis.call('ZSCORE', KEYS[K_H], first[1])) - NOW)
  end
end
return {0, pttl, info[1], info[2], info[3], info[4], NOW, redis.call('ZCARD', KEYS[K_Q])}
