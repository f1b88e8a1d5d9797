-- Gives the lock back only if the token still holds it, and hands it to the next waiter. With
-- --min-hold, a used hold released before its time lingers (no process behind it) until then.
-- KEYS: the lock's keys. ARGV: cfg, token, the command's exit status ('' if none), then who the
-- caller is (host pid user cmd fence), for the history when the token no longer holds the lock,
-- then whether the hold was used, and so may linger: '' or none, never used (a give-back: a run
-- that did not start its command, a failed Redlock attempt; never lingers, "returned" in the
-- history); 'h', used, lingering until the minimum the hold recorded at its claim (the release of
-- an acquire hold); a number, used, lingering that many ms from now (a run: what is left of
-- --min-hold since its command started, measured on the client's monotonic clock); then '1' for a
-- retry after an attempt whose answer was lost; then how the hold ended (an OUTCOME word, '' for
-- a hold never used): a loss (the holder stopped its command because the lock was lost) is
-- recorded as lost, whether or not the token still holds the lock; then how long the hold lasted
-- as its holder measured it (ms, '' to measure it here: a release after a loss comes late, once
-- the server answers again).
-- Returns {1, more, push} when released (or left lingering), {0, more, push} when the token no
-- longer holds the lock.
local token, status, used, retry = ARGV[2], ARGV[3], ARGV[9] or '', ARGV[10] == '1'
local outcome, measured = ARGV[11] or '', ARGV[12] or ''
local loss = outcome == OUTCOME.not_owned or outcome == OUTCOME.renewals_failed or outcome == OUTCOME.deadline or
             outcome == OUTCOME.restarted
local id = id_of(token)
CALLER = id
-- The common case first, in the fewest commands and with little Lua: the exclusive holder's
-- release, used or not, with nobody else there (no queue, shared holder, semaphore or notice),
-- no preempt request, no --once-per tick and nothing to linger. What it does is what the full
-- path below does in that case; anything else goes there, having written nothing (what it read of
-- the exclusive holder's :info is not read again: read).
-- (What both paths read of the exclusive holder's :info, by field.)
local function read_info()
  return hmget(K.info, INFO.host, INFO.pid, INFO.user, INFO.cmd, INFO.fence, INFO.since, INFO.linger_until,
               INFO.preempt_by, INFO.tick, INFO.history, INFO.preempt_seen, INFO.preemptor)
end
local read
if redis.call('GET', K.lock) == token then
  LOCK_READ, LOCK_VALUE = true, token
  local v = read_info()
  read = v
  local linger_until = nil
  if used == 'h' then
    linger_until = tonumber(v[INFO.linger_until] or '')
  elseif used ~= '' then
    linger_until = NOW + (tonumber(used) or 0)
  end
  if not (v[INFO.preempt_by] and v[INFO.preempt_by] ~= '') and not v[INFO.tick] and
     not (linger_until and linger_until > NOW) and quiet() then
    history_known(v[INFO.history])
    redis.call('DEL', K.lock, K.info)
    local since = v[INFO.since]
    local held = measured ~= '' and measured or (since and tostring(NOW - tonumber(since)) or '')
    event(used == '' and EVENT.returned or (loss and EVENT.lost or EVENT.released),
          {EV.host, v[INFO.host], EV.pid, v[INFO.pid], EV.user, v[INFO.user], EV.cmd, v[INFO.cmd], EV.fence,
           v[INFO.fence], EV.held, held, EV.exit, status, EV.id, id, EV.outcome, outcome})
    return {CODE.released, 0, PUSH}
  end
end
local kind = hold_kind(token, id)
if not kind then
  local bad = check_types(token)
  if bad then return bad end
  -- A retry whose first attempt ran: the hold lingers under its own mark, released.
  if retry and (redis.call('GET', K.lock) == '~' .. id or
                redis.call('HGET', K.hi, id .. '.' .. HOLDER.token) == '~' .. id) then
    return reply(CODE.released)
  end
  -- Whether its end is recorded already: by an earlier attempt whose answer was lost (released
  -- it, or recorded its loss), or as expired by the next holder (its loss is recorded now, with
  -- how long it lasted and why, and not counted again). Only a hold that was used has an end; a
  -- retried give-back cannot tell.
  local ended = used ~= '' and recorded_end(id)
  if retry and (ended == EVENT.released or ended == EVENT.preempted) then return reply(CODE.released) end
  if ended == EVENT.lost or (retry and used == '') then return reply(CODE.not_held) end
  -- (Its holder did not know: its token no longer owned the lock.)
  if outcome ~= '' and not loss then outcome = OUTCOME.not_owned end
  event(EVENT.lost, {EV.host, ARGV[4], EV.pid, ARGV[5], EV.user, ARGV[6], EV.cmd, ARGV[7], EV.fence, ARGV[8],
                     EV.held, measured, EV.exit, status, EV.id, id, EV.outcome, outcome}, ended == EVENT.expired)
  -- Its lock is gone (deleted, or expired with nobody after it) and its end is now in the
  -- history: the next holder must not record it again as expired.
  if redis.call('EXISTS', K.lock) == 0 and redis.call('HGET', K.info, INFO.id) == id then
    redis.call('DEL', K.info)
  end
  return reply(CODE.not_held)
end

-- The hold's record: the exclusive holder's :info, or the holder's fields in :hi (which has no
-- preempt request: a shared hold is never preempted).
local host, pid, user, cmd, fence, since, linger, asked_by, seen, asker, tick
if kind == 'x' then
  local v = read or read_info()
  history_known(v[INFO.history])
  host, pid, user, cmd = v[INFO.host], v[INFO.pid], v[INFO.user], v[INFO.cmd]
  fence, since = v[INFO.fence], v[INFO.since]
  linger, asked_by, seen, asker, tick = v[INFO.linger_until], v[INFO.preempt_by], v[INFO.preempt_seen],
                                        v[INFO.preemptor], v[INFO.tick]
else
  local v = hmget_of(K.hi, id, HOLDER.host, HOLDER.pid, HOLDER.user, HOLDER.cmd, HOLDER.fence, HOLDER.since,
                     HOLDER.linger_until)
  host, pid, user, cmd, fence = v[HOLDER.host], v[HOLDER.pid], v[HOLDER.user], v[HOLDER.cmd], v[HOLDER.fence]
  since, linger = v[HOLDER.since], v[HOLDER.linger_until]
end
local held = measured ~= '' and measured or (since and tostring(NOW - tonumber(since)) or '')
local ev = {EV.host, host, EV.pid, pid, EV.user, user, EV.cmd, cmd, EV.fence, fence, EV.held, held, EV.exit, status,
            EV.id, id, EV.outcome, outcome}
-- A --preempt request: the hold ended preempted only if the holder saw the request (ps, marked by
-- its renewal: its stop began then); it does not linger while its preemptor still waits. A request
-- whose preemptor is gone, unseen, is neither.
local asked = asked_by and asked_by ~= ''
local preempted = asked and (kind ~= 'x' or seen == '1')
local wanted = asked and (kind ~= 'x' or (asker and still_waiting(asker)))
if used == '' then
  event(EVENT.returned, ev)
  -- Never used: its --once-per tick is not done.
  if tick then tick_return(id) end
elseif preempted then
  ev[#ev + 1] = EV.by
  ev[#ev + 1] = asked_by
  event(EVENT.preempted, ev)
elseif loss then
  event(EVENT.lost, ev)
else
  event(EVENT.released, ev)
end

local linger_until = nil
if used == 'h' then
  linger_until = tonumber(linger or '')
elseif used ~= '' then
  linger_until = NOW + (tonumber(used) or 0)
end
if linger_until and linger_until > NOW and not wanted then
  if kind == 'x' then
    redis.call('SET', K.lock, '~' .. id, 'PX', linger_until - NOW)
    lock_written()
    redis.call('HSET', K.info, INFO.lingering, 1, INFO.expires, linger_until)
    redis.call('PEXPIRE', K.info, linger_until - NOW + HISTORY)
  else
    redis.call('HSET', K.hi, id .. '.' .. HOLDER.token, '~' .. id, id .. '.' .. HOLDER.lingering, 1)
    redis.call('ZADD', K.h, 'XX', linger_until, id)
  end
  set_expiries()
  return reply(CODE.released)
end

if kind == 'x' then
  redis.call('DEL', K.lock, K.info)
  lock_written()
  -- (The lock's key is known free now: not read again.)
  LOCK_READ, LOCK_VALUE = true, false
  NOTED, INFO_CLEAN = true, true
else
  remove_holder(id)
end
-- Nobody waits (and nobody holds shared): nobody to wake, nothing to hand on.
if quiet() then return reply(CODE.released) end
wake(K.mb)
advance()
set_expiries()
return reply(CODE.released)
