-- A waiter gives up (--wait ran out, a signal): it leaves the queue, or gives back a grant it has
-- not claimed, and wakes whoever watched it. A wait that ran out goes into the history as busy,
-- naming the holder it waited for, as every busy event does.
-- KEYS: the lock's keys. ARGV: cfg, token, reason ("t": the wait ran out; "": interrupted).
-- Returns {1, more, push}.
local token = ARGV[2]
local id = id_of(token)
CALLER = id
if redis.call('ZSCORE', K.q, id) then
  if ARGV[3] == 't' then
    local d = load_waiter(id)
    local host, pid, cmd, _, lingering = holder_view(nil)
    event(EVENT.busy, {EV.host, d.h, EV.pid, d.p, EV.user, d.u, EV.cmd, d.c,
                       EV.waited, d.js and tostring(NOW - tonumber(d.js)) or '', EV.id, id,
                       EV.holder_host, host, EV.holder_pid, pid, EV.holder_cmd, cmd, EV.lingering, lingering})
  end
  remove_waiter(id)
else
  local mode = hold_kind(token, id) or 'x'
  local ours, _, _, claimed = held_by(token, id, mode)
  if ours and not claimed then
    if mode == 'x' then
      redis.call('DEL', K.lock, K.info)
      lock_written()
    else
      remove_holder(id)
    end
  end
end
redis.call('ZREM', K.gone, id)
redis.call('HDEL', K.w, id .. '.' .. WAITER.superseded_by)
wake(K.mb)
advance()
set_expiries()
return reply(CODE.done)
