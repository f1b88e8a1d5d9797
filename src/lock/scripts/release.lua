-- Gives the lock back only if the token still holds it, and hands it to the next waiter. With
-- --min-hold, a used hold released before its time lingers (no process behind it) until then.
-- KEYS: the lock's keys. ARGV: cfg, token, the command's exit status ('' if none), then who the
-- caller is (host pid user cmd fence), for the history when the token no longer holds the lock,
-- then whether the hold was used, and so may linger: '' or none, never used (a give-back: a run
-- that did not start its command, a failed Redlock attempt; never lingers, "returned" in the
-- history); 'h', used, lingering until the minimum the hold recorded at its claim (the release of
-- an acquire hold); a number, used, lingering that many ms from now (a run: what is left of
-- --min-hold since its command started, measured on the client's monotonic clock); then '1' for a
-- retry after an attempt whose answer was lost.
-- Returns {1, more, push} when released (or left lingering), {0, more, push} when the token no
-- longer holds the lock.
local token, status, used, retry = ARGV[2], ARGV[3], ARGV[9] or '', ARGV[10] == '1'
local id = id_of(token)
CALLER = id
local kind = hold_kind(token, id)
if not kind then
  local bad = check_types(token)
  if bad then return bad end
  -- A retry whose first attempt ran: the hold lingers under its own mark, released.
  if retry and (redis.call('GET', K.lock) == '~' .. id or redis.call('HGET', K.hi, id .. '.t') == '~' .. id) then
    return reply(1)
  end
  -- A retry cannot tell a hold its first attempt released from one lost before: not recorded.
  if retry then return reply(0) end
  event('lost', {'h', ARGV[4], 'p', ARGV[5], 'u', ARGV[6], 'c', ARGV[7], 'f', ARGV[8], 'x', status, 'id', id})
  -- Its lock is gone (deleted, or expired with nobody after it) and its end is now in the
  -- history: the next holder must not record it again as expired.
  if redis.call('EXISTS', K.lock) == 0 and redis.call('HGET', K.info, 'id') == id then
    redis.call('DEL', K.info)
  end
  return reply(0)
end

local v
if kind == 'x' then
  v = redis.call('HMGET', K.info, 'host', 'pid', 'user', 'cmd', 'fence', 'since', 'lu', 'pb', 'ps', 'pi', 'tk')
else
  v = redis.call('HMGET', K.hi, id .. '.h', id .. '.p', id .. '.u', id .. '.c', id .. '.f', id .. '.s', id .. '.lu',
                 id .. '.pb')
end
local held = v[6] and tostring(NOW - tonumber(v[6])) or ''
local ev = {'h', v[1], 'p', v[2], 'u', v[3], 'c', v[4], 'f', v[5], 'd', held, 'x', status, 'id', id}
-- A --preempt request: the hold ended preempted only if the holder saw the request (ps, marked by
-- its renewal: its stop began then); it does not linger while its preemptor still waits. A request
-- whose preemptor is gone, unseen, is neither.
local asked = v[8] and v[8] ~= ''
local preempted = asked and (kind ~= 'x' or v[9] == '1')
local wanted = asked and (kind ~= 'x' or (v[10] and still_waiting(v[10])))
if used == '' then
  event('returned', ev)
  -- Never used: its --once-per tick is not done.
  if v[11] then tick_return(id) end
elseif preempted then
  ev[#ev + 1] = 'by'
  ev[#ev + 1] = v[8]
  event('preempted', ev)
else
  event('released', ev)
end

local linger_until = nil
if used == 'h' then
  linger_until = tonumber(v[7] or '')
elseif used ~= '' then
  linger_until = NOW + (tonumber(used) or 0)
end
if linger_until and linger_until > NOW and not wanted then
  if kind == 'x' then
    redis.call('SET', K.lock, '~' .. id, 'PX', linger_until - NOW)
    lock_written()
    redis.call('HSET', K.info, 'lg', 1, 'exp', linger_until)
    redis.call('PEXPIRE', K.info, linger_until - NOW + HISTORY)
  else
    redis.call('HSET', K.hi, id .. '.t', '~' .. id, id .. '.lg', 1)
    redis.call('ZADD', K.h, 'XX', linger_until, id)
  end
  set_expiries()
  return reply(1)
end

if kind == 'x' then
  redis.call('DEL', K.lock, K.info)
  lock_written()
  NOTED = true
else
  remove_holder(id)
end
-- Nobody waits (and nobody holds shared): nobody to wake, nothing to hand on.
if quiet() then return reply(1) end
wake(K.mb)
advance()
set_expiries()
return reply(1)
