-- Shared by every lock script (CMake puts it in front of each one).
--
-- The keys of one lock, all under its hash tag and all declared by the caller, in the order of
-- lock/name.hpp (LockName::script_keys) and src/lock/protocol.txt (key; KEY: each one's index):
local K  -- the keys of this call:
--   lock   PREFIX{KEY}: the exclusive holder's token (PX: its lease), or a lingering mark
--   fence  fencing counter
--   info   the exclusive holder: HASH id host pid user cmd since fence ttl claimed ...
--   q      the queue: ZSET id -> arrival (server microseconds, made unique; below 0: preemptors)
--   w      the waiters: HASH "<id>.<field>"
--   wl     the waiters' leases: ZSET id -> expiry (server ms)
--   h      shared and semaphore holders: ZSET id -> expiry (server ms)
--   hi     their data: HASH "<id>.<field>"
--   sem    the semaphore: HASH limit, next (the highest slot handed out so far)
--   free   semaphore slots given back: ZSET slot -> slot
--   sq     the waiters that asked to supersede older ones: ZSET id -> arrival
--   gone   waiters told to leave (superseded): ZSET id -> when the notice lapses
--   log    the lock's history: STREAM
--   tick   --once-per: the last tick run: HASH t h at id (and pt ph pa: the one before)
--   mb     the caller's mailbox: pushed when its hold or its place ends
--   sum    the lock's summary: HASH of fixed fields (see summarize)
--   ep     what waiters see: STRING "epoch due" (see view_epoch)
-- (Each is looked up on first use: a call that touches two keys pays for two.)
local CALL_KEYS  -- this call's KEYS
local KEYS_BY_NAME = {__index = function(keys, name)
  local key = CALL_KEYS[KEY[name]]
  keys[name] = key
  return key
end}
local function lock_keys(KEYS)
  CALL_KEYS = KEYS
  return setmetatable({}, KEYS_BY_NAME)
end
-- A contender's id is the first 16 characters of its token (the rest, 128 bits, is the secret).
--
-- ARGV[1], for every script: the queue's timing and the log's length, set by the client (tests
-- scale the times): "lease_ms claim_ms mailbox_ms history_ms log_length summary" (summary: 0 or 1).
--
-- Waiting: each waiter blocks (BLPOP, outside Lua) on its own mailbox and on the mailbox of the
-- one just before it in the queue, or at the head, of the holders; whoever leaves pushes its own
-- mailbox. The next live waiter is granted the lock in the script that frees it (a claim window
-- of CLAIM); it claims the grant in its next wait step. A waiter whose lease in the queue (LEASE,
-- renewed by its heartbeat) ran out is dead: it is skipped and dropped, never granted. A grant
-- not claimed in time lapses and goes to the next one. A granted waiter that watched someone
-- else than the caller is named in the reply, and the caller pushes its mailbox.
--
-- Bounded work: no script removes, grants or reports more than BUDGET entries, whatever the
-- queue holds. What is left is reported (the reply's `more`), and the caller calls again at once:
-- the rest is amortised over calls, and no call can stall the server for its other clients.

local BUDGET = 20

local LEASE, CLAIM, MAILBOX, HISTORY, LOG_LENGTH
-- (As the arguments of commands, strings: a number given to redis.call is formatted at each call,
-- which costs more than the command it is for. LOG_LENGTH's, and the history's expiry: see
-- keep_history_key.)
local LOG_LENGTH_ARG, HISTORY_KEEP_ARG
local SUMMARY         -- the lock's summary is kept (ARGV[1]'s sixth number: 0 for a clean-up)

-- ('mh', written by earlier versions, is deleted with the rest.)
-- (So is a holder's 'x', of earlier versions too.)
local WAITER_FIELDS = {WAITER.token, WAITER.mode, WAITER.host, WAITER.pid, WAITER.user, WAITER.cmd, WAITER.since,
                       WAITER.ttl, WAITER.options, WAITER.watching, WAITER.superseded_by, 'mh'}
local HOLDER_FIELDS = {HOLDER.token, HOLDER.mode, HOLDER.host, HOLDER.pid, HOLDER.user, HOLDER.cmd, HOLDER.since,
                       HOLDER.fence, HOLDER.ttl, HOLDER.slot, HOLDER.claimed, HOLDER.keeper, HOLDER.watched,
                       HOLDER.joined, HOLDER.linger_until, HOLDER.lingering, 'x'}

local NOW, NOW_US     -- the server's clock: ms, and us as a string
local NOW_ARG         -- NOW as a string
local WORK            -- entries removed, granted or reported so far
local MORE            -- the budget ran out with work left: the caller calls again
local PUSH            -- ids whose mailboxes the caller pushes after the script
local CALLER          -- the caller's id
local ARGS            -- this call's ARGV
-- Work in proportion to what is due: what this call already knows.
local QUIET           -- nil: not asked yet; true: no queue, no shared holder, notice or semaphore
local REAPED          -- the dead entries due now are gone (reap ran to the end)
local NOTED           -- the lock's key is free and no expired holder is left to record
local LOCK_READ       -- LOCK_VALUE holds the lock key's value (false: none): the key has not
local LOCK_VALUE      -- been written since it was read (a script's clock stands still: no expiry)
local VIEW            -- what check_types read of the holder (lock_value_ours), while it holds (current_view)
local EP_DROPPED      -- this call deleted :ep (bump) and has not written it since (view_epoch)
local NO_SEM          -- :sem and :free are known missing (tidy_limit), and not written since
local INFO_CLEAN      -- :info is missing, or has no field a grant would not overwrite
local HISTORY_UNTIL   -- the history and the summary, where they exist, expire no earlier (or nil)
local JOINED          -- the score of the place this call gave the caller in the queue (enqueue), or nil
local history_known   -- records an hx read in :info (defined with the history's expiries below)

-- The state of one call, set at its start: every script (and every function of the library)
-- begins with begin(KEYS, ARGV), so that nothing of one call is seen by the next.
local CFG_TEXT, CFG   -- the last ARGV[1] parsed, and its numbers (a client sends the same each call)
local function begin(keys, argv)
  K = lock_keys(keys)
  ARGS = argv
  local cfg = CFG
  if argv[1] ~= CFG_TEXT then
    cfg = {}
    for n in string.gmatch(argv[1], '%d+') do cfg[#cfg + 1] = tonumber(n) end
    -- (The history's expiry: HISTORY and its slack, see history_slack.)
    cfg.log_length, cfg.keep = string.format('%d', cfg[5]),
                               string.format('%d', cfg[4] + math.min(math.floor(cfg[4] / 16), 3600000))
    CFG_TEXT, CFG = argv[1], cfg
  end
  LEASE, CLAIM, MAILBOX, HISTORY, LOG_LENGTH = cfg[1], cfg[2], cfg[3], cfg[4], cfg[5]
  LOG_LENGTH_ARG, HISTORY_KEEP_ARG = cfg.log_length, cfg.keep
  SUMMARY = cfg[6] ~= 0
  local t = redis.call('TIME')
  -- (No arithmetic and no formatting of numbers: the microseconds padded to 6 digits, and the
  -- milliseconds are the digits before the last 3.)
  local us = t[2]
  NOW_US = t[1] .. string.sub('00000', #us) .. us
  NOW_ARG = string.sub(NOW_US, 1, -4)
  NOW = tonumber(NOW_ARG)
  WORK, MORE, PUSH, CALLER = 0, false, {}, ''
  QUIET, REAPED, NOTED = nil, false, false
  LOCK_READ, LOCK_VALUE = false, false
  VIEW, INFO_CLEAN, HISTORY_UNTIL = nil, false, nil
  EP_DROPPED, NO_SEM = false, false
  JOINED = nil
end

-- The lock key's value (false: none), read once until the call writes the key (lock_written).
local function lock_value()
  if not LOCK_READ then
    LOCK_VALUE = redis.call('GET', K.lock)
    LOCK_READ = true
  end
  return LOCK_VALUE
end

local bump  -- what waiters see changed (defined below)

local function lock_written()
  LOCK_READ, VIEW = false, nil
  bump()
end

-- Whether nobody waits, holds shared, has a notice or a semaphore slot (one command, asked once
-- per call; a call that writes any of these structures says so: QUIET = false). Everything that
-- walks them (reaping, handing on, expiries) is then skipped: the uncontended case touches only
-- the keys it needs.
local function quiet()
  if QUIET == nil then QUIET = redis.call('EXISTS', K.q, K.wl, K.h, K.gone, K.sem, K.free) == 0 end
  return QUIET
end

-- What waiters see (the holder, the queue, a grant, a lease cut short) changed: the epoch that a
-- light heartbeat compares (view_epoch) is dropped, and the next full step starts a new one. A
-- quiet lock has no waiter to tell, and a key this call deleted is not deleted again.
bump = function()
  if not EP_DROPPED and not quiet() then
    redis.call('DEL', K.ep)
    EP_DROPPED = true
  end
end

local function spend()
  if WORK >= BUDGET then
    MORE = true
    return false
  end
  WORK = WORK + 1
  return true
end

local function id_of(token)
  return string.sub(token, 1, 16)
end

-- The reply of every script: {code, more (0/1), {ids to push}, payload...}.
local function reply(code, ...)
  return {code, MORE and 1 or 0, PUSH, ...}
end

local function fields(id, names)
  local out = {}
  for i, f in ipairs(names) do out[i] = id .. '.' .. f end
  return out
end

-- HMGET of the fields of hash key, as a table keyed by field (false: missing).
local function hmget(key, ...)
  local names = {...}
  local v = redis.call('HMGET', key, ...)
  local out = {}
  for i, f in ipairs(names) do out[f] = v[i] end
  return out
end

-- The same for the fields of id in a hash of "<id>.FIELD" (:w, :hi), keyed by FIELD.
local function hmget_of(key, id, ...)
  local names = {...}
  local v = redis.call('HMGET', key, unpack(fields(id, names)))
  local out = {}
  for i, f in ipairs(names) do out[f] = v[i] end
  return out
end

-- Whether the string at the lock's key is rlock's: a holder's token (48 hex digits) or a lingering
-- mark (~ and the id), always with an expiry, of the holder that :info names (if it names one).
-- What it reads of the holder is kept for holder_view (VIEW), which then reads nothing again.
local function lock_value_ours(value)
  local pttl = redis.call('PTTL', K.lock)
  if pttl < 0 then return false end
  local id
  if #value == 48 and not string.find(value, '[^0-9a-f]') then
    id = string.sub(value, 1, 16)
  elseif #value == 17 and string.sub(value, 1, 1) == '~' and not string.find(value, '[^0-9a-f]', 2) then
    id = string.sub(value, 2)
  else
    return false
  end
  local v = hmget(K.info, INFO.id, INFO.host, INFO.pid, INFO.cmd, INFO.since, INFO.lingering, INFO.history)
  local holder = v[INFO.id]
  if holder and holder ~= id then return false end
  VIEW = {value = value, pttl = pttl, info = v}
  history_known(v[INFO.history])
  return true
end

-- token: the caller's, if it has one (a GET that returns it proves the value rlock's). What the
-- call already read of the lock's key (a string or none: LOCK_READ), and found rlock's (VIEW), is
-- not read again.
local function check_types(token)
  local value
  if LOCK_READ then
    value = LOCK_VALUE
  else
    value = redis.pcall('GET', K.lock)
    if type(value) == 'table' and value.err then
      local kind = redis.call('TYPE', K.lock)['ok']
      return redis.error_reply('WRONGTYPE ' .. K.lock .. ' holds a ' .. kind .. ', not an rlock lock')
    end
  end
  if value and value ~= token and not (VIEW and VIEW.value == value) and not lock_value_ours(value) then
    return redis.error_reply('RLOCKFOREIGN lock')
  end
  LOCK_READ, LOCK_VALUE = true, value
  return nil
end

-- What check_types read of the holder (VIEW) while it still holds: the lock's key has the value
-- it had, and neither the key nor its lease has been written since (lock_written, claim); else nil.
-- (:info's fields that VIEW keeps are written only with the key. Its PTTL is the lease as read
-- then: a script's clock runs on, so a later PTTL could be a millisecond or so smaller, and NOW,
-- read before it, plus it is still no later than the lease's end.)
local function current_view()
  if VIEW and lock_value() == VIEW.value then return VIEW end
  return nil
end

-- The history (K.log) and the summary (K.sum) expire HISTORY after the last event, give or take
-- HISTORY_SLACK: an event whose keys are known to last that long already (HISTORY_UNTIL, from :info's
-- hx, which the grant that set it made true) does not set their expiries again. Each expiry set is
-- HISTORY plus the slack, so that they only ever move later: the keys last at least HISTORY, at
-- most HISTORY plus the slack, after the last event. A key an event creates gets its expiry then.
local function history_slack()
  return math.min(math.floor(HISTORY / 16), 3600000)
end

history_known = function(until_ms)
  local at = tonumber(until_ms or '')
  if at and (not HISTORY_UNTIL or at > HISTORY_UNTIL) then HISTORY_UNTIL = at end
end

local function history_kept()
  return HISTORY_UNTIL ~= nil and HISTORY_UNTIL >= NOW + HISTORY
end

local function keep_history_key(key)
  redis.call('PEXPIRE', key, HISTORY_KEEP_ARG)  -- HISTORY + history_slack()
end

-- Makes the history and the summary last at least HISTORY from now; returns until when (for hx).
local function keep_history()
  if not history_kept() then
    keep_history_key(K.log)
    keep_history_key(K.sum)
    HISTORY_UNTIL = NOW + HISTORY + history_slack()
  end
  return HISTORY_UNTIL
end

-- Keeps the lock's summary (K.sum), for rlock check and metrics, even without a history: a count
-- per kind of event (n.KIND); the last start (s, sh: when, host); the last end of a hold (e, ek
-- kind, eh host, ex exit status, ed ms held); the last success, a release (not forced) whose exit
-- status is 0 or that had no command (ok, okh, okx, okd); the holds lost since then (sl). Fixed
-- fields; it expires with the history. Calls that only clean up after a failed attempt (SUMMARY
-- false) leave it alone, and so does another program's data at its key. at: the event's time (ms,
-- a string), the one its history entry has (the entry's id is taken when the XADD runs, a millisecond or so
-- after the call's clock was read).
local function summarize(kind, ev, at)
  if not SUMMARY then return end
  local count = redis.pcall('HINCRBY', K.sum, SUM.count .. kind, '1')
  if type(count) == 'table' then return end
  if kind == EVENT.acquired then
    local host = ''
    for i = 1, #ev, 2 do
      if ev[i] == EV.host then host = ev[i + 1] or '' break end
    end
    redis.call('HSET', K.sum, SUM.started, at, SUM.started_host, host)
  elseif kind == EVENT.released or kind == EVENT.lost or kind == EVENT.preempted or kind == EVENT.expired then
    -- (The fields it reads, without a table of them: an event has a few.)
    local host, exit, held, by = '', '', '', ''
    for i = 1, #ev, 2 do
      local f = ev[i]
      if f == EV.host then host = ev[i + 1] or ''
      elseif f == EV.exit then exit = ev[i + 1] or ''
      elseif f == EV.held then held = ev[i + 1] or ''
      elseif f == EV.by then by = ev[i + 1] or '' end
    end
    if kind == EVENT.released and (exit == '' or exit == '0') and by == '' then
      redis.call('HSET', K.sum, SUM.ended, at, SUM.ended_kind, kind, SUM.ended_host, host, SUM.ended_exit, exit,
                 SUM.ended_held, held, SUM.success, at, SUM.success_host, host, SUM.success_exit, exit,
                 SUM.success_held, held, SUM.lost_since_success, '0')
    else
      redis.call('HSET', K.sum, SUM.ended, at, SUM.ended_kind, kind, SUM.ended_host, host, SUM.ended_exit, exit,
                 SUM.ended_held, held)
    end
    if kind == EVENT.lost then redis.pcall('HINCRBY', K.sum, SUM.lost_since_success, '1') end
  end
  -- (A count of 1: the key may be new.)
  if count == 1 or not history_kept() then keep_history_key(K.sum) end
end

-- Appends one event to the lock's history (0: no history). ev: field list. The stream keeps at
-- least LOG_LENGTH events: MAXLEN ~ trims whole nodes of the stream (up to about 100 events more),
-- where an exact MAXLEN would cut inside a node on every append, at several times the cost.
local function event(kind, ev)
  if LOG_LENGTH == 0 then return summarize(kind, ev, NOW_ARG) end
  -- NOMKSTREAM: an XADD that would create the stream says so (nil), and is made again without it.
  local args = {K.log, 'NOMKSTREAM', 'MAXLEN', '~', LOG_LENGTH_ARG, '*', EV.kind, kind}
  local n = 8
  for i = 1, #ev, 2 do
    local x = ev[i + 1]
    if x and x ~= '' then
      args[n + 1], args[n + 2] = ev[i], x
      n = n + 2
    end
  end
  local added = redis.pcall('XADD', unpack(args))
  if type(added) == 'table' then
    if added.err and not string.find(added.err, 'WRONGTYPE', 1, true) then
      added = false  -- a server without NOMKSTREAM (before 6.2)
    elseif added.err then
      error(added)
    end
  end
  if not added then
    table.remove(args, 2)
    added = redis.call('XADD', unpack(args))
    keep_history_key(K.log)
  elseif not history_kept() then
    keep_history_key(K.log)
  end
  summarize(kind, ev, string.match(added, '^%d+') or NOW_ARG)
end

-- The next fencing token. A missing counter (never used, idle past HISTORY, or lost to a restart)
-- starts from the server's clock in microseconds: above every value it handed out before.
--
-- One INCR in the common case. The counter is set (with its expiry) when INCR created it. Its
-- value tells its age: it started from the clock and goes up by one a grant, far slower than the
-- clock. Its expiry is set again only when it is older than HISTORY / 2 by that measure, or ahead
-- of the clock (a Redlock merge from a master whose clock is ahead, a clock stepped back), or set
-- by hand: it is kept at least HISTORY / 2 past its last use (a missing one resumes above anyway).
-- counted: what the caller's INCR gave (a number), if it sent it.
local function next_fence(counted)
  local fence = counted or redis.pcall('INCR', K.fence)
  -- Another program's data (a hash, a word): say which of the lock's keys it is.
  if type(fence) == 'table' and fence.err then error(redis.error_reply('RLOCKFOREIGN fence')) end
  local now_us = tonumber(NOW_US)
  if fence == 1 then
    fence = now_us + 1
    redis.call('SET', K.fence, string.format('%.0f', fence), 'PX', HISTORY)
  elseif fence > now_us or now_us - fence > HISTORY * 500 then
    redis.call('PEXPIRE', K.fence, HISTORY)
  end
  return fence
end

local function wake(mailbox)
  redis.call('LPUSH', mailbox, '1')
  redis.call('LTRIM', mailbox, 0, 0)
  redis.call('PEXPIRE', mailbox, MAILBOX)
end

local preempt_next  -- asks the holder to stop for the first preemptor still waiting (defined below)

-- Whether id waits in the queue and is alive (its lease there has not run out).
local function still_waiting(id)
  local lease = redis.call('ZSCORE', K.wl, id)
  return lease and tonumber(lease) > NOW
end

-- Takes waiter id out of the queue. A preemptor that leaves withdraws its request to the holder,
-- unless the holder has seen it (ps: it is stopping); the next preemptor, if any, asks instead.
local function remove_waiter(id)
  bump()
  redis.call('ZREM', K.q, id)
  redis.call('ZREM', K.wl, id)
  redis.call('ZREM', K.sq, id)
  redis.call('HDEL', K.w, unpack(fields(id, WAITER_FIELDS)))
  -- (A clean :info names no preemptor.)
  if INFO_CLEAN then return end
  local asked = hmget(K.info, INFO.preemptor, INFO.preempt_seen)
  if asked[INFO.preemptor] == id and asked[INFO.preempt_seen] ~= '1' then
    redis.call('HDEL', K.info, INFO.preempt_by, INFO.preemptor)
    preempt_next()
  end
end

local function semaphore_limit()
  return tonumber(redis.call('HGET', K.sem, SEM.limit) or '1')
end

local function take_slot(limit)
  local given = redis.call('ZPOPMIN', K.free)
  if given[1] then return given[1] end
  local n = redis.call('HINCRBY', K.sem, SEM.next, 1)
  if n <= limit then return tostring(n) end
  return ''
end

local function remove_holder(id)
  bump()
  redis.call('ZREM', K.h, id)
  local slot = redis.call('HGET', K.hi, id .. '.' .. HOLDER.slot)
  if slot and slot ~= '' then
    redis.call('ZADD', K.free, slot, slot)
    NO_SEM = false
  end
  redis.call('HDEL', K.hi, unpack(fields(id, HOLDER_FIELDS)))
end

local function holder_event(kind, id, extra)
  local v = hmget_of(K.hi, id, HOLDER.host, HOLDER.pid, HOLDER.user, HOLDER.cmd, HOLDER.fence, HOLDER.since)
  local ev = {EV.host, v[HOLDER.host], EV.pid, v[HOLDER.pid], EV.user, v[HOLDER.user], EV.cmd, v[HOLDER.cmd],
              EV.fence, v[HOLDER.fence], EV.id, id}
  if v[HOLDER.since] then ev[#ev + 1] = EV.held; ev[#ev + 1] = tostring(NOW - tonumber(v[HOLDER.since])) end
  for _, x in ipairs(extra or {}) do ev[#ev + 1] = x end
  event(kind, ev)
end

-- The exclusive holder whose lease ran out without a release (it died, or was cut off): its
-- lock is handed on; the history says so. `info` outlives the lock for that.
local function note_expired()
  if NOTED then return end
  if lock_value() then return end
  NOTED = true
  local v = hmget(K.info, INFO.id, INFO.host, INFO.pid, INFO.user, INFO.cmd, INFO.fence, INFO.since, INFO.expires,
                  INFO.claimed, INFO.lingering, INFO.preempt_by, INFO.preemptor, INFO.preempt_seen, INFO.keeper,
                  INFO.watched, INFO.tick)
  if not v[INFO.id] then
    -- (What a grant does not overwrite: none of it is there, so the grant need not delete :info.)
    INFO_CLEAN = not (v[INFO.lingering] or v[INFO.preempt_by] or v[INFO.preemptor] or v[INFO.preempt_seen] or
                      v[INFO.keeper] or v[INFO.watched] or v[INFO.tick])
    return
  end
  if v[INFO.claimed] == '1' and v[INFO.lingering] ~= '1' then
    local held = ''
    if v[INFO.since] and v[INFO.expires] then held = tostring(tonumber(v[INFO.expires]) - tonumber(v[INFO.since])) end
    event(EVENT.expired, {EV.host, v[INFO.host], EV.pid, v[INFO.pid], EV.user, v[INFO.user], EV.cmd, v[INFO.cmd],
                          EV.fence, v[INFO.fence], EV.held, held, EV.id, v[INFO.id]})
  end
  redis.call('DEL', K.info)
  INFO_CLEAN = true
end

-- Removes dead entries, at most the budget: waiters whose lease ran out, holders whose lease ran
-- out (a claimed one's end goes into the history), and notices nobody came for.
local function reap()
  if REAPED or quiet() then return end
  if WORK >= BUDGET then MORE = true return end
  for _, id in ipairs(redis.call('ZRANGEBYSCORE', K.wl, '-inf', NOW, 'LIMIT', 0, BUDGET - WORK)) do
    spend()
    remove_waiter(id)
  end
  if WORK >= BUDGET then MORE = true return end
  for _, id in ipairs(redis.call('ZRANGEBYSCORE', K.h, '-inf', NOW, 'LIMIT', 0, BUDGET - WORK)) do
    spend()
    local v = hmget_of(K.hi, id, HOLDER.claimed, HOLDER.lingering)
    if v[HOLDER.claimed] == '1' and v[HOLDER.lingering] ~= '1' then holder_event(EVENT.expired, id) end
    remove_holder(id)
  end
  if WORK >= BUDGET then MORE = true return end
  for _, id in ipairs(redis.call('ZRANGEBYSCORE', K.gone, '-inf', NOW, 'LIMIT', 0, BUDGET - WORK)) do
    spend()
    redis.call('ZREM', K.gone, id)
    redis.call('HDEL', K.w, id .. '.' .. WAITER.superseded_by)
  end
  REAPED = WORK < BUDGET
end

-- The semaphore's N stays only while someone holds or waits.
local function tidy_limit()
  if quiet() or NO_SEM then return end
  if redis.call('EXISTS', K.sem, K.free) == 0 then
    NO_SEM = true
    return
  end
  if redis.call('ZCARD', K.h) == 0 and redis.call('ZCARD', K.q) == 0 then
    redis.call('DEL', K.sem, K.free)
    NO_SEM = true
  end
end

-- Every structure expires when nothing in it can matter any more: the holders' after the last
-- lease, the queue's after the last waiter's lease; nothing stays behind an unused lock.
local function set_expiries()
  if quiet() then return end
  local margin = LEASE + CLAIM
  local held = redis.call('ZRANGE', K.h, -1, -1, 'WITHSCORES')[2]
  local waited = redis.call('ZRANGE', K.wl, -1, -1, 'WITHSCORES')[2]
  local notice = redis.call('ZRANGE', K.gone, -1, -1, 'WITHSCORES')[2]
  if held then
    local at = tonumber(held) + margin
    redis.call('PEXPIREAT', K.h, at)
    redis.call('PEXPIREAT', K.hi, at)
  end
  local queue_end = waited and tonumber(waited) + margin or nil
  if queue_end then
    redis.call('PEXPIREAT', K.q, queue_end)
    redis.call('PEXPIREAT', K.wl, queue_end)
    redis.call('PEXPIREAT', K.sq, queue_end)
  end
  local w_end = queue_end
  if notice and (not w_end or tonumber(notice) > w_end) then w_end = tonumber(notice) end
  if w_end then redis.call('PEXPIREAT', K.w, w_end) end
  if notice then redis.call('PEXPIREAT', K.gone, tonumber(notice)) end
  local sem_end = held and tonumber(held) + margin or nil
  if queue_end and (not sem_end or queue_end > sem_end) then sem_end = queue_end end
  if sem_end and not NO_SEM then
    redis.call('PEXPIREAT', K.sem, sem_end)
    redis.call('PEXPIREAT', K.free, sem_end)
  end
end

-- Refuses a contender whose kind of hold (x exclusive, s shared, n a semaphore of limit) does not
-- fit the lock as others use it.
local function check_mode(mode, limit)
  -- Dead holders and waiters first: a semaphore whose holders all died is no semaphore any more.
  reap()
  note_expired()
  tidy_limit()
  local stored = not quiet() and not NO_SEM and redis.call('HGET', K.sem, SEM.limit)
  if mode == 'n' then
    if stored and tonumber(stored) ~= limit then
      return redis.error_reply('RLOCKLIMIT ' .. stored .. ' ' .. limit)
    end
    if not stored and (lock_value() or
                       (not quiet() and (redis.call('ZCARD', K.h) > 0 or redis.call('ZCARD', K.q) > 0))) then
      return redis.error_reply('RLOCKLIMIT 1 ' .. limit)
    end
  elseif stored then
    return redis.error_reply('RLOCKLIMIT ' .. stored .. ' 1')
  end
  return nil
end

-- Whether a contender of this kind could hold the lock now (the queue aside).
local function can_take(mode, limit)
  if mode == 'n' then return quiet() or redis.call('ZCARD', K.h) < limit end
  if lock_value() then return false end
  return mode == 's' or quiet() or redis.call('ZCARD', K.h) == 0
end

-- Until when a hold claimed now is kept at least with --min-hold mh (ms): '' for none. The lease
-- lasts that long (a holder that dies keeps the lock so long); the lingering after a release is
-- the release's to say (scripts/release.lua).
local function min_hold_until(mh)
  if mh and tonumber(mh) and tonumber(mh) > 0 then return tostring(NOW + tonumber(mh)) end
  return ''
end

-- The lease to set: the TTL, or longer when --min-hold keeps the lock until linger_until.
local function lease_ms(ttl, linger_until)
  local px = tonumber(ttl)
  if linger_until and linger_until ~= '' and tonumber(linger_until) - NOW > px then
    px = tonumber(linger_until) - NOW
  end
  return px
end

-- --once-per (exclusive holds only; d.tk is '' without it). A tick is done once a hold recorded
-- it, or a later one, in K.tick when it took the lock. Another contender of that tick (or an
-- earlier one) is refused: the reply's payload {tick done, its host, when (server ms), now}, and a
-- busy event that says so. The record keeps the one before it, which a give-back restores.
local function tick_refusal(id, d)
  if d.tk == '' then return nil end
  local v = hmget(K.tick, TICK.tick, TICK.host, TICK.at, TICK.id)
  local tick = v[TICK.tick]
  if not tick or tonumber(tick) < tonumber(d.tk) or v[TICK.id] == id then return nil end
  event(EVENT.busy, {EV.host, d.h, EV.pid, d.p, EV.user, d.u, EV.cmd, d.c, EV.tick, tick, EV.by, v[TICK.host],
                     EV.id, id})
  -- The payload of the reply tick_done (AT.tick_done): tick host at now.
  return {tick, v[TICK.host] or '', v[TICK.at] or '', NOW}
end

local function tick_take(id, d)
  if d.tk == '' then return end
  local v = hmget(K.tick, TICK.tick, TICK.host, TICK.at, TICK.id)
  if v[TICK.id] == id then return end
  redis.call('HSET', K.tick, TICK.tick, d.tk, TICK.host, d.h, TICK.at, NOW, TICK.id, id, TICK.previous,
             v[TICK.tick] or '', TICK.previous_host, v[TICK.host] or '', TICK.previous_at, v[TICK.at] or '')
  redis.call('PEXPIRE', K.tick, HISTORY)
  redis.call('HSET', K.info, INFO.tick, d.tk)
end

local function tick_return(id)
  local v = hmget(K.tick, TICK.id, TICK.previous, TICK.previous_host, TICK.previous_at)
  if v[TICK.id] ~= id then return end
  local previous = v[TICK.previous]
  if not previous or previous == '' then return redis.call('DEL', K.tick) end
  redis.call('HSET', K.tick, TICK.tick, previous, TICK.host, v[TICK.previous_host], TICK.at, v[TICK.previous_at],
             TICK.id, '', TICK.previous, '', TICK.previous_host, '', TICK.previous_at, '')
end

-- Gives the lock to contender d (t m h p u c ttl o mh js): for its lease when it takes it itself
-- (claimed), for the claim window when it is granted to a waiter. The minimum hold counts from
-- the claim, and on Redlock from phase 2 (merge.lua), once the quorum holds. Returns fence, slot.
local function grant(id, d, claimed, limit)
  local fence = next_fence()
  local linger_until = ''
  if claimed and not string.find(d.o or '', 'r', 1, true) then linger_until = min_hold_until(d.mh) end
  local px = claimed and lease_ms(d.ttl, linger_until) or CLAIM
  local preemptible = string.find(d.o or '', 'e', 1, true) and '1' or '0'
  local slot = ''
  if d.m == 'x' then
    note_expired()
    redis.call('SET', K.lock, d.t, 'PX', px)
    lock_written()
    NOTED = false
    if not INFO_CLEAN then redis.call('DEL', K.info) end
    INFO_CLEAN = false
    redis.call('HSET', K.info, INFO.id, id, INFO.host, d.h, INFO.pid, d.p, INFO.user, d.u, INFO.cmd, d.c, INFO.since,
               NOW, INFO.fence, fence, INFO.ttl, d.ttl, INFO.claimed, claimed and 1 or 0, INFO.expires, NOW + px,
               INFO.linger_until, linger_until, INFO.preemptible, preemptible, INFO.joined, d.js or NOW,
               INFO.history, keep_history())
    redis.call('PEXPIRE', K.info, px + HISTORY)
    if claimed then tick_take(id, d) end
  else
    QUIET = false
    bump()
    if d.m == 'n' then
      NO_SEM = false
      redis.call('HSET', K.sem, SEM.limit, limit)
      slot = take_slot(limit)
    end
    redis.call('ZADD', K.h, NOW + px, id)
    redis.call('HSET', K.hi, id .. '.' .. HOLDER.token, d.t, id .. '.' .. HOLDER.mode, d.m,
                             id .. '.' .. HOLDER.host, d.h, id .. '.' .. HOLDER.pid, d.p,
                             id .. '.' .. HOLDER.user, d.u, id .. '.' .. HOLDER.cmd, d.c,
                             id .. '.' .. HOLDER.since, NOW, id .. '.' .. HOLDER.fence, fence,
                             id .. '.' .. HOLDER.ttl, d.ttl, id .. '.' .. HOLDER.slot, slot,
                             id .. '.' .. HOLDER.claimed, claimed and 1 or 0, id .. '.' .. HOLDER.joined, d.js or NOW,
                             id .. '.' .. HOLDER.linger_until, linger_until)
  end
  return fence, slot
end

local function load_waiter(id)
  local v = hmget_of(K.w, id, unpack(WAITER_FIELDS))
  return {t = v[WAITER.token], m = v[WAITER.mode], h = v[WAITER.host], p = v[WAITER.pid], u = v[WAITER.user],
          c = v[WAITER.cmd], js = v[WAITER.since], ttl = v[WAITER.ttl], o = v[WAITER.options],
          wt = v[WAITER.watching]}
end

-- Grants the lock to the live waiters at the head of the queue that can have it now: one
-- exclusive waiter, or a run of shared ones, or as many semaphore waiters as there are free
-- slots. Dead waiters at the head are dropped on the way, never granted.
local function advance()
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
    if not d or not d.t then
      if not spend() then break end
      remove_waiter(id)  -- dead (its lease ran out), or half-written: drop it
    else
      if d.m == 'n' and not limit then limit = semaphore_limit() end
      if not can_take(d.m, limit) then break end
      if not spend() then break end
      remove_waiter(id)
      grant(id, d, false, limit)
      -- It sleeps on someone else's mailbox (a waiter dropped since), or is a preemptor, which
      -- may not watch the exclusive holder (see waiting): the caller wakes it on its own mailbox,
      -- twice, as the waiter behind it watches that mailbox too and may take one push (its
      -- heartbeat, 2.5s behind others, would come after the claim window).
      if (d.wt ~= CALLER or string.find(d.o or '', 'p', 1, true)) and id ~= CALLER then
        PUSH[#PUSH + 1] = id
        PUSH[#PUSH + 1] = id
      end
      -- A preemptible one granted while a preemptor waits is asked to stop at once.
      if d.m == 'x' and string.find(d.o or '', 'e', 1, true) then preempt_next() end
      if d.m == 'x' then break end
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
  local v = hmget_of(K.hi, id, HOLDER.token, HOLDER.fence, HOLDER.slot, HOLDER.claimed)
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
local function claim(id, mode, ttl, d, known)
  local js
  local linger_until = min_hold_until(d.mh)
  if mode == 'x' then
    local v = known or hmget(K.info, INFO.joined, INFO.fence)
    local px = lease_ms(ttl, linger_until)
    js = v[INFO.joined]
    redis.call('PEXPIRE', K.lock, px)
    VIEW = nil  -- (its lease moved)
    bump()
    redis.call('HSET', K.info, INFO.claimed, 1, INFO.expires, NOW + px, INFO.linger_until, linger_until)
    redis.call('PEXPIRE', K.info, px + HISTORY)
    tick_take(id, d)
    event(EVENT.acquired, {EV.host, d.h, EV.pid, d.p, EV.user, d.u, EV.cmd, d.c, EV.fence, v[INFO.fence],
                           EV.waited, js and tostring(NOW - tonumber(js)) or '', EV.id, id})
  else
    local v = hmget_of(K.hi, id, HOLDER.joined, HOLDER.fence)
    js = v[HOLDER.joined]
    redis.call('ZADD', K.h, 'XX', NOW + lease_ms(ttl, linger_until), id)
    bump()
    redis.call('HSET', K.hi, id .. '.' .. HOLDER.claimed, 1, id .. '.' .. HOLDER.linger_until, linger_until)
    event(EVENT.acquired, {EV.host, d.h, EV.pid, d.p, EV.user, d.u, EV.cmd, d.c, EV.fence, v[HOLDER.fence],
                           EV.waited, js and tostring(NOW - tonumber(js)) or '', EV.id, id})
    -- Whoever waits behind it may be granted too (a run of shared waiters, free slots) or must
    -- now watch every holder: wake it.
    wake(K.mb)
  end
end

-- Tells the superseded waiter id to leave (it reads the notice at its next step; the caller
-- pushes its mailbox so that this is at once).
local function supersede(id, by)
  QUIET = false
  local d = load_waiter(id)
  remove_waiter(id)
  redis.call('HSET', K.w, id .. '.' .. WAITER.superseded_by, by)
  redis.call('ZADD', K.gone, NOW + 4 * LEASE, id)
  event(EVENT.superseded, {EV.host, d.h, EV.pid, d.p, EV.user, d.u, EV.cmd, d.c,
                           EV.waited, d.js and tostring(NOW - tonumber(d.js)) or '', EV.by, by, EV.id, id})
  PUSH[#PUSH + 1] = id
end

-- Who a contender is, for notices and the history: "host\tpid\tuser\tcmd".
local function who(d)
  return (d.h or '') .. '\t' .. (d.p or '') .. '\t' .. (d.u or '') .. '\t' .. (d.c or '')
end

-- A place in the queue: in arrival order, or with preempt at the front (behind earlier
-- preemptors, whose scores are below 0). A superseding waiter replaces the older superseding ones.
-- at: the score of a waiter that joins again in its old order (see rejoin_at), else nil; it
-- replaces only the superseding ones that arrived before it.
local function enqueue(id, d, preempt, at)
  QUIET = false
  bump()
  local score = at
  if score then
    -- (In its place among the others, whose scores it does not repeat: one of its old master.)
  elseif preempt then
    local last = redis.call('ZREVRANGEBYSCORE', K.q, '(0', '-inf', 'WITHSCORES', 'LIMIT', 0, 1)
    score = tonumber(NOW_US) - 4e15
    if last[2] and tonumber(last[2]) >= score then score = tonumber(last[2]) + 1 end
  else
    local last = redis.call('ZRANGE', K.q, -1, -1, 'WITHSCORES')
    score = tonumber(NOW_US)
    if last[2] and tonumber(last[2]) >= score then score = tonumber(last[2]) + 1 end
  end
  if string.find(d.o or '', 's', 1, true) then
    for _, old in ipairs(redis.call('ZRANGEBYSCORE', K.sq, '-inf', at and '(' .. string.format('%.0f', at) or '+inf',
                                    'LIMIT', 0, BUDGET)) do
      if not spend() then break end
      supersede(old, who(d))
    end
    redis.call('ZADD', K.sq, score, id)
  end
  redis.call('ZADD', K.q, score, id)
  JOINED = score
  if at then
    -- Ahead of waiters already queued: the one now just behind it still watches the mailbox of
    -- the one before it (or the holder's), whose push at the hand-off it may take instead of this
    -- waiter (see advance). It is woken to step and watch this one (twice: the one behind it
    -- watches its mailbox too).
    local next_rank = redis.call('ZRANK', K.q, id) + 1
    local behind = redis.call('ZRANGE', K.q, next_rank, next_rank)[1]
    if behind then
      PUSH[#PUSH + 1] = behind
      PUSH[#PUSH + 1] = behind
    end
  end
  redis.call('ZADD', K.wl, NOW + LEASE, id)
  redis.call('HSET', K.w, id .. '.' .. WAITER.token, d.t, id .. '.' .. WAITER.mode, d.m,
                          id .. '.' .. WAITER.host, d.h, id .. '.' .. WAITER.pid, d.p, id .. '.' .. WAITER.user, d.u,
                          id .. '.' .. WAITER.cmd, d.c, id .. '.' .. WAITER.since, NOW,
                          id .. '.' .. WAITER.ttl, d.ttl, id .. '.' .. WAITER.options, d.o or '')
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
  local now = tonumber(NOW_US) - (preempt and 4e15 or 0)
  local earliest = now - (w + 1000) * 1000
  if at > now then at = now end
  if at < earliest then at = earliest end
  return at
end

-- The first preemptor in the queue, or nil.
local function first_preemptor()
  return redis.call('ZRANGEBYSCORE', K.q, '-inf', '(0', 'LIMIT', 0, 1)[1]
end

-- The holder as the others see it: host, pid, cmd, since, lingering (0/1), ms until its lease
-- (or the earliest of the shared ones) ends, or -1.
--
-- view: what check_types read (VIEW), when nothing the holder's view shows has been written since.
local function holder_view(view)
  local value = lock_value()
  if value and view and view.value == value then
    local v = view.info
    return v[INFO.host] or '', v[INFO.pid] or '', v[INFO.cmd] or '', v[INFO.since] or '',
           v[INFO.lingering] == '1' and 1 or 0, view.pttl
  end
  if value then
    local v = hmget(K.info, INFO.host, INFO.pid, INFO.cmd, INFO.since, INFO.lingering)
    return v[INFO.host] or '', v[INFO.pid] or '', v[INFO.cmd] or '', v[INFO.since] or '',
           v[INFO.lingering] == '1' and 1 or 0, redis.call('PTTL', K.lock)
  end
  local first = redis.call('ZRANGE', K.h, 0, 0, 'WITHSCORES')
  if first[1] then
    local id = first[1]
    local v = hmget_of(K.hi, id, HOLDER.host, HOLDER.pid, HOLDER.cmd, HOLDER.since, HOLDER.lingering)
    return v[HOLDER.host] or '', v[HOLDER.pid] or '', v[HOLDER.cmd] or '', v[HOLDER.since] or '',
           v[HOLDER.lingering] == '1' and 1 or 0,
           math.max(0, math.floor(tonumber(first[2]) - NOW))
  end
  return '', '', '', '', 0, -1
end

-- The epoch of what waiters see, for the light heartbeat (beat.lua). K.ep holds "epoch due":
-- the epoch (the server's clock in us when it began: never the same twice), and until when
-- nothing time-based can be due (0: a light step never stands for a full one): the first waiter's
-- lease and the exclusive holder's lease, whichever ends first. Every change drops it (bump); a
-- step that changes nothing keeps the epoch and sets the due time again. The light step renews
-- the caller's lease only before the first lease ends, so the queue's keys still outlive it by the
-- claim window (set_expiries).
local function view_epoch()
  local v = redis.pcall('GET', K.ep)
  local epoch = type(v) == 'string' and string.match(v, '^(%d+) ') or NOW_US
  local due = 0
  if lock_value() then
    local view = current_view()
    local pttl = view and view.pttl or redis.call('PTTL', K.lock)
    local first = redis.call('ZRANGE', K.wl, 0, 0, 'WITHSCORES')[2]
    if pttl > 0 and first then due = math.min(NOW + pttl, tonumber(first)) end
  end
  redis.call('SET', K.ep, epoch .. ' ' .. due, 'PX', math.max(due - NOW, 0) + LEASE + CLAIM)
  EP_DROPPED = false
  return epoch
end

-- What a waiter needs to go on waiting: {3, more, push, position, queue length, since (server
-- ms), now, holder host, pid, cmd, holder since, lingering, ms left of the holder's lease (-1:
-- none; the head waits no longer than that), the epoch (view_epoch), then the ids whose mailboxes
-- to watch}. The watched
-- id is recorded, so that a grant after it was dropped pushes the waiter's own mailbox. A
-- preemptor does not watch a --preemptible exclusive holder that has not yet seen its request,
-- as its steps push that mailbox: its grant pushes its own.
local function waiting(id)
  local rank = redis.call('ZRANK', K.q, id)
  local watch = {}
  local view = current_view()
  local host, pid, cmd, since, lingering, left = holder_view(view)
  if rank > 0 then
    watch[1] = redis.call('ZRANGE', K.q, rank - 1, rank - 1)[1]
    left = -1
  else
    local holder = lock_value() and ((view and view.info[INFO.id]) or redis.call('HGET', K.info, INFO.id))
    if holder and string.find(redis.call('HGET', K.w, id .. '.' .. WAITER.options) or '', 'p', 1, true) then
      local asked = hmget(K.info, INFO.preemptible, INFO.preempt_seen)
      if asked[INFO.preemptible] == '1' and asked[INFO.preempt_seen] ~= '1' then holder = nil end
    end
    if holder then watch[#watch + 1] = holder end
    for _, h in ipairs(redis.call('ZRANGE', K.h, 0, 63)) do watch[#watch + 1] = h end
  end
  redis.call('HSET', K.w, id .. '.' .. WAITER.watching, watch[1] or '')
  local out = reply(CODE.waiting)
  local at = AT.waiting
  out[at.position], out[at.queued] = rank + 1, redis.call('ZCARD', K.q)
  out[at.since], out[at.now] = redis.call('HGET', K.w, id .. '.' .. WAITER.since) or '', NOW
  out[at.host], out[at.pid], out[at.cmd], out[at.held_since] = host, pid, cmd, since
  out[at.lingering], out[at.left] = lingering, left
  out[at.epoch] = view_epoch()
  out[at.arrival] = JOINED and string.format('%.0f', JOINED) or ''
  for i, x in ipairs(watch) do out[at.watch + i - 1] = x end
  return out
end

-- The contender described by ARGV[2..12]: token ttl host pid user cmd mode limit options
-- min_hold_ms tick (--once-per: the tick it runs for, ms since the epoch; '' without). Options:
-- q (join the queue if it cannot be taken now), s (supersede), p (preempt), e (preemptible), r
-- (Redlock's phase 1: the acquisition is recorded by phase 2).
local function contender()
  return {t = ARGS[2], ttl = ARGS[3], h = ARGS[4], p = ARGS[5], u = ARGS[6], c = ARGS[7], m = ARGS[8], o = ARGS[10],
          mh = ARGS[11], tk = ARGS[12] or ''},
         tonumber(ARGS[9])
end

-- What acquire and wait start with: the contender, its id and limit, once the lock's keys hold
-- rlock's data and its kind of hold fits; else the error to return.
local function prologue()
  local d, limit = contender()
  local bad = check_types(d.t)
  if bad then return nil, nil, nil, bad end
  CALLER = id_of(d.t)
  bad = check_mode(d.m, limit)
  return d, CALLER, limit, bad
end

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
    lock_written()
    return true
  end
  if v[INFO.preempt_seen] == '1' then return true end
  local asker = v[INFO.preemptor]
  if asker and asker ~= id and still_waiting(asker) then return true end
  redis.call('HSET', K.info, INFO.preempt_by, who(d), INFO.preemptor, id)
  PUSH[#PUSH + 1] = v[INFO.id]
  return true
end

preempt_next = function()
  local first = first_preemptor()
  if first and still_waiting(first) then preempt(load_waiter(first), first) end
end

-- This call's state. (The function library leaves this line out: each of its functions calls
-- begin with its own KEYS and ARGV.)
begin(KEYS, ARGV)
