-- Shared by every lock script (see call.lua): taking the lock.

-- ---- Taking the lock.

-- The exclusive holder's record in :info, and its lease: d (the contender), its id and fence, its
-- lease px and linger_until; claimed: 1 when it holds for its lease, 0 while only granted.
-- grant writes it, as does the uncontended acquire (acquire.lua): one writer for both.
local function write_info(id, d, fence, px, claimed, linger_until)
  local c = C
  local preemptible = has(d.options, OPT.preemptible) and '1' or '0'
  -- (The holder's who and the fields after it in one list of the right size.)
  redis.call('HSET', K.info, INFO.id, id, INFO.version, VERSION,
             unpack(RECORD.who.list.info(d.who, INFO.since, c.now_arg, INFO.fence, fence, INFO.ttl, d.ttl,
                                         INFO.claimed, claimed, INFO.expires, NOW + px, INFO.linger_until,
                                         linger_until, INFO.preemptible, preemptible, INFO.joined,
                                         d.joined or c.now_arg, INFO.history, keep_history())))
  redis.call('PEXPIRE', K.info, px + G.history)
end

-- Gives the lock to contender d: for its lease when it takes it itself (claimed), for the claim
-- window when it is granted to a waiter. The minimum hold counts from the claim, and on Redlock
-- from phase 2 (merge.lua), once the quorum holds. Returns fence, slot.
local function grant(id, d, claimed, limit)
  local c = C
  local fence = next_fence()
  local linger_until = ''
  if claimed and not has(d.options, OPT.redlock) then linger_until = min_hold_until(d.min_hold) end
  local px = claimed and lease_ms(d.ttl, linger_until) or G.claim
  local slot = ''
  if d.mode == 'x' then
    note_expired()
    redis.call('SET', K.lock, d.token, 'PX', px)
    -- (An exclusive grant to the head of the queue changes, for the waiters behind, only who is
    -- the head.)
    wrote('lock', d.token, 'due')
    c.noted = false
    if not c.info_clean then redis.call('DEL', K.info) end
    wrote('info', false)
    write_info(id, d, fence, px, claimed and 1 or 0, linger_until)
    if claimed then tick_take(d) end
  else
    wrote('queue', nil, 'view')
    if d.mode == 'n' then
      wrote('slots')
      redis.call('HSET', K.sem, SEM.limit, limit)
      slot = take_slot(limit)
    end
    redis.call('ZADD', K.h, NOW + px, id)
    local fields = put_record({}, RECORD.who, 'holder', d.who, id .. '.')
    put(fields, {id .. '.' .. HOLDER.token, d.token, id .. '.' .. HOLDER.mode, d.mode,
                 id .. '.' .. HOLDER.version, VERSION, id .. '.' .. HOLDER.since, NOW,
                 id .. '.' .. HOLDER.fence, fence, id .. '.' .. HOLDER.ttl, d.ttl, id .. '.' .. HOLDER.slot, slot,
                 id .. '.' .. HOLDER.claimed, claimed and 1 or 0, id .. '.' .. HOLDER.joined, d.joined or NOW,
                 id .. '.' .. HOLDER.linger_until, linger_until})
    redis.call('HSET', K.hi, unpack(fields))
  end
  return fence, slot
end

-- A waiter's record in :w, as enqueue wrote it.
local function load_waiter(id)
  local v = hmget_of(K.w, id, with_record(RECORD.who, 'waiter', WAITER.token, WAITER.mode, WAITER.since,
                                          WAITER.ttl, WAITER.options, WAITER.watching))
  return {token = v[WAITER.token], mode = v[WAITER.mode], who = record_from(RECORD.who, 'waiter', v),
          joined = v[WAITER.since], ttl = v[WAITER.ttl], options = v[WAITER.options], watching = v[WAITER.watching]}
end

-- Grants the lock to the live waiters at the head of the queue that can have it now: one
-- exclusive waiter, or a run of shared ones, or as many semaphore waiters as there are free
-- slots. Dead waiters at the head are dropped on the way, never granted.
local function advance()
  local c = C
  reap()
  if quiet() then return end
  local limit  -- (read for a semaphore waiter only: the others' holds do not count slots)
  while true do
    local head = redis.call('ZRANGE', K.q, 0, 0)
    if #head == 0 then break end
    local id = head[1]
    local lease = redis.call('ZSCORE', K.wl, id)
    local d = nil
    if lease and tonumber(lease) > NOW then d = load_waiter(id) end
    if not d or not d.token then
      if not spend() then break end
      remove_waiter(id)  -- dead (its lease ran out), or half-written: drop it
    else
      if d.mode == 'n' and not limit then limit = semaphore_limit() end
      if not can_take(d.mode, limit) then break end
      if not spend() then break end
      remove_waiter(id, d.mode == 'x')
      grant(id, d, false, limit)
      -- It sleeps on someone else's mailbox (a waiter dropped since), or is a preemptor, which
      -- may not watch the exclusive holder (see waiting): the caller wakes it on its own mailbox,
      -- twice, as the waiter behind it watches that mailbox too and may take one push (its
      -- heartbeat, 2.5s behind others, would come after the claim window).
      if (d.watching ~= c.caller or has(d.options, OPT.preempt)) and id ~= c.caller then
        c.push[#c.push + 1] = id
        c.push[#c.push + 1] = id
      end
      -- A preemptible one granted while a preemptor waits is asked to stop at once.
      if d.mode == 'x' and has(d.options, OPT.preemptible) then preempt_next() end
      if d.mode == 'x' then break end
    end
  end
  tidy_limit()
end

-- Whether contender (token, id, mode) holds the lock, and its fence, slot and claim state.
local function held_by(token, id, mode)
  if mode == 'x' then
    if lock_value() ~= token then return false end
    local v = hmget(K.info, INFO.fence, INFO.claimed)
    return true, tonumber(v[INFO.fence] or '0'), '', v[INFO.claimed] == '1'
  end
  if quiet() then return false end
  local expiry = redis.call('ZSCORE', K.h, id)
  if not expiry or tonumber(expiry) <= NOW then return false end
  local v = hmget_of(K.hi, id, {HOLDER.token, HOLDER.fence, HOLDER.slot, HOLDER.claimed})
  if v[HOLDER.token] ~= token then return false end
  return true, tonumber(v[HOLDER.fence] or '0'), v[HOLDER.slot] or '', v[HOLDER.claimed] == '1'
end

-- The kind of hold token has ('x', or the mode of a shared or semaphore hold), or nil.
local function hold_kind(token, id)
  if lock_value() == token then return 'x' end
  if quiet() then return nil end
  local expiry = redis.call('ZSCORE', K.h, id)
  if expiry and tonumber(expiry) > NOW and redis.call('HGET', K.hi, id .. '.' .. HOLDER.token) == token then
    return redis.call('HGET', K.hi, id .. '.' .. HOLDER.mode)
  end
  return nil
end

-- Turns a grant into a hold for the contender's full lease; the history records the acquisition.
-- known: for an exclusive hold, :info's joined and fence if the caller read them already.
local function claim(id, d, known)
  local linger_until = min_hold_until(d.min_hold)
  local joined, fence
  if d.mode == 'x' then
    local v = known or hmget(K.info, INFO.joined, INFO.fence)
    local px = lease_ms(d.ttl, linger_until)
    joined, fence = v[INFO.joined], v[INFO.fence]
    redis.call('PEXPIRE', K.lock, px)
    wrote('lease')
    redis.call('HSET', K.info, INFO.claimed, 1, INFO.expires, NOW + px, INFO.linger_until, linger_until)
    redis.call('PEXPIRE', K.info, px + G.history)
    tick_take(d)
  else
    local v = hmget_of(K.hi, id, {HOLDER.joined, HOLDER.fence})
    joined, fence = v[HOLDER.joined], v[HOLDER.fence]
    redis.call('ZADD', K.h, 'XX', NOW + lease_ms(d.ttl, linger_until), id)
    changed('view')
    redis.call('HSET', K.hi, id .. '.' .. HOLDER.claimed, 1, id .. '.' .. HOLDER.linger_until, linger_until)
    -- Whoever waits behind it may be granted too (a run of shared waiters, free slots) or must
    -- now watch every holder: wake it.
    wake(K.mb)
  end
  event(EVENT.acquired, who_event(d.who, {EV.fence, fence, EV.waited, joined and tostring(NOW - tonumber(joined)) or '',
                                          EV.id, id, EV.tick, d.tick or false, EV.period, d.period or false}))
end

-- Tells the superseded waiter id to leave (it reads the notice at its next step; the caller
-- pushes its mailbox so that this is at once).
local function supersede(id, by)
  local c = C
  wrote('queue')
  local d = load_waiter(id)
  remove_waiter(id)
  redis.call('HSET', K.w, id .. '.' .. WAITER.superseded_by, by)
  redis.call('ZADD', K.gone, NOW + 4 * G.lease, id)
  event(EVENT.superseded, who_event(d.who, {EV.waited, d.joined and tostring(NOW - tonumber(d.joined)) or '',
                                            EV.by, by, EV.id, id}))
  c.push[#c.push + 1] = id
end

-- A place in the queue: in arrival order, or with preempt at the front (behind earlier
-- preemptors, whose scores are below 0). A superseding waiter replaces the older superseding ones.
-- A plain one, at the end, changes for the others only the length of the queue (see changed).
-- at: the score of a waiter that joins again in its old order (see rejoin_at), else nil; it
-- replaces only the superseding ones that arrived before it.
local function enqueue(id, d, preempt, at)
  local c = C
  local supersedes = has(d.options, OPT.supersede)
  wrote('queue', nil, (preempt or supersedes or at) and 'view' or 'due')
  -- (at: in its place among the others, whose scores it does not repeat: one of its old master.)
  local score
  if at then
    score = at
  elseif preempt then
    local last = redis.call('ZREVRANGEBYSCORE', K.q, '(0', '-inf', 'WITHSCORES', 'LIMIT', 0, 1)
    score = tonumber(c.now_us) - 4e15
    if last[2] and tonumber(last[2]) >= score then score = tonumber(last[2]) + 1 end
  else
    local last = redis.call('ZRANGE', K.q, -1, -1, 'WITHSCORES')
    score = tonumber(c.now_us)
    if last[2] and tonumber(last[2]) >= score then score = tonumber(last[2]) + 1 end
  end
  if supersedes then
    for _, old in ipairs(redis.call('ZRANGEBYSCORE', K.sq, '-inf', at and '(' .. string.format('%.0f', at) or '+inf',
                                    'LIMIT', 0, BUDGET)) do
      if not spend() then break end
      supersede(old, who_text(d.who))
    end
    redis.call('ZADD', K.sq, score, id)
  end
  redis.call('ZADD', K.q, score, id)
  c.joined = score
  if at then
    -- Ahead of waiters already queued: the one now just behind it still watches the mailbox of
    -- the one before it (or the holder's), whose push at the hand-off it may take instead of this
    -- waiter (see advance). It is woken to step and watch this one (twice: the one behind it
    -- watches its mailbox too).
    local next_rank = redis.call('ZRANK', K.q, id) + 1
    local behind = redis.call('ZRANGE', K.q, next_rank, next_rank)[1]
    if behind then
      c.push[#c.push + 1] = behind
      c.push[#c.push + 1] = behind
    end
  end
  redis.call('ZADD', K.wl, NOW + G.lease, id)
  local prefix = id .. '.'
  local fields = put_record({}, RECORD.who, 'waiter', d.who, prefix)
  put(fields, {prefix .. WAITER.token, d.token, prefix .. WAITER.mode, d.mode, prefix .. WAITER.version, VERSION,
               prefix .. WAITER.since, NOW, prefix .. WAITER.ttl, d.ttl, prefix .. WAITER.options, d.options or ''})
  redis.call('HSET', K.w, unpack(fields))
end

-- Where a waiter joins the queue again when its place is gone (a failover, or a restart, lost it)
-- while it kept it alive: at the arrival it had (the queue's score, us, as its old place's
-- waiting reply gave it; on the old master's clock), so that the waiters that move keep their
-- order, and stay ahead of those that came after them. Bounded: never later than now (an arrival
-- ahead of this server's clock would put it behind requests that came after it), and never
-- earlier than the moment it started waiting by this server's clock, give or take a second: now
-- less waited (ms, by the waiter's own clock since its request began) less 1s. So no waiter goes
-- ahead of a request that reached the server more than a second before it started waiting. nil
-- without an arrival (a waiter whose place may have lapsed for its own reasons joins at the end).
local function rejoin_at(arrival, waited, preempt)
  local at, w = tonumber(arrival or ''), tonumber(waited or '')
  if not at or not w then return nil end
  local now = tonumber(C.now_us) - (preempt and 4e15 or 0)
  local earliest = now - (w + 1000) * 1000
  if at > now then at = now end
  if at < earliest then at = earliest end
  return at
end

-- The first preemptor in the queue, or nil.
local function first_preemptor()
  return redis.call('ZRANGEBYSCORE', K.q, '-inf', '(0', 'LIMIT', 0, 1)[1]
end
