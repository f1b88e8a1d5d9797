-- Shared by every lock script (see call.lua): --preempt, and the call's start.

-- ---- --preempt.

-- Asks the exclusive holder to stop for the waiting preemptor id (d), if it gave --preemptible: the
-- request (pb, who; pi, its id, in :info) names the first preemptor that asked and still waits.
-- Until the holder has seen it (ps, set by its renewal), each call pushes the holder's mailbox
-- again: a waiter that watched that mailbox may have taken the push. A lingering hold ends at
-- once. Returns whether the holder was asked (or is gone).
local function preempt(d, id)
  local v = hmget(K.info, INFO.id, INFO.preemptible, INFO.preempt_by, INFO.lingering, INFO.preemptor,
                  INFO.preempt_seen)
  if not lock_value() or v[INFO.preemptible] ~= '1' then return false end
  if v[INFO.lingering] == '1' then
    redis.call('DEL', K.lock, K.info)
    wrote('lock', false, 'view')
    return true
  end
  if v[INFO.preempt_seen] == '1' then return true end
  local asker = v[INFO.preemptor]
  if asker and asker ~= id and still_waiting(asker) then return true end
  redis.call('HSET', K.info, INFO.preempt_by, who_text(d.who), INFO.preemptor, id)
  changed('view')
  C.push[#C.push + 1] = v[INFO.id]
  return true
end

preempt_next = function()
  local first = first_preemptor()
  if first and still_waiting(first) then preempt(load_waiter(first), first) end
end

-- This call's state. (The function library leaves this line out: each of its functions calls
-- begin with its own KEYS and ARGV.)
begin(KEYS, ARGV)
