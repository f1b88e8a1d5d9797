-- Gives the lock back only if the token still holds it, and hands it to the next waiter. With
-- --min-hold, a used hold released before its time lingers (no process behind it) until then.
-- KEYS: the lock's keys. ARGV: protocol.txt, call release: the token, the command's exit status
-- ('' if none), then who the caller is and its fence, for the history when the token no longer
-- holds the lock, then whether the hold was used, and so may linger: '' never used (a give-back:
-- a run that did not start its command, a failed Redlock attempt; never lingers, "returned" in the
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
local a = A.release
local token, status, used, retry = arg(a.token), arg(a.exit), arg(a.used), arg(a.retry) == '1'
local outcome, measured = arg(a.outcome) or '', arg(a.measured) or ''
local loss = outcome == OUTCOME.not_owned or outcome == OUTCOME.renewals_failed or outcome == OUTCOME.deadline or
             outcome == OUTCOME.restarted
local id = id_of(token)
C.caller = id

-- What both paths read of the exclusive holder's :info, by field.
local function read_info()
  return hmget_list(K.info, with_record(RECORD.who, 'info', INFO.fence, INFO.since, INFO.linger_until,
                                        INFO.preempt_by, INFO.tick_ran, INFO.history, INFO.preempt_seen,
                                        INFO.preemptor, INFO.tick, INFO.tick_period))
end

-- Until when a used hold lingers (nil: it does not): linger_until, the minimum recorded at the
-- claim, for an acquire hold's release ('h').
local function lingers_until(linger_until)
  if used == 'h' then return tonumber(linger_until or '') end
  if used ~= '' then return NOW + (tonumber(used) or 0) end
  return nil
end

-- The common case first, in the fewest commands: the exclusive holder's release, used or not,
-- with nobody else there (no queue, shared holder, semaphore or notice), no preempt request, no
-- --once-per tick marked run to give back, and nothing to linger. It writes what the full path
-- below writes in that case; anything else goes there, having written nothing (what it read of the
-- exclusive holder's :info is not read again: read).
local read
if redis.call('GET', K.lock) == token then
  C.lock_read, C.lock_value = true, token
  local v = read_info()
  read = v
  local linger_until = lingers_until(v[INFO.linger_until])
  if not (v[INFO.preempt_by] and v[INFO.preempt_by] ~= '') and not (used == '' and v[INFO.tick_ran]) and
     not (linger_until and linger_until > NOW) and quiet() then
    history_known(v[INFO.history])
    redis.call('DEL', K.lock, K.info)
    local since = v[INFO.since]
    local held = measured ~= '' and measured or (since and tostring(NOW - tonumber(since)) or '')
    event(used == '' and EVENT.returned or (loss and EVENT.lost or EVENT.released),
          who_event(record_from(RECORD.who, 'info', v),
                    {EV.fence, v[INFO.fence], EV.held, held, EV.exit, status, EV.id, id, EV.outcome, outcome,
                     EV.tick, v[INFO.tick], EV.period, v[INFO.tick_period]}))
    return reply(CODE.released)
  end
end
local kind = hold_kind(token, id)
if not kind then
  local bad = check_types(token)
  if bad then return refuse(bad) end
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
  -- Never used, its lease gone: a --once-per tick it marked run is not done.
  if used == '' then tick_return(id) end
  -- (Its holder did not know: its token no longer owned the lock.)
  if outcome ~= '' and not loss then outcome = OUTCOME.not_owned end
  event(EVENT.lost, who_event(record_args(RECORD.who, a.who), {EV.fence, arg(a.fence), EV.held, measured, EV.exit,
                                                               status, EV.id, id, EV.outcome, outcome}),
        ended == EVENT.expired)
  -- Its lock is gone (deleted, or expired with nobody after it) and its end is now in the
  -- history: the next holder must not record it again as expired.
  if redis.call('EXISTS', K.lock) == 0 and redis.call('HGET', K.info, INFO.id) == id then
    redis.call('DEL', K.info)
  end
  return reply(CODE.not_held)
end

-- The hold's record: the exclusive holder's :info, or the holder's fields in :hi (which has no
-- preempt request: a shared hold is never preempted).
local v, place
if kind == 'x' then
  v, place = read or read_info(), 'info'
  history_known(v[INFO.history])
else
  v, place = hmget_of(K.hi, id, with_record(RECORD.who, 'holder', HOLDER.fence, HOLDER.since, HOLDER.linger_until)),
             'holder'
end
local fence, since = v[INFO.fence], v[INFO.since]
if kind ~= 'x' then fence, since = v[HOLDER.fence], v[HOLDER.since] end
local held = measured ~= '' and measured or (since and tostring(NOW - tonumber(since)) or '')
local ev = who_event(record_from(RECORD.who, place, v),
                     {EV.fence, fence, EV.held, held, EV.exit, status, EV.id, id, EV.outcome, outcome,
                      EV.tick, v[INFO.tick] or false, EV.period, v[INFO.tick_period] or false})
-- A --preempt request: the hold ended preempted only if the holder saw the request (ps, marked by
-- its renewal: its stop began then); it does not linger while its preemptor still waits. A request
-- whose preemptor is gone, unseen, is neither.
local asked_by = kind == 'x' and v[INFO.preempt_by]
local asked = asked_by and asked_by ~= ''
local preempted = asked and v[INFO.preempt_seen] == '1'
local wanted = asked and v[INFO.preemptor] and still_waiting(v[INFO.preemptor])
if used == '' then
  event(EVENT.returned, ev)
  -- Never used: a --once-per tick it marked run is not done.
  if kind == 'x' and v[INFO.tick_ran] then tick_return(id) end
elseif preempted then
  event(EVENT.preempted, put(ev, {EV.by, asked_by}))
elseif loss then
  event(EVENT.lost, ev)
else
  event(EVENT.released, ev)
end

local linger_until = lingers_until(kind == 'x' and v[INFO.linger_until] or v[HOLDER.linger_until])
if linger_until and linger_until > NOW and not wanted then
  if kind == 'x' then
    redis.call('SET', K.lock, '~' .. id, 'PX', linger_until - NOW)
    wrote('lock', '~' .. id, 'view')
    redis.call('HSET', K.info, INFO.lingering, 1, INFO.expires, linger_until)
    redis.call('PEXPIRE', K.info, linger_until - NOW + G.history)
  else
    redis.call('HSET', K.hi, id .. '.' .. HOLDER.token, '~' .. id, id .. '.' .. HOLDER.lingering, 1)
    redis.call('ZADD', K.h, 'XX', linger_until, id)
    changed('view')  -- (its lease is shorter now: the head's step must see when it ends)
  end
  set_expiries()
  return reply(CODE.released)
end

if kind == 'x' then
  redis.call('DEL', K.lock, K.info)
  -- (The key is known free now: not read again. An exclusive release that hands the lock to the
  -- head of the queue changes, for the waiters behind, only who is the head.)
  wrote('lock', false, 'due')
else
  remove_holder(id)
end
-- Nobody waits (and nobody holds shared): nobody to wake, nothing to hand on.
if quiet() then return reply(CODE.released) end
wake(K.mb)
advance()
set_expiries()
return reply(CODE.released)
