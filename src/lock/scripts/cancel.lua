-- A waiter gives up (--wait ran out, a signal): it leaves the queue, or gives back a grant it has
-- not claimed, and wakes whoever watched it. A wait that ran out goes into the history as busy,
-- naming the holder it waited for, as every busy event does.
-- KEYS: the lock's keys. ARGV: protocol.txt, call cancel: the token, the reason ("t": the wait ran
-- out; "": interrupted).
-- Returns {1, more, push}.
local a = A.cancel
local token = arg(a.token)
local id = id_of(token)
C.caller = id
if redis.call('ZSCORE', K.q, id) then
  if arg(a.reason) == 't' then
    local d = load_waiter(id)
    local who, _, lingering = holder_view(nil)
    event(EVENT.busy, who_event(d.who, {EV.waited, d.joined and tostring(NOW - tonumber(d.joined)) or '', EV.id, id,
                                        EV.holder_host, who.host, EV.holder_pid, who.pid, EV.holder_cmd, who.cmd,
                                        EV.lingering, lingering}))
  end
  remove_waiter(id)
else
  local mode = hold_kind(token, id) or 'x'
  local ours, _, _, claimed = held_by(token, id, mode)
  if ours and not claimed then
    if mode == 'x' then
      redis.call('DEL', K.lock, K.info)
      wrote('lock', false, 'view')
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
